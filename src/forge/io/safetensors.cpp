#include "forge/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/kernels/bf16_gemm.h"  // scalar::bf16_to_float

namespace forge {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; forge assumes a little-endian host");

namespace {

// IEEE half: 1 sign, 5 exponent (bias 15), 10 fraction bits; every value is an fp32 exactly.
float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exponent = (h >> 10) & 0x1f;
  const uint32_t fraction = h & 0x3ffu;
  if (exponent == 0x1f)  // inf, NaN (payload kept)
    return std::bit_cast<float>(sign | 0x7f800000u | (fraction << 13));
  if (exponent == 0) {  // zero, subnormal: fraction x 2^-24
    const float magnitude = std::ldexp(static_cast<float>(fraction), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | static_cast<uint32_t>(exponent - 15 + 127) << 23 |
                              fraction << 13);
}

using nlohmann::json;

// Python's safetensors refuses headers above 100 MB; a larger length means a foreign file.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

struct DTypeName {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {DType::F32, "F32", 4}, {DType::F64, "F64", 8}, {DType::BF16, "BF16", 2},
    {DType::F16, "F16", 2}, {DType::I32, "I32", 4}, {DType::I64, "I64", 8},
    {DType::U8, "U8", 1},   {DType::U16, "U16", 2},
};

bool parse_dtype(const std::string& s, DType& out) {
  for (const auto& d : kDTypes)
    if (s == d.name) {
      out = d.dtype;
      return true;
    }
  return false;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes a tensor of this shape needs; fails on negative dimensions or overflow.
bool checked_nbytes(const std::vector<int64_t>& shape, size_t elem, size_t& out) {
  unsigned __int128 n = elem;
  for (int64_t d : shape) {
    if (d < 0) return false;
    n *= static_cast<uint64_t>(d);
    if (n > static_cast<unsigned __int128>(SIZE_MAX)) return false;
  }
  out = static_cast<size_t>(n);
  return true;
}

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(path, "safetensors file") {
  const uint8_t* const map = file_.data();
  const size_t file_size = file_.size();
  if (file_size < 8)
    fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path,
         file_size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, map, 8);
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8)
    fail("{}: not a safetensors file: header length {} does not fit in the file of {} bytes", path,
         header_len, file_size);
  data_start_ = 8 + static_cast<size_t>(header_len);
  const size_t data_size = file_size - data_start_;

  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(map + 8),
                         reinterpret_cast<const char*>(map + data_start_));
  } catch (const json::parse_error& e) {
    fail("{}: malformed safetensors header JSON at byte {}: {}", path, 8 + e.byte, e.what());
  }
  if (!header.is_object()) fail("{}: safetensors header must be a JSON object", path);

  struct Span {
    size_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: '__metadata__' must be an object of strings", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail("{}: '__metadata__' field '{}': expected a string", path, m.key());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object())
      fail("{}: tensor '{}': expected an object with dtype, shape, data_offsets", path, name);
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        fail("{}: tensor '{}': unknown field '{}'", path, name, f.key());
    TensorInfo info{};
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string())
      fail("{}: tensor '{}': missing string field 'dtype'", path, name);
    if (!parse_dtype(dt->get<std::string>(), info.dtype))
      fail("{}: tensor '{}': unsupported dtype '{}' (expected F32|F64|BF16|F16|I32|I64|U8|U16)",
           path, name, dt->get<std::string>());
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array())
      fail("{}: tensor '{}': missing array field 'shape'", path, name);
    for (const json& d : *sh) {
      if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0))
        fail("{}: tensor '{}': shape {} must hold non-negative integers", path, name, sh->dump());
      info.shape.push_back(d.get<int64_t>());
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail("{}: tensor '{}': 'data_offsets' must be [begin, end] with non-negative integers", path,
           name);
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}] outside the data section of {} bytes", path,
           name, begin, end, data_size);
    info.offset = static_cast<size_t>(begin);
    info.nbytes = static_cast<size_t>(end - begin);
    size_t expected = 0;
    if (!checked_nbytes(info.shape, dtype_size(info.dtype), expected) || expected != info.nbytes)
      fail("{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets span {}", path, name,
           shape_str(info.shape), dtype_name(info.dtype), expected, info.nbytes);
    auto [pos, inserted] = tensors_.emplace(name, std::move(info));
    spans.push_back({pos->second.offset, pos->second.offset + pos->second.nbytes, &pos->first});
  }
  // Tensors must tile the data section exactly: no gaps, no overlaps, no trailing bytes.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t cursor = 0;
  for (const Span& s : spans) {
    if (s.begin < cursor)
      fail("{}: tensor '{}': data_offsets overlap the previous tensor", path, *s.name);
    if (s.begin > cursor)
      fail("{}: tensor '{}': gap of {} bytes before its data", path, *s.name, s.begin - cursor);
    cursor = s.end;
  }
  if (cursor != data_size)
    fail("{}: data section holds {} bytes but the tensors cover {} (truncated or trailing data)",
         path, data_size, cursor);
}

