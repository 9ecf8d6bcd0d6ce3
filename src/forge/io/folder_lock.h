// One writer per run folder: `forge train` holds an exclusive lock on OUT/.forge-train.lock
// for as long as it runs, so that a second run (or a resume) started on the same folder is
// refused in one line instead of interleaving its checkpoints and metrics with the first's,
// or removing the first's checkpoint in progress as a killed writer's leftover. The lock is
// the kernel's (flock): it goes with the process, however that ends, so none is ever stale.
#pragma once

#include <string>

namespace forge {

class FolderLock {
 public:
  // Takes the lock of `folder` (which must exist), or throws forge::Error naming the process
  // that holds it. `who` says what the holder is, for the message ("forge train").
  FolderLock(const std::string& folder, const std::string& who);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace forge
