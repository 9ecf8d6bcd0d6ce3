#include "forge/io/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "forge/core/error.h"

namespace forge {

FolderLock::FolderLock(const std::string& folder, const std::string& who) {
  const std::string path = folder + "/.forge-train.lock";
  // O_NOFOLLOW: a symlink planted there would have had its target overwritten with the pid.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof(pid) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) fail("{}: cannot lock: {}", path, std::strerror(err));
    std::string holder(pid, n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    fail(
        "{}: another {} (pid {}) is writing this run folder; wait for it to end, or choose "
        "another --out-dir",
        folder, who, holder.empty() ? "unknown" : holder);
  }
  // The holder's pid, for the message above; the lock itself is the flock, not the content.
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    // Only the message loses the pid: the lock is held all the same.
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace forge
