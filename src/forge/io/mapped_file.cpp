#include "forge/io/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "forge/core/error.h"

namespace forge {

namespace {

// The handler may run at any moment, so the list is fixed-size and lock-free: a slot is
// claimed by its `begin`, filled, then published by `end` (release); the handler reads `end`
// first (acquire). Mappings beyond the list's size still work: their SIGBUS gets the generic
// line. The name is cut to fit: the handler cannot allocate.
struct Mapping {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  char name[512];
  size_t name_len = 0;
};
constexpr int kSlots = 64;
std::array<Mapping, kSlots> g_mappings;

int list_mapping(const uint8_t* data, size_t size, const std::string& path) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(data);
  for (int i = 0; i < kSlots; ++i) {
    uintptr_t free_slot = 0;
    if (!g_mappings[i].begin.compare_exchange_strong(free_slot, b)) continue;
    Mapping& m = g_mappings[i];
    m.name_len = std::min(path.size(), sizeof(m.name));
    std::memcpy(m.name, path.data(), m.name_len);
    m.end.store(b + size, std::memory_order_release);
    return i;
  }
  return -1;
}

void unlist_mapping(int slot) {
  if (slot < 0) return;
  g_mappings[slot].end.store(0, std::memory_order_release);
  g_mappings[slot].begin.store(0, std::memory_order_release);
}

void write_all(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

extern "C" void on_bus_error(int, siginfo_t* info, void*) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (const Mapping& m : g_mappings) {
    const uintptr_t end = m.end.load(std::memory_order_acquire);
    const uintptr_t begin = m.begin.load(std::memory_order_relaxed);
    if (end == 0 || addr < begin || addr >= end) continue;
    static const char head[] = "forge: error: ";
    static const char tail[] =
        ": the file was truncated or rewritten in place while in use; replace such files by "
        "rename instead\n";
    write_all(head, sizeof(head) - 1);
    write_all(m.name, m.name_len);
    write_all(tail, sizeof(tail) - 1);
    ::_exit(1);
  }
  static const char line[] =
      "forge: error: bus error (SIGBUS): a memory-mapped file (a token shard or checkpoint) was "
      "truncated or rewritten in place while in use; replace such files by rename instead\n";
  write_all(line, sizeof(line) - 1);
  ::_exit(1);
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open {}: {}", path, what, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: expected a {}, found {}", path, what,
         S_ISDIR(st.st_mode) ? "a folder" : "something that is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    if (p == MAP_FAILED) {
      ::close(fd);
      fail("{}: cannot mmap: {}", path, std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
    slot_ = list_mapping(data_, size_, path);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  unlist_mapping(slot_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void install_mapped_file_bus_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_bus_error;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace forge
