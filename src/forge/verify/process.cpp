#include "forge/verify/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>

#include "forge/core/error.h"
#include "forge/core/stop_signals.h"

extern char** environ;

namespace forge::verify {

namespace {

bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-./=:,@+%", c))) return true;
  return false;
}

}  // namespace

int run_command(const Command& cmd) {
  FORGE_CHECK(!cmd.argv.empty(), "empty command");
  // The environment is built before spawning: nothing after the spawn touches the parent's.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& k : cmd.unset_env) env.erase(k);
  for (const auto& [k, v] : cmd.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = cmd.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  struct Cleanup {
    posix_spawn_file_actions_t* a;
    ~Cleanup() { posix_spawn_file_actions_destroy(a); }
  } cleanup{&actions};
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (!cmd.stdout_path.empty())
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, cmd.stdout_path.c_str(),
                                     flags & ~O_CLOEXEC, 0644);
  if (!cmd.stderr_path.empty()) {
    if (cmd.stderr_path == cmd.stdout_path)
      posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    else
      posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, cmd.stderr_path.c_str(),
                                       flags & ~O_CLOEXEC, 0644);
  }
  pid_t pid = 0;
  const std::string& file = cmd.exec_path.empty() ? cmd.argv[0] : cmd.exec_path;
  int status = 0;
  int received = 0;
  {
    // A SIGINT or SIGTERM sent to verify alone (kill PID, a scheduler) left the command it was
    // waiting for running, orphaned. While it waits, such a signal is passed on to the command
    // (waitpid returns EINTR for it), and once the command has ended verify ends by it.
    const StopSignals forward(true, /*restart_calls=*/false);
    const int rc = posix_spawn(&pid, file.c_str(), &actions, nullptr, argv.data(), envp.data());
    if (rc != 0) fail("cannot run {}: {}", cmd.argv[0], std::strerror(rc));
    while (true) {
      if (forward.requested() != 0 && received == 0) {
        received = forward.requested();
        ::kill(pid, received);
      }
      if (waitpid(pid, &status, 0) >= 0) break;
      if (errno != EINTR) fail("waiting for {}: {}", cmd.argv[0], std::strerror(errno));
    }
    if (received == 0) received = forward.requested();  // arrived as the command ended
  }
  if (received != 0) std::raise(received);  // the default action, restored above
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

std::string self_executable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink(kSelfExe, ec);
  if (ec) fail("/proc/self/exe: cannot find the running forge binary: {}", ec.message());
  return p.string();
}

std::string tail_lines(const std::string& path, int n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    if (!needs_quotes(a)) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace forge::verify
