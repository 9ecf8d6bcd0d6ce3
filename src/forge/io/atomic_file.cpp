#include "forge/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "forge/core/error.h"

namespace forge {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string parent_dir(const std::string& path) {
  std::filesystem::path p(path);
  std::filesystem::path parent = p.parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// The rename is only durable once the directory entry itself reaches the disk.
void fsync_dir(const std::string& dir, const std::string& target) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("{}: cannot open directory {} to sync it: {}", target, dir, errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; that is not a failed write.
  if (rc != 0 && err != EINVAL && err != EROFS)
    fail("{}: cannot sync directory {}: {}", target, dir, errno_text(err));
}

// Runs fill on f, then flushes and syncs it and closes it; on any failure closes it, calls
// discard (which removes whatever name the file has) and throws naming path.
void fill_sync_close(std::FILE* f, const std::string& path,
                     const std::function<void(std::FILE*)>& fill,
                     const std::function<void()>& discard) {
  auto abandon = [&](const std::string& what, int err) {
    if (f) std::fclose(f);
    discard();
    if (err != 0) fail("{}: {}: {}", path, what, errno_text(err));
    fail("{}: {}", path, what);
  };
  try {
    fill(f);
  } catch (const Error&) {
    std::fclose(f);
    discard();
    throw;
  } catch (const std::exception& e) {
    abandon(std::string("write failed: ") + e.what(), 0);
  }
  if (std::ferror(f)) abandon("write failed", errno ? errno : EIO);
  if (std::fflush(f) != 0) abandon("write failed (flush)", errno);
  if (::fsync(::fileno(f)) != 0) abandon("write failed (fsync)", errno);
  if (std::fclose(f) != 0) {
    f = nullptr;
    abandon("write failed (close)", errno);
  }
}

// The contents go to an unnamed file in the target's directory (O_TMPFILE), which the kernel
// deletes if the process dies before it is linked in: a rank killed while checkpointing leaves
// no partial file behind. Returns false, having written nothing visible, where the filesystem
// or a missing /proc does not allow it.
bool write_unnamed_then_link(const std::string& path, const std::string& tmp,
                             const std::function<void(std::FILE*)>& fill) {
#ifdef O_TMPFILE
  const int fd = ::open(parent_dir(path).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  // Linked through /proc while still open: its path dies with the descriptor.
  const int keep = ::dup(fd);
  std::FILE* f = keep >= 0 ? ::fdopen(fd, "wb") : nullptr;
  if (!f) {
    ::close(fd);
    if (keep >= 0) ::close(keep);
    return false;
  }
  try {
    fill_sync_close(f, path, fill, [] {});
  } catch (...) {
    ::close(keep);
    throw;
  }
  // linkat cannot replace an existing file, so the whole file gets a temporary name and is
  // renamed over the target at once: the only window left is between these two calls.
  const std::string proc = "/proc/self/fd/" + std::to_string(keep);
  const bool linked =
      ::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0;
  const int link_err = errno;
  ::close(keep);
  if (!linked) {
    if (link_err == ENOENT || link_err == EPERM || link_err == EOPNOTSUPP || link_err == EXDEV)
      return false;  // no /proc, or a filesystem that will not link it: the named route
    fail("{}: cannot link the written file into {}: {}", path, parent_dir(path),
         errno_text(link_err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("{}: cannot rename temporary file onto it: {}", path, errno_text(err));
  }
  fsync_dir(parent_dir(path), path);
  return true;
#else
  (void)path;
  (void)tmp;
  (void)fill;
  return false;
#endif
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& fill) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  if (write_unnamed_then_link(path, tmp, fill)) return;
  // Fallback: a named temporary file, renamed over the target when complete.
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create temporary file {}: {}", path, tmp, errno_text(errno));
  const auto remove_tmp = [&] { std::remove(tmp.c_str()); };
  fill_sync_close(f, path, fill, remove_tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    remove_tmp();
    fail("{}: cannot rename temporary file onto it: {}", path, errno_text(err));
  }
  fsync_dir(parent_dir(path), path);
}

void write_text_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, [&](std::FILE* f) {
    if (!text.empty() && std::fwrite(text.data(), 1, text.size(), f) != text.size())
      fail("{}: write failed: {}", path, errno_text(errno));
  });
}

namespace {

// 0 when a file can be made in dir now, else the errno of trying. access() lies for root and on
// some mounts, so a file is actually created and removed.
int file_creation_error(const std::string& dir) {
  const std::string probe =
      (std::filesystem::path(dir) / (".forge_probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

}  // namespace

void ensure_writable_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create directory: {}", dir, ec.message());
  if (!std::filesystem::is_directory(dir, ec)) fail("{}: exists but is not a directory", dir);
  if (const int err = file_creation_error(dir))
    fail("{}: directory is not writable: {}", dir, errno_text(err));
}

void check_writable_file(const std::string& path, const char* option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) fail("{}: expected a file name, got an empty one", option);
  if (fs::is_directory(path, ec)) fail("{}: {} is a folder, expected a file", option, path);
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(dir, ec))
    fail("{}: cannot write {}: its folder {} does not exist", option, path, dir);
  if (const int err = file_creation_error(dir))
    fail("{}: cannot write {}: {}", option, path, errno_text(err));
}

OutputFolder::OutputFolder(const std::string& dir) {
  std::error_code ec;
  for (std::filesystem::path p = std::filesystem::absolute(dir, ec).lexically_normal();
       !p.empty() && !std::filesystem::exists(p, ec) && p != p.parent_path(); p = p.parent_path())
    made_.push_back(p.string());
  ensure_writable_dir(dir);
}

OutputFolder::~OutputFolder() {
  if (std::uncaught_exceptions() == 0) return;
  std::error_code ec;  // a folder that is not empty (or not ours to remove) stays
  for (const std::string& p : made_) std::filesystem::remove(p, ec);
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{}: cannot open: is a directory", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, errno_text(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read failed", path);
  return ss.str();
}

}  // namespace forge
