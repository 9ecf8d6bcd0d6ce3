// Child processes for `forge verify`: the engine and the reference each run as their own
// process (EQUIVALENCE.md: neither side may see what the other computes during a run).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace forge::verify {

struct Command {
  std::vector<std::string> argv;           // argv[0] is an absolute path, not looked up
  std::string exec_path;                   // run this file instead of argv[0] when set
  std::map<std::string, std::string> env;  // set on top of this process's environment
  std::vector<std::string> unset_env;      // removed from the child's environment
  std::string stdout_path;                 // empty: inherit
  std::string stderr_path;                 // empty: inherit; same as stdout_path: merged
};

// Runs the command to completion. Returns its exit status, 128 + signal when killed, and
// throws forge::Error when it cannot be started at all.
int run_command(const Command& cmd);

// The running executable, so that a bug-enabled build verifies itself. Children are started
// from kSelfExe itself: a rebuild that replaces the file on disk mid-run cannot swap engines.
inline constexpr const char* kSelfExe = "/proc/self/exe";
std::string self_executable();  // its path, for reports

// The last n lines of a text file (empty when it cannot be read).
std::string tail_lines(const std::string& path, int n);

// argv joined for display, quoting what a shell would need quoted.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace forge::verify
