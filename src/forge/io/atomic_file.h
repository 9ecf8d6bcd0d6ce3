// Atomic file writes: write to a temporary file beside the target, fsync, rename, fsync dir.
// A crash or an error leaves either the old file or the new one, never a partial one.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace forge {

// Calls fill(fd-backed FILE*) on a temporary file and renames it onto path when fill returns.
// On any error the temporary file is removed and forge::Error names path.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& fill);
void write_text_atomic(const std::string& path, std::string_view text);
// Creates dir (and parents); throws naming dir if it cannot be created or written into.
void ensure_writable_dir(const std::string& dir);
// Throws naming `option` and path unless write_file_atomic could write path now: its folder
// exists and takes a new file, and path is not a folder. Creates nothing; for outputs written
// after a long run, checked before it.
void check_writable_file(const std::string& path, const char* option);
std::string read_text_file(const std::string& path);  // throws naming path

// A command's output folder, made (with its missing parents) by ensure_writable_dir. Destroyed
// while an exception is in flight, it removes again each folder it made that is still empty,
// so that a command that fails before writing its output leaves no folder behind.
class OutputFolder {
 public:
  explicit OutputFolder(const std::string& dir);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

 private:
  std::vector<std::string> made_;  // deepest first
};

}  // namespace forge
