/*
 * Forced into every source of ggml's CPU backend (`-include`), in elelem's build and in
 * the reference llama.cpp's, so both compile the same AMX code.
 *
 * GCC 12's <amxtileintrin.h> gives `_tile_loadconfig(p)` the operand
 * `"m"(*(const void **)p)`: eight bytes. The optimizer then treats the rest of the
 * 64-byte tile configuration as unread and deletes the stores of its `colsb[]` and
 * `rows[]` (ggml's `ggml_tile_config_init`), so `ldtilecfg` loads garbage and the CPU
 * raises #GP (llama.cpp issue 20824). GCC 13 made the intrinsic a builtin. Here the
 * operand spans all 64 bytes under every compiler, and `_tile_storeconfig` likewise.
 *
 * Each thread also asks Linux for the AMX tile-data state before its first tile
 * configuration (ggml loads it once per thread). Linux grants the permission per
 * process, so this only repeats the main thread's request; it keeps threads working
 * under a kernel that wants it per thread. elelem checks the process-wide permission
 * before it places any weight in ggml's AMX buffer (ggml-sys/src/cpu.rs, `amx_refusal`).
 */
#ifndef ELELEM_AMX_H
#define ELELEM_AMX_H

#if defined(__AMX_TILE__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static __inline__ __attribute__((__always_inline__)) void elelem_tile_loadconfig(const void *config) {
#if defined(__linux__)
    static __thread int requested;
    if (!requested) {
        syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */);
        requested = 1;
    }
#endif
    __asm__ volatile("ldtilecfg\t%X0" ::"m"(*(const unsigned char(*)[64])config));
}

static __inline__ __attribute__((__always_inline__)) void elelem_tile_storeconfig(void *config) {
    __asm__ volatile("sttilecfg\t%X0" : "=m"(*(unsigned char(*)[64])config));
}

#undef _tile_loadconfig
#undef _tile_storeconfig
#define _tile_loadconfig(config) elelem_tile_loadconfig(config)
#define _tile_storeconfig(config) elelem_tile_storeconfig(config)
#endif

#endif
