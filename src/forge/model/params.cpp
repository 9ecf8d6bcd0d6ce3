#include "forge/model/params.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "forge/core/error.h"

namespace forge {

std::vector<int64_t> ParamSpec::file_shape() const {
  if (file_transposed && shape.size() == 2) return {shape[1], shape[0]};
  return shape;
}

size_t ParamLayout::add(std::string name, std::vector<int64_t> shape, bool file_transposed,
                        bool decay) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.file_transposed = file_transposed;
  p.decay = decay;
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= static_cast<size_t>(d);
  p.offset = total_;
  total_ += (p.numel + 15) / 16 * 16;
  tensors_.push_back(std::move(p));
  return tensors_.back().offset;
}

const ParamSpec& ParamLayout::find(const std::string& name) const {
  for (const auto& p : tensors_)
    if (p.name == name) return p;
  fail("model has no parameter named '{}'", name);
}

size_t ParamLayout::numel() const {
  size_t n = 0;
  for (const auto& p : tensors_) n += p.numel;
  return n;
}

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("FORGE_HUGE_PAGES");
    if (!v || !*v || std::strcmp(v, "1") == 0) return true;
    if (std::strcmp(v, "0") == 0) return false;
    fail("environment FORGE_HUGE_PAGES: expected 0 or 1, got '{}'", v);
  }();
  return wanted;
}

}  // namespace

FloatBuffer::~FloatBuffer() { std::free(ptr_); }

FloatBuffer::FloatBuffer(FloatBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}

FloatBuffer& FloatBuffer::operator=(FloatBuffer&& o) noexcept {
  if (this != &o) {
    std::free(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

void FloatBuffer::resize(size_t n) {
  std::free(ptr_);
  ptr_ = nullptr;
  n_ = n;
  if (n == 0) return;
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  const bool huge = bytes >= kHugePage && huge_pages_wanted();
  if (huge) bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  ptr_ = static_cast<float*>(std::aligned_alloc(huge ? kHugePage : 64, bytes));
  if (!ptr_) fail("out of memory: cannot allocate {} MiB", bytes >> 20);
  if (huge) ::madvise(ptr_, bytes, MADV_HUGEPAGE);  // advice only: a refusal changes nothing
  std::memset(ptr_, 0, bytes);
}

void FloatBuffer::zero() {
  if (ptr_) std::memset(ptr_, 0, n_ * sizeof(float));
}

}  // namespace forge
