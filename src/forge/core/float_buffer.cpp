#include "forge/core/float_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "forge/core/env.h"
#include "forge/core/error.h"

namespace forge {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

bool huge_pages_requested() {
  static const bool requested = env_switch("FORGE_HUGE_PAGES", true);
  return requested;
}

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
  const bool huge = bytes >= kHugePage && huge_pages_requested();
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
