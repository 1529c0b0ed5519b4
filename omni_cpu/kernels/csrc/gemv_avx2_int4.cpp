// int4 weights, int8 activations on AVX2 (W4A8): the GEMV of gemv_avx512_int4.cpp for the AVX2
// modules, on the same packed weights (groups of 32 along K, a bf16 scale and minimum each;
// omni_cpu/kernels/packing.py packs both), activations per row to signed 8 bits.
//
// A weight nibble is at most 15, so vpmaddubsw's pair sums (<= 2 * 15 * 127) need no sign
// trick, and a group's 8 of them per lane add up in 16 bits (<= 30480) before one vpmaddwd
// widens them: 2 vpmaddubsw + 2 vpaddw per 32-byte load and row. Built with AVX-VNNI
// (kernels/build.py's third module), 2 vpdpbusd sum into 32 bits directly: the same integers.
//
// Tiles: one row x the whole block (8 vectors) below kPairRows rows; from it 2 rows x 16
// columns, which share each load's unpacking between the rows: slower at M = 2 and 4, faster
// at M = 32 (benchmarks/RESULTS.md, "The kernels, one thread", under "int4 weights and the
// AVX2 GEMV").

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

using omni_cpu::Int4Rows;
using omni_cpu::vec::Store;

constexpr int64_t kLanes = 8;                      // float32/int32 outputs per ymm vector
constexpr int64_t kPairRows = 5;                   // from this M on, tiles of 2 rows x 16 columns
using omni_cpu::kInt4Group;                         // K elements per (scale, minimum)

// A group's 32-bit sums of u * xq into the tile's float32 sums: acc += dot * scale + xsum *
// minimum, with the group's (scale, minimum) bf16 pairs of the tile's columns at `pairs`.
template <int M, int V>
inline void w4a8_group(__m256 (&acc)[M][V], const __m256i (&dot)[M][V], const Int4Rows& rows,
                       const uint16_t* pairs, int64_t g, int64_t m0) {
  const int64_t groups = rows.K / kInt4Group;
  for (int v = 0; v < V; ++v) {
    const __m256i both = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pairs + v * 16));
    const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(both, 16));
    const __m256 minimum = _mm256_castsi256_ps(
        _mm256_and_si256(both, _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u))));
    for (int m = 0; m < M; ++m) {
      acc[m][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[m][v]), scale, acc[m][v]);
      const __m256 sum = _mm256_set1_ps(static_cast<float>(rows.xsum[(m0 + m) * groups + g]));
      acc[m][v] = _mm256_fmadd_ps(sum, minimum, acc[m][v]);
    }
  }
}

// The tile's float32 sums times each row's scale, from column j0.
template <int M, int V, typename Out>
inline void w4a8_store(const __m256 (&acc)[M][V], const Int4Rows& rows, int64_t j0, int64_t m0,
                       const Store<Out>& store) {
  for (int m = 0; m < M; ++m) {
    const __m256 xs = _mm256_set1_ps(rows.xscale[m0 + m]);
    for (int v = 0; v < V; ++v) store(m0 + m, j0 + v * kLanes, _mm256_mul_ps(acc[m][v], xs));
  }
}

// V vectors of 8 columns from column c of a block nb columns wide. Step p (8 K elements)
// is [nb][4] bytes at block + p * nb * 4; group g's scales [nb][2] bf16 at scales + g * nb * 2.
template <int M, int V, typename Out>
void w4a8_tile(const Int4Rows& rows, const uint8_t* block, const uint16_t* scales, int64_t nb,
               int64_t c, int64_t n0, int64_t m0, const Store<Out>& store) {
  const int64_t K = rows.K, Q = K / 4, groups = K / kInt4Group;
  const auto* quads = reinterpret_cast<const int32_t*>(rows.xq);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i dot[M][V];  // the group's sums: 16-bit pairs, or 32-bit with AVX-VNNI
    for (int m = 0; m < M; ++m)
      for (int v = 0; v < V; ++v) dot[m][v] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int64_t s = 0; s < kInt4Group / 8; ++s) {
      const int64_t p = g * (kInt4Group / 8) + s;
      const uint8_t* step = block + (p * nb + c) * 4;
      __m256i low_x[M], high_x[M];
      for (int m = 0; m < M; ++m) {
        low_x[m] = _mm256_set1_epi32(quads[(m0 + m) * Q + 2 * p]);
        high_x[m] = _mm256_set1_epi32(quads[(m0 + m) * Q + 2 * p + 1]);
      }
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + v * 32));
        const __m256i low = _mm256_and_si256(w, nibble);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
        for (int m = 0; m < M; ++m) {
#if defined(__AVXVNNI__)
          dot[m][v] = _mm256_dpbusd_avx_epi32(dot[m][v], low, low_x[m]);
          dot[m][v] = _mm256_dpbusd_avx_epi32(dot[m][v], high, high_x[m]);
#else
          dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(low, low_x[m]));
          dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(high, high_x[m]));
#endif
        }
      }
    }
#if !defined(__AVXVNNI__)
    const __m256i ones = _mm256_set1_epi16(1);
    for (int m = 0; m < M; ++m)  // widened to 32 bits
      for (int v = 0; v < V; ++v) dot[m][v] = _mm256_madd_epi16(dot[m][v], ones);
#endif
    w4a8_group<M, V>(acc, dot, rows, scales + (g * nb + c) * 2, g, m0);
  }
  w4a8_store<M, V>(acc, rows, n0 + c, m0, store);
}

// Column blocks outer (split over the stage's threads); below kPairRows one row x the whole
// block a tile, from it 2 rows x 16 columns.
template <typename Out>
void w4a8_all(const Int4Rows& rows, int64_t M, const uint8_t* w, const uint16_t* scales,
              int64_t N, const Store<Out>& store) {
  const int64_t K = rows.K;
  omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
    const uint8_t* block = w + n0 * K / 2;
    const uint16_t* block_scales = scales + n0 * (K / kInt4Group) * 2;
    if (M < kPairRows) {
      for (int64_t m0 = 0; m0 < M; ++m0) {
        switch (nb / kLanes) {
          case 2: w4a8_tile<1, 2>(rows, block, block_scales, nb, 0, n0, m0, store); break;
          case 4: w4a8_tile<1, 4>(rows, block, block_scales, nb, 0, n0, m0, store); break;
          case 6: w4a8_tile<1, 6>(rows, block, block_scales, nb, 0, n0, m0, store); break;
          default: w4a8_tile<1, 8>(rows, block, block_scales, nb, 0, n0, m0, store); break;
        }
      }
      return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += 2) {
      for (int64_t c = 0; c < nb; c += 16) {
        if (M - m0 >= 2)
          w4a8_tile<2, 2>(rows, block, block_scales, nb, c, n0, m0, store);
        else
          w4a8_tile<1, 2>(rows, block, block_scales, nb, c, n0, m0, store);
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
  w4a8_all(Int4Rows{xq, xscale, xsum, K}, M, w, reinterpret_cast<const uint16_t*>(scales), N,
           Store<Out>{out, bias, N});
}

OMNI_CPU_W4A8_INSTANCES(float)
OMNI_CPU_W4A8_INSTANCES(c10::BFloat16)
