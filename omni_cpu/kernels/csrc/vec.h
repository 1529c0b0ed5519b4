// The float32 vectors of the build's ISA, chosen by its flags: 16 lanes (__m512) in the
// AVX-512 module, 8 (__m256) in the AVX2 ones. Row work written once on them (the attention,
// the predictor step's norms, a tile's rounded stores) compiles to each ISA's own
// instructions; the GEMV tiles keep theirs. Bf16 is rounded to nearest even on both
// (vcvtneps2bf16 on AVX-512, the same rounding by integer ops on AVX2; no NaN here).

#pragma once

#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cstdint>

namespace omni_cpu::vec {

using BF16 = c10::BFloat16;

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
  inline V load(const float* p) { return mm##_loadu_ps(p); }              \
  inline void store(float* p, V v) { mm##_storeu_ps(p, v); }

#if defined(__AVX512F__)
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
