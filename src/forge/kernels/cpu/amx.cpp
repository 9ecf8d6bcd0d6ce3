#include "forge/kernels/cpu/amx.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "forge/core/env.h"
#include "forge/kernels/cpu/dispatch.h"

namespace forge::kernels::cpu {

bool amx_tiles_available() {
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tiles = d & (1u << 24), bf16 = d & (1u << 22);  // AMX-TILE, AMX-BF16
    if (!tiles || !bf16) return false;
    // Linux (5.16 on) gives a process the tiles' register state only when it asks for it.
    constexpr long kRequestPermission = 0x1023, kTileData = 18;  // ARCH_REQ_XCOMP_PERM, XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return usable;
}

bool amx_kernels_enabled() {
  return amx_tiles_available() && active_isa() == Isa::kAvx512 && bf16_amx_requested();
}

namespace {

// The 64-byte operand of LDTILECFG (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

__attribute__((target("amx-tile"))) void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.bytes_per_row[t] = 64, config.rows[t] = 16;
  // Not GCC 12's _tile_loadconfig: its asm names only the first 8 bytes of the configuration
  // as read, so the stores above were dropped as dead (the tiles were left unconfigured and
  // the first tile load faulted). The whole struct as the operand keeps them.
  asm volatile("ldtilecfg %0" : : "m"(config));
}

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

}  // namespace forge::kernels::cpu
