// int4 weights, int8 activations on AVX-512 VNNI: the GEMV of gemv_avx512_bf16_int8.cpp with
// half its weight bytes.
//
// y[M, N] = x[M, K] @ W[N, K]^T with W group-wise asymmetric 4-bit along K: each run of
// kInt4Group = 32 K elements of an output row has a bf16 scale s and a bf16 minimum lo, and
// w = s * u + lo with u in 0..15 (omni_cpu/kernels/packing.py quantizes and packs; 32
// is the largest group that keeps random layers under 8 % error, see PackedInt4Weights).
//
// Layout: the column blocks of gemv_avx512_bf16_int8.cpp (64 columns, the last 16, 32 or 48).
// A block holds [K / 8][nb][4] bytes: byte j of column c at step p carries u[c, 8p + j]
// in its low nibble and u[c, 8p + 4 + j] in its high one, so one 64-byte load gives two
// vpdpbusd weight vectors (16 columns x 4 K each) after a mask and a shift. Beside it,
// the block's scales are [K / 32][nb][2] bf16 (s, lo): one 64-byte load per 16 columns
// per group gives both as float32 by a shift and a mask.
//
// Arithmetic: x is quantized per row to signed 8 bits in [-127, 127] (scale amax / 127),
// so the unsigned operand of vpdpbusd is the weight nibble and nothing saturates:
//   sum_k w x = s * sum_k u xq + lo * sum_k xq   (per group, then times the row's scale)
// The first sum is 32-bit integer per group, the second is the row's group sum of xq,
// computed once per call. Register tile: up to 3 rows x 4 vectors, an int32 and a
// float32 accumulator each (24 registers), the weights and x broadcast from memory.
// Built into the AVX-512 module (kernels/build.py: the same flags, AVX-512 BW/VNNI).

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gemv.h"
#include "kernel_common.h"
#include "vec.h"

namespace {

using omni_cpu::vec::load;
using omni_cpu::vec::Store;
using Rows = omni_cpu::Int4Rows;

constexpr int64_t kLanes = 16;                    // int32/float32 outputs per vector
constexpr int kTileRows = 3;                      // 3 x 4 x 2 accumulators
using omni_cpu::kInt4Group;                      // K elements per (scale, minimum)
constexpr int64_t kStep = 8;                      // K elements per 64-byte load of 16 columns
constexpr int64_t kStepsPerGroup = kInt4Group / kStep;

template <int M, int NB, typename Out>
void w4a8_tile(const Rows& rows, int64_t m0, const uint8_t* block, const uint16_t* scales,
               int64_t n0, const Store<Out>& store) {
  const int64_t K = rows.K, Q = K / 4, groups = K / kInt4Group;
  const auto* quads = reinterpret_cast<const int32_t*>(rows.xq + m0 * K);
  const int32_t* xsum = rows.xsum + m0 * groups;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i high_half = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m512 acc[M][NB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < NB; ++r) acc[m][r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dot[M][NB];
    for (int m = 0; m < M; ++m)
      for (int r = 0; r < NB; ++r) dot[m][r] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int64_t s = 0; s < kStepsPerGroup; ++s) {
      const int64_t p = g * kStepsPerGroup + s;  // step of 8 K elements
      const uint8_t* step = block + p * NB * 64;
#pragma GCC unroll 4
      for (int r = 0; r < NB; ++r) {
        const __m512i packed = _mm512_loadu_si512(step + r * 64);
        const __m512i low = _mm512_and_si512(packed, nibble);
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
#pragma GCC unroll 3
        for (int m = 0; m < M; ++m) {
          dot[m][r] = _mm512_dpbusd_epi32(dot[m][r], low, _mm512_set1_epi32(quads[m * Q + 2 * p]));
          dot[m][r] =
              _mm512_dpbusd_epi32(dot[m][r], high, _mm512_set1_epi32(quads[m * Q + 2 * p + 1]));
        }
      }
    }
    const uint16_t* group_scales = scales + g * NB * 32;  // [nb][2] bf16
#pragma GCC unroll 4
    for (int r = 0; r < NB; ++r) {
      const __m512i pair = _mm512_loadu_si512(group_scales + r * 32);
      const __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
      const __m512 minimum = _mm512_castsi512_ps(_mm512_and_si512(pair, high_half));
#pragma GCC unroll 3
      for (int m = 0; m < M; ++m) {
        acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[m][r]), scale, acc[m][r]);
        const __m512 sum = _mm512_set1_ps(static_cast<float>(xsum[m * groups + g]));
        acc[m][r] = _mm512_fmadd_ps(sum, minimum, acc[m][r]);
      }
    }
  }
#pragma GCC unroll 3
  for (int m = 0; m < M; ++m) {
    const __m512 xs = _mm512_set1_ps(rows.xscale[m0 + m]);
#pragma GCC unroll 4
    for (int r = 0; r < NB; ++r) store(m0 + m, n0 + r * kLanes, _mm512_mul_ps(acc[m][r], xs));
  }
}

template <typename Out, int M>
void by_vectors(int vectors, const Rows& rows, int64_t m0, const uint8_t* block,
                const uint16_t* scales, int64_t n0, const Store<Out>& store) {
  switch (vectors) {
    case 1: w4a8_tile<M, 1>(rows, m0, block, scales, n0, store); break;
    case 2: w4a8_tile<M, 2>(rows, m0, block, scales, n0, store); break;
    case 3: w4a8_tile<M, 3>(rows, m0, block, scales, n0, store); break;
    default: w4a8_tile<M, 4>(rows, m0, block, scales, n0, store); break;
  }
}

// Column blocks outer (split over the stage's threads), tiles of rows inner, as in
// gemv_avx512.cpp's for_each_tile: a block's weights come from memory once per call.
template <typename Out>
void w4a8_all(const Rows& rows, int64_t M, const uint8_t* w, const uint16_t* scales, int64_t N,
              const Store<Out>& store) {
  const int64_t K = rows.K;
  omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
    const int vectors = static_cast<int>(nb / kLanes);
    const uint8_t* block = w + n0 * K / 2;
    const uint16_t* block_scales = scales + n0 * (K / kInt4Group) * 2;
    for (int64_t m0 = 0; m0 < M; m0 += kTileRows) {
      switch (std::min<int64_t>(kTileRows, M - m0)) {
        case 1: by_vectors<Out, 1>(vectors, rows, m0, block, block_scales, n0, store); break;
        case 2: by_vectors<Out, 2>(vectors, rows, m0, block, block_scales, n0, store); break;
        default: by_vectors<Out, 3>(vectors, rows, m0, block, block_scales, n0, store); break;
      }
    }
  });
}

}  // namespace

// The module's W4A8 product (gemv.h): gemv_w4a8.cpp's tensor call and predictor_step.cpp chain
// it after quantize_s8 (gemv_w4a8.cpp, the same in every module).
template <typename Out>
void omni_cpu::w4a8_product(const int8_t* xq, const float* xscale, const int32_t* xsum,
                            const uint8_t* w, const c10::BFloat16* scales, int64_t M, int64_t K,
                            int64_t N, const float* bias, Out* out) {
  const Rows rows{xq, xscale, xsum, K};
  w4a8_all(rows, M, w, reinterpret_cast<const uint16_t*>(scales), N, Store<Out>{out, bias, N});
}

OMNI_CPU_W4A8_INSTANCES(float)
OMNI_CPU_W4A8_INSTANCES(c10::BFloat16)
