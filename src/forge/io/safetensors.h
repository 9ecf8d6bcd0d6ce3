// safetensors: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the raw bytes.
// One reader and one writer; the writer is atomic (temporary file, fsync, rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "forge/io/mapped_file.h"

namespace forge {

enum class DType { F32, F64, BF16, F16, I32, I64, U8, U16 };
const char* dtype_name(DType d);  // "F32", ...
size_t dtype_size(DType d);

struct TensorInfo {
  DType dtype;
  std::vector<int64_t> shape;
  size_t offset = 0;  // byte offset into the data section
  size_t nbytes = 0;
  int64_t numel() const;
};

// Read side: the whole file is memory-mapped; tensors are views into it.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws Error on a malformed file

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws naming file and tensor
  std::vector<std::string> names() const;                 // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const void* data(const std::string& name) const;

  // Copies an F32 tensor into dst after checking its dtype and exact shape; the error
  // names the file, the tensor, the expected and the found shape.
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* dst) const;

 private:
  std::string path_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  MappedFile file_;
  size_t data_start_ = 0;
};

// Write side: collect views, then write once. Data pointers must stay valid until write().
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const float* data) {
    add(name, DType::F32, std::move(shape), data);
  }
  void set_metadata(const std::string& key, const std::string& value);
  // Writes path atomically: path.tmp.<pid>, fsync, rename; on error nothing is left behind.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace forge
