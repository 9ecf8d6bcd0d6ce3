// A file mapped read-only into memory: token shards and safetensors checkpoints are read this
// way, without a copy. A file truncated or rewritten in place while mapped makes the next read
// of a page past its new end a SIGBUS; every mapping is listed where the SIGBUS handler
// (install_mapped_file_bus_handler) can find it, so that the process ends with a line naming
// the file instead of a bare "Bus error".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace forge {

class MappedFile {
 public:
  // Maps `path`; `what` names the file's kind in errors ("token shard", "safetensors file").
  // Throws forge::Error naming the path for a file that cannot be opened or is not a regular
  // file. An empty file maps to data() == nullptr, size() == 0.
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;  // in the SIGBUS handler's list; -1 when not listed
};

// SIGBUS: writes "forge: error: FILE was truncated or rewritten in place while in use ..." for
// a fault inside a listed mapping (a generic line otherwise) and exits with status 1.
void install_mapped_file_bus_handler();

}  // namespace forge
