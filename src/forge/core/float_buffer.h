// The memory the engine plans at start-up: parameters, gradients, AdamW state, activations
// and the bf16 profile's operand scratch live in FloatBuffers.
#pragma once

#include <cstddef>

namespace forge {

// A 64-byte-aligned float buffer owned for the whole run (planned at start-up). Buffers of
// 2 MiB and more start on a 2 MiB boundary, are rounded up to whole 2 MiB, and are advised
// to the kernel as transparent huge pages (where THP is "madvise", as on Debian, nothing else
// gets them); FORGE_HUGE_PAGES=0 turns that off.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(size_t n) { resize(n); }
  ~FloatBuffer();
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  FloatBuffer(FloatBuffer&& o) noexcept;
  FloatBuffer& operator=(FloatBuffer&& o) noexcept;
  void resize(size_t n);  // zero-filled; only ever called at start-up
  float* data() { return ptr_; }
  const float* data() const { return ptr_; }
  size_t size() const { return n_; }
  void zero();

 private:
  float* ptr_ = nullptr;
  size_t n_ = 0;
};

// Whether FloatBuffers go on huge pages: FORGE_HUGE_PAGES=0 keeps them off, 1 or unset on;
// anything else fails (core/env.h).
bool huge_pages_requested();

}  // namespace forge
