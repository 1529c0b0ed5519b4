// The int8 quad sums of the aarch64 GEMVs (gemv_neon_bf16_int8.cpp W8A8, gemv_neon_int4.cpp
// W4A8): each of 4 output columns' 32-bit lane += the dot product of its 4 signed bytes of w
// with the same 4 signed bytes of x. One SDOT where the build states the dot product
// (__ARM_FEATURE_DOTPROD: -march=armv8.2-a+dotprod and later, the CPU's asimddp); else
// SMULL/SMULL2 into 16 bits (|w x| <= 127 * 127 fits) and SADALP into two accumulators of
// pair sums, folded by one ADDP at the end: the same integers, plain ASIMD (Cortex-A53, A72,
// Neoverse N1 without dotprod in its build).

#pragma once

#include <arm_neon.h>

#include <cstdint>

// BFDOT: GCC and Clang state +bf16 as __ARM_FEATURE_BF16_VECTOR_ARITHMETIC (ACLE's
// __ARM_FEATURE_BF16 where they define it).
#if defined(__ARM_FEATURE_BF16) || defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#define OMNI_CPU_NEON_BFDOT 1
#endif

namespace omni_cpu::neon {

#if defined(__ARM_FEATURE_DOTPROD)
struct Quads {
  int32x4_t sum;
};
inline Quads quads_zero() { return {vdupq_n_s32(0)}; }
// w: 4 columns x 4 bytes; x: one quad of x in every 32-bit lane.
inline void add_quads(Quads& acc, int8x16_t w, int8x16_t x) { acc.sum = vdotq_s32(acc.sum, w, x); }
inline int32x4_t total(const Quads& acc) { return acc.sum; }
#else
struct Quads {
  int32x4_t low, high;  // (c0 pair, c0 pair, c1 pair, c1 pair), the same for c2 and c3
};
inline Quads quads_zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
inline void add_quads(Quads& acc, int8x16_t w, int8x16_t x) {
  acc.low = vpadalq_s16(acc.low, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
  acc.high = vpadalq_s16(acc.high, vmull_high_s8(w, x));
}
inline int32x4_t total(const Quads& acc) { return vpaddq_s32(acc.low, acc.high); }
#endif

// One 32-bit quad of x (4 signed bytes) in every lane.
inline int8x16_t broadcast_quad(const int8_t* x) {
  int32_t quad;
  __builtin_memcpy(&quad, x, sizeof quad);
  return vreinterpretq_s8_s32(vdupq_n_s32(quad));
}

}  // namespace omni_cpu::neon
