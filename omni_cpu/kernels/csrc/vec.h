// The float32 vectors of the build's ISA, chosen by its flags: 16 lanes (__m512) in the
// AVX-512 module, 8 (__m256) in the AVX2 ones, 4 (float32x4_t) in the aarch64 (NEON) ones. Row work written once on them (the attention,
// the predictor step's norms, SiLU and sampling, W4A8's activation quantizer, a tile's
// rounded stores) compiles to each ISA's own instructions; the GEMV tiles keep theirs. Bf16 is
// rounded to nearest even on all three (vcvtneps2bf16 on AVX-512, the same rounding by integer
// ops on AVX2 and NEON; no NaN here).

#pragma once

#if defined(__aarch64__) || defined(__ARM_NEON)
#include <arm_neon.h>
#else
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "bf16.h"

namespace omni_cpu::vec {

using BF16 = omni_cpu::BF16;

// The ops whose AVX-512 and AVX2 intrinsics differ only by their prefix (_mm512, _mm256).
#define OMNI_VEC_OPS(mm)                                                  \
  inline V zero() { return mm##_setzero_ps(); }                           \
  inline V set1(float v) { return mm##_set1_ps(v); }                      \
  inline V add(V a, V b) { return mm##_add_ps(a, b); }                    \
  inline V sub(V a, V b) { return mm##_sub_ps(a, b); }                    \
  inline V mul(V a, V b) { return mm##_mul_ps(a, b); }                    \
  inline V div(V a, V b) { return mm##_div_ps(a, b); }                    \
  inline V fmadd(V a, V b, V c) { return mm##_fmadd_ps(a, b, c); }        \
  inline V fnmadd(V a, V b, V c) { return mm##_fnmadd_ps(a, b, c); }      \
  inline V clamp(V x, float lo, float hi) {                               \
    return mm##_min_ps(mm##_max_ps(x, set1(lo)), set1(hi));               \
  }                                                                       \
  inline V max(V a, V b) { return mm##_max_ps(a, b); }                    \
  inline V load(const float* p) { return mm##_loadu_ps(p); }              \
  inline void store(float* p, V v) { mm##_storeu_ps(p, v); }

#if defined(__aarch64__) || defined(__ARM_NEON)
using V = float32x4_t;
constexpr int64_t kLanes = 4;
inline V zero() { return vdupq_n_f32(0.f); }
inline V set1(float v) { return vdupq_n_f32(v); }
inline V add(V a, V b) { return vaddq_f32(a, b); }
inline V sub(V a, V b) { return vsubq_f32(a, b); }
inline V mul(V a, V b) { return vmulq_f32(a, b); }
inline V div(V a, V b) { return vdivq_f32(a, b); }
inline V fmadd(V a, V b, V c) { return vfmaq_f32(c, a, b); }   // a * b + c, fused
inline V fnmadd(V a, V b, V c) { return vfmsq_f32(c, a, b); }  // c - a * b, fused
// maxnm/minnm: a NaN loses, as in x86's max_ps with the NaN first and std::max.
inline V max(V a, V b) { return vmaxnmq_f32(a, b); }
inline V clamp(V x, float lo, float hi) { return vminnmq_f32(vmaxnmq_f32(x, set1(lo)), set1(hi)); }
inline V load(const float* p) { return vld1q_f32(p); }
inline void store(float* p, V v) { vst1q_f32(p, v); }
inline float sum(V v) { return vaddvq_f32(v); }
inline V load(const BF16* p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
}
// Round to nearest even by integer ops, as the AVX2 store: bits + 0x7FFF + (bit 16), high half.
inline void store(BF16* p, V v) {
  const uint32x4_t bits = vreinterpretq_u32_f32(v);
  const uint32x4_t odd = vandq_u32(vshrq_n_u32(bits, 16), vdupq_n_u32(1));
  const uint32x4_t up = vaddq_u32(bits, vaddq_u32(odd, vdupq_n_u32(0x7FFF)));
  vst1_u16(reinterpret_cast<uint16_t*>(p), vshrn_n_u32(up, 16));
}
inline V abs(V x) { return vabsq_f32(x); }
inline float max_of(V v) { return vmaxnmvq_f32(v); }
inline V nearest(V x) { return vrndnq_f32(x); }  // ties to even
// p * 2^n through the exponent bits: n must stay in [-126, 127] (exp clamps its input).
inline V times_two_to(V p, V n) {
  const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(bits));
}
// p with its sign flipped in the lanes where the integer n is odd.
inline V negated_where_odd(V p, V n) {
  const uint32x4_t odd = vshlq_n_u32(vreinterpretq_u32_s32(vcvtnq_s32_f32(n)), 31);
  return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(p), odd));
}
// v's lanes rounded to the nearest integer (ties to even, as nearbyint) into q as signed 8
// bits (the caller keeps them in [-127, 127]); their sum.
inline int32_t store_s8(int8_t* q, V v) {
  const int32x4_t codes = vcvtnq_s32_f32(v);
  const int16x4_t words = vqmovn_s32(codes);
  const int8x8_t bytes = vqmovn_s16(vcombine_s16(words, words));
  const uint32_t four = vget_lane_u32(vreinterpret_u32_s8(bytes), 0);
  std::memcpy(q, &four, sizeof four);  // q need not be 4-byte aligned
  return vaddvq_s32(codes);
}
#elif defined(__AVX512F__)
using V = __m512;
constexpr int64_t kLanes = 16;
OMNI_VEC_OPS(_mm512)
inline float sum(V v) { return _mm512_reduce_add_ps(v); }
inline V load(const BF16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline void store(BF16* p, V v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}
inline V abs(V x) { return _mm512_abs_ps(x); }
inline float max_of(V v) { return _mm512_reduce_max_ps(v); }
inline V nearest(V x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline V times_two_to(V p, V n) { return _mm512_scalef_ps(p, n); }  // p * 2^n
// p with its sign flipped in the lanes where the integer n is odd.
inline V negated_where_odd(V p, V n) {
  const __m512i odd = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 31);
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(p), odd));
}
// v's lanes rounded to the nearest integer (ties to even, as nearbyint) into q as signed 8
// bits (the caller keeps them in [-127, 127]); their sum.
inline int32_t store_s8(int8_t* q, V v) {
  const __m512i codes = _mm512_cvtps_epi32(v);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(codes));
  return _mm512_reduce_add_epi32(codes);
}
#else
using V = __m256;
constexpr int64_t kLanes = 8;
OMNI_VEC_OPS(_mm256)
inline float sum(V v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}
inline V load(const BF16* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
inline void store(BF16* p, V v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i high = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm_packus_epi32(_mm256_castsi256_si128(high),
                                    _mm256_extracti128_si256(high, 1)));
}
inline V abs(V x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), x); }
inline float max_of(V v) {
  const __m128 half = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_max_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_max_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}
inline V nearest(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p * 2^n through the exponent bits: n must stay in [-126, 127] (exp clamps its input).
inline V times_two_to(V p, V n) {
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                          _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
// p with its sign flipped in the lanes where the integer n is odd.
inline V negated_where_odd(V p, V n) {
  const __m256i odd = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 31);
  return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(p), odd));
}
// v's lanes rounded to the nearest integer (ties to even, as nearbyint) into q as signed 8
// bits (the caller keeps them in [-127, 127]); their sum.
inline int32_t store_s8(int8_t* q, V v) {
  const __m256i codes = _mm256_cvtps_epi32(v);
  const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
  const __m128i words = _mm_packs_epi32(lo, hi);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(q), _mm_packs_epi16(words, words));
  const __m128i half = _mm_add_epi32(lo, hi);
  const __m128i pair = _mm_add_epi32(half, _mm_unpackhi_epi64(half, half));
  return _mm_cvtsi128_si32(_mm_add_epi32(pair, _mm_shuffle_epi32(pair, 1)));
}
// u8 x s8 quads summed into acc's 32-bit lanes: one vpdpbusd where the module is built with
// AVX-VNNI, else vpmaddubsw and vpmaddwd by ones. The same integers where no pair sum of
// vpmaddubsw saturates 16 bits (the callers' operands keep every pair under 32767).
inline __m256i dot_quads(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  const __m256i pairs = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}
#endif
#undef OMNI_VEC_OPS

// v as a tensor of T holds it between two ops: rounded to T.
template <typename T>
inline V rounded(V v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    alignas(64) BF16 lanes[kLanes];
    store(lanes, v);
    return load(lanes);
  }
}

// e^x: x = n ln 2 + r (|r| <= ln 2 / 2, ln 2 in two parts), e^r by its Taylor polynomial
// to r^7, times 2^n. Within 7.9e-8 relative of exp over [-87, 88] (AVX-512, 7.6 M points
// against double exp: under one float ulp); inputs are clamped to [-87, 88] (AVX2's 2^n
// from exponent bits) or [-104, 89] (vscalefps: overflow to inf, underflow to 0). vLLM's
// silu_and_mul uses a vector approximation of its own too.
inline V exp(V x) {
#if defined(__AVX512F__)
  x = clamp(x, -104.f, 89.f);
#else
  x = clamp(x, -87.f, 88.f);
#endif
  const V n = nearest(mul(x, set1(1.44269504f)));
  V r = fnmadd(n, set1(0.693359375f), x);
  r = fnmadd(n, set1(-2.12194440e-4f), r);
  V p = set1(1.f / 5040.f);
  for (const float c : {1.f / 720.f, 1.f / 120.f, 1.f / 24.f, 1.f / 6.f, 0.5f, 1.f, 1.f})
    p = fmadd(p, r, set1(c));
  return times_two_to(p, n);
}

// sin x: x = n pi + r (|r| <= pi / 2, pi in three parts as Cephes' sinf splits it), sin r by
// its odd Taylor polynomial to r^11, negated for odd n. Within 1.2e-7 absolute of sin for
// |x| <= 1e4 (AVX-512 and AVX2, against double sin; tests/kernels/test_snake.py); farther out
// the reduction loses bits as float32's own x does.
inline V sin(V x) {
  const V n = nearest(mul(x, set1(0.318309886183790671f)));
  V r = fnmadd(n, set1(3.140625f), x);
  r = fnmadd(n, set1(9.67502593994140625e-4f), r);
  r = fnmadd(n, set1(1.509957990978376432e-7f), r);
  const V r2 = mul(r, r);
  V p = set1(-1.f / 39916800.f);
  for (const float c : {1.f / 362880.f, -1.f / 5040.f, 1.f / 120.f, -1.f / 6.f})
    p = fmadd(p, r2, set1(c));
  return negated_where_odd(fmadd(mul(p, r2), r, r), n);
}

// Where a GEMV tile's results go: y[m, j:j+kLanes] = value + bias[j:j+kLanes], rounded once
// to the output dtype.
template <typename Out>
struct Store {
  Out* out;
  const float* bias;  // nullptr: none
  int64_t N;
  void operator()(int64_t m, int64_t j, V value) const {
    if (bias) value = add(value, load(bias + j));
    store(out + m * N + j, value);
  }
};

}  // namespace omni_cpu::vec