bool SafetensorsFile::contains(const std::string& name) const { return tensors_.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("{}: no tensor named '{}'", path_, name);
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

const void* SafetensorsFile::data(const std::string& name) const {
  return file_.data() + data_start_ + info(name).offset;
}

void SafetensorsFile::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                               float* dst) const {
  const TensorInfo& ti = info(name);
  if (ti.dtype != DType::F32 && ti.dtype != DType::BF16 && ti.dtype != DType::F16)
    fail("{}: tensor '{}': expected dtype F32 (or BF16, F16, which widen exactly), found {}", path_,
         name, dtype_name(ti.dtype));
  if (ti.shape != shape)
    fail("{}: tensor '{}': expected shape {}, found {}", path_, name, shape_str(shape),
         shape_str(ti.shape));
  // The data section need not be aligned in files from other writers, so copy bytes.
  if (ti.dtype == DType::F32) {
    if (ti.nbytes) std::memcpy(dst, data(name), ti.nbytes);
    return;
  }
  // Half-width weights (most published Llama checkpoints are BF16) become fp32 exactly.
  const auto* src = static_cast<const unsigned char*>(data(name));
  const int64_t n = ti.numel();
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h = 0;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = ti.dtype == DType::BF16 ? kernels::scalar::bf16_to_float(h) : f16_to_float(h);
  }
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  if (name.empty() || name == "__metadata__")
    fail("safetensors writer: invalid tensor name '{}'", name);
  for (const Entry& e : entries_)
    if (e.name == name) fail("safetensors writer: tensor '{}' added twice", name);
  size_t nbytes = 0;
  if (!checked_nbytes(shape, dtype_size(dtype), nbytes))
    fail("safetensors writer: tensor '{}': invalid shape {}", name, shape_str(shape));
  if (nbytes > 0 && data == nullptr) fail("safetensors writer: tensor '{}': null data", name);
  entries_.push_back({name, dtype, std::move(shape), data});
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::vector<size_t> sizes;
  size_t offset = 0;
  for (const Entry& e : entries_) {
    size_t nbytes = 0;
    checked_nbytes(e.shape, dtype_size(e.dtype), nbytes);
    header[e.name] = {{"dtype", dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  std::string text = header.dump();
  // The format allows trailing spaces; padding keeps the data section 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  write_file_atomic(path, [&](std::FILE* f) {
    auto put = [&](const void* p, size_t n) {
      if (n && std::fwrite(p, 1, n, f) != n)
        fail("{}: write failed: {}", path, std::strerror(errno));
    };
    put(&header_len, 8);
    put(text.data(), text.size());
    for (size_t i = 0; i < entries_.size(); ++i) put(entries_[i].data, sizes[i]);
  });
}

}  // namespace forge
