// The GEMV of gemv_avx512.cpp for CPUs with AVX2 + FMA only (Zen 2/3, Haswell to Skylake
// client, Cascade Lake without avx512_bf16): its own extension, built without AVX-512.
//
// Same packed layout as gemv_avx512.cpp (omni_cpu/kernels/gemv.py packs both): blocks of
// 64 output columns (the last 16, 32 or 48), each [K / G][nb][G], G = 2 for bf16 and 4
// for int8; a 32-byte load here is 8 columns of one step instead of 16.
//
// gemv_bf16: bf16 weights widened to float32 by a shift (even K) and a mask (odd K),
//            float32 activations and accumulation (vfmadd231ps): no bf16 arithmetic.
// gemv_w8a8: int8 weights (per output row scale), activations quantized per row to
//            signed 8 bits in [-127, 127]. vpmaddubsw multiplies u8 by s8 and adds
//            pairs into 16 bits with saturation; with |w| as the unsigned operand and
//            x * sign(w) as the signed one, a pair is at most 2 * 127 * 127 = 32258 <
//            32767, so it never saturates and the result is exact; vpmaddwd by ones
//            widens to 32 bits. Where the CPU reports avx_vnni (Alder Lake and later,
//            Zen 5), vpdpbusd (VEX) does the multiply and the 32-bit sum in one step on
//            the same operands (a separate copy of the tile compiled for avxvnni, chosen
//            at run time).
//
// gemv_w4a8: the int4 weights of gemv_int4.cpp (groups of 32 along K, a bf16 scale and
//            minimum each, same packed layout), activations per row to signed 8 bits.
//            A weight nibble is at most 15, so vpmaddubsw's pair sums (<= 2 * 15 * 127)
//            need no sign trick, and a group's 8 of them per lane add up in 16 bits
//            (<= 30480) before one vpmaddwd widens them: 2 vpmaddubsw + 2 vpaddw per
//            32-byte load and row; with AVX-VNNI, 2 vpdpbusd (a copy of the tile).
//
// decode_attention: decode_attention.cpp, built into this module too on vec.h's 8-lane
//            vectors (the code predictor's attention at every step after its first).
//
// Register tile (16 ymm registers): one row x the whole block (8 vectors), the block's
// weights from memory for the first row and from L2 for the others. Tiles of 2 rows x
// half or a quarter of a block share each load between rows but walk the block in
// strides; measured (one thread, 48 matrices of the 0.6B, same process, alternating)
// they were slower at M = 2 and 4 in all three formats (bf16 M = 4: 76 against 61 ms;
// int8 34 against 27; int4 26 against 24), faster only for int4 at M = 32 (95 against
// 134 ms, its unpacking shared), so int4 keeps 2 x 16-column tiles from M = 5.

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_common.h"
#include "vec.h"

namespace {

using omni_cpu::Int4Rows;
using omni_cpu::with_output;
using omni_cpu::vec::Store;

constexpr int64_t kLanes = 8;         // float32/int32 outputs per ymm vector
constexpr int64_t kInt4PairRows = 5;  // int4: from this M on, tiles of 2 rows x 16 columns
constexpr int64_t kGroup4 = omni_cpu::kInt4Group;  // K elements per (scale, minimum) of int4

// x as float32 [M, K]; the block's step p is [nb][2] bf16 at block + p * nb * 2.
template <int M, int V, typename Out>
void bf16_tile(const float* x, int64_t K, const uint16_t* block, int64_t nb, int64_t c,
               int64_t n0, int64_t m0, const Store<Out>& store) {
  const __m256i high_half = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m256 acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) acc[m][v] = _mm256_setzero_ps();
  const int64_t P = K / 2;
  for (int64_t p = 0; p < P; ++p) {
    const uint16_t* step = block + (p * nb + c) * 2;
    __m256 even[M], odd[M];
#pragma GCC unroll 2
    for (int m = 0; m < M; ++m) {
      even[m] = _mm256_broadcast_ss(x + (m0 + m) * K + 2 * p);
      odd[m] = _mm256_broadcast_ss(x + (m0 + m) * K + 2 * p + 1);
    }
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + v * 16));
      const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
      const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(w, high_half));
#pragma GCC unroll 2
      for (int m = 0; m < M; ++m) {
        acc[m][v] = _mm256_fmadd_ps(we, even[m], acc[m][v]);
        acc[m][v] = _mm256_fmadd_ps(wo, odd[m], acc[m][v]);
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) store(m0 + m, n0 + c + v * kLanes, acc[m][v]);
}

struct Int8Rows {
  const int8_t* xq;     // [M, K] signed 8-bit x in [-127, 127]
  const float* xscale;  // [M]
  const float* wscale;  // [N]
  int64_t K;
};

// The scaled store of a tile's int32 sums.
template <int M, int V, typename Out>
void w8a8_store(const __m256i (&acc)[M][V], const Int8Rows& rows, int64_t j0, int64_t m0,
                const Store<Out>& store) {
  for (int v = 0; v < V; ++v) {
    const int64_t j = j0 + v * kLanes;
    const __m256 ws = _mm256_loadu_ps(rows.wscale + j);
    for (int m = 0; m < M; ++m) {
      const __m256 scale = _mm256_mul_ps(ws, _mm256_set1_ps(rows.xscale[m0 + m]));
      store(m0 + m, j, _mm256_mul_ps(_mm256_cvtepi32_ps(acc[m][v]), scale));
    }
  }
}

// The block's step q is [nb][4] int8 at block + q * nb * 4.
template <int M, int V, typename Out>
void w8a8_tile(const Int8Rows& rows, const int8_t* block, int64_t nb, int64_t c, int64_t n0,
               int64_t m0, const Store<Out>& store) {
  const int64_t K = rows.K, Q = K / 4;
  const auto* quads = reinterpret_cast<const int32_t*>(rows.xq);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) acc[m][v] = _mm256_setzero_si256();
  for (int64_t q = 0; q < Q; ++q) {
    const int8_t* step = block + (q * nb + c) * 4;
    __m256i xv[M];
    for (int m = 0; m < M; ++m) xv[m] = _mm256_set1_epi32(quads[(m0 + m) * Q + q]);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + v * 32));
      const __m256i magnitude = _mm256_abs_epi8(w);
#pragma GCC unroll 2
      for (int m = 0; m < M; ++m) {
        const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xv[m], w));
        acc[m][v] = _mm256_add_epi32(acc[m][v], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  w8a8_store<M, V>(acc, rows, n0 + c, m0, store);
}

// The same tile with AVX-VNNI's vpdpbusd: only called where the CPU reports avx_vnni.
template <int M, int V, typename Out>
__attribute__((target("avx2,fma,avxvnni"))) void w8a8_tile_vnni(
    const Int8Rows& rows, const int8_t* block, int64_t nb, int64_t c, int64_t n0, int64_t m0,
    const Store<Out>& store) {
  const int64_t K = rows.K, Q = K / 4;
  const auto* quads = reinterpret_cast<const int32_t*>(rows.xq);
  __m256i acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) acc[m][v] = _mm256_setzero_si256();
  for (int64_t q = 0; q < Q; ++q) {
    const int8_t* step = block + (q * nb + c) * 4;
    __m256i xv[M];
    for (int m = 0; m < M; ++m) xv[m] = _mm256_set1_epi32(quads[(m0 + m) * Q + q]);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + v * 32));
      const __m256i magnitude = _mm256_abs_epi8(w);
#pragma GCC unroll 2
      for (int m = 0; m < M; ++m)
        acc[m][v] = _mm256_dpbusd_avx_epi32(acc[m][v], magnitude, _mm256_sign_epi8(xv[m], w));
    }
  }
  w8a8_store<M, V>(acc, rows, n0 + c, m0, store);
}

// Calls Tile<1, vectors>::run(args...) for vectors 2, 4, 6 or 8 (N % 16 == 0).
template <template <int, int> class Tile, typename... Args>
void dispatch(int vectors, Args&&... args) {
  switch (vectors) {
    case 2: Tile<1, 2>::run(args...); break;
    case 4: Tile<1, 4>::run(args...); break;
    case 6: Tile<1, 6>::run(args...); break;
    default: Tile<1, 8>::run(args...); break;
  }
}

template <typename Out>
struct Bf16Tile {
  template <int M, int V>
  struct Of {
    static void run(const float* x, int64_t K, const uint16_t* block, int64_t nb, int64_t c,
                    int64_t n0, int64_t m0, const Store<Out>& store) {
      bf16_tile<M, V, Out>(x, K, block, nb, c, n0, m0, store);
    }
  };
};

template <typename Out, bool Vnni>
struct W8a8Tile {
  template <int M, int V>
  struct Of {
    static void run(const Int8Rows& rows, const int8_t* block, int64_t nb, int64_t c, int64_t n0,
                    int64_t m0, const Store<Out>& store) {
      if constexpr (Vnni)
        w8a8_tile_vnni<M, V, Out>(rows, block, nb, c, n0, m0, store);
      else
        w8a8_tile<M, V, Out>(rows, block, nb, c, n0, m0, store);
    }
  };
};

// Column blocks outer (split over the stage's threads), rows inner, one row x the whole
// block a tile. each(vectors, nb, n0, m0).
template <typename Each>
void for_each_tile(int64_t M, int64_t N, Each each) {
  omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
    for (int64_t m0 = 0; m0 < M; ++m0) each(static_cast<int>(nb / kLanes), nb, n0, m0);
  });
}

// A group's 32-bit sums of u * xq into the tile's float32 sums: acc += dot * scale + xsum *
// minimum, with the group's (scale, minimum) bf16 pairs of the tile's columns at `pairs`.
template <int M, int V>
inline void w4a8_group(__m256 (&acc)[M][V], const __m256i (&dot)[M][V], const Int4Rows& rows,
                       const uint16_t* pairs, int64_t g, int64_t m0) {
  const int64_t groups = rows.K / kGroup4;
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
  const int64_t K = rows.K, Q = K / 4, groups = K / kGroup4;
  const auto* quads = reinterpret_cast<const int32_t*>(rows.xq);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i pairs[M][V];  // 16-bit sums of the group's products
    for (int m = 0; m < M; ++m)
      for (int v = 0; v < V; ++v) pairs[m][v] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int64_t s = 0; s < kGroup4 / 8; ++s) {
      const int64_t p = g * (kGroup4 / 8) + s;
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
          pairs[m][v] = _mm256_add_epi16(pairs[m][v], _mm256_maddubs_epi16(low, low_x[m]));
          pairs[m][v] = _mm256_add_epi16(pairs[m][v], _mm256_maddubs_epi16(high, high_x[m]));
        }
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int m = 0; m < M; ++m)  // widened to 32 bits
      for (int v = 0; v < V; ++v) pairs[m][v] = _mm256_madd_epi16(pairs[m][v], ones);
    w4a8_group<M, V>(acc, pairs, rows, scales + (g * nb + c) * 2, g, m0);
  }
  w4a8_store<M, V>(acc, rows, n0 + c, m0, store);
}

// The same tile with AVX-VNNI's vpdpbusd (32-bit sums, no 16-bit stage): only called where
// the CPU reports avx_vnni.
template <int M, int V, typename Out>
__attribute__((target("avx2,fma,avxvnni"))) void w4a8_tile_vnni(
    const Int4Rows& rows, const uint8_t* block, const uint16_t* scales, int64_t nb, int64_t c,
    int64_t n0, int64_t m0, const Store<Out>& store) {
  const int64_t K = rows.K, Q = K / 4, groups = K / kGroup4;
  const auto* quads = reinterpret_cast<const int32_t*>(rows.xq);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < V; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i dot[M][V];
    for (int m = 0; m < M; ++m)
      for (int v = 0; v < V; ++v) dot[m][v] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int64_t s = 0; s < kGroup4 / 8; ++s) {
      const int64_t p = g * (kGroup4 / 8) + s;
      const uint8_t* step = block + (p * nb + c) * 4;
      __m256i low_x[M], high_x[M];
      for (int m = 0; m < M; ++m) {
        low_x[m] = _mm256_set1_epi32(quads[(m0 + m) * Q + 2 * p]);
        high_x[m] = _mm256_set1_epi32(quads[(m0 + m) * Q + 2 * p + 1]);
      }
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + v * 32));
        const __m256i low = _mm256_and_si256(w, nibble);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
        for (int m = 0; m < M; ++m) {
          dot[m][v] = _mm256_dpbusd_avx_epi32(dot[m][v], low, low_x[m]);
          dot[m][v] = _mm256_dpbusd_avx_epi32(dot[m][v], high, high_x[m]);
        }
      }
    }
    w4a8_group<M, V>(acc, dot, rows, scales + (g * nb + c) * 2, g, m0);
  }
  w4a8_store<M, V>(acc, rows, n0 + c, m0, store);
}

template <bool Vnni, int M, int V, typename Out>
void w4a8_tile_of(const Int4Rows& rows, const uint8_t* block, const uint16_t* scales, int64_t nb,
                  int64_t c, int64_t n0, int64_t m0, const Store<Out>& store) {
  if constexpr (Vnni)
    w4a8_tile_vnni<M, V, Out>(rows, block, scales, nb, c, n0, m0, store);
  else
    w4a8_tile<M, V, Out>(rows, block, scales, nb, c, n0, m0, store);
}

// Column blocks outer (split over the stage's threads); below kInt4PairRows one row x the
// whole block a tile, from it 2 rows x 16 columns.
template <bool Vnni, typename Out>
void w4a8_all(const Int4Rows& rows, int64_t M, const uint8_t* w, const uint16_t* scales,
              int64_t N, const Store<Out>& store) {
  const int64_t K = rows.K;
  omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
    const uint8_t* block = w + n0 * K / 2;
    const uint16_t* block_scales = scales + n0 * (K / kGroup4) * 2;
    if (M < kInt4PairRows) {
      for (int64_t m0 = 0; m0 < M; ++m0) {
        switch (nb / kLanes) {
          case 2: w4a8_tile_of<Vnni, 1, 2>(rows, block, block_scales, nb, 0, n0, m0, store); break;
          case 4: w4a8_tile_of<Vnni, 1, 4>(rows, block, block_scales, nb, 0, n0, m0, store); break;
          case 6: w4a8_tile_of<Vnni, 1, 6>(rows, block, block_scales, nb, 0, n0, m0, store); break;
          default: w4a8_tile_of<Vnni, 1, 8>(rows, block, block_scales, nb, 0, n0, m0, store); break;
        }
      }
      return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += 2) {
      for (int64_t c = 0; c < nb; c += 16) {
        if (M - m0 >= 2)
          w4a8_tile_of<Vnni, 2, 2>(rows, block, block_scales, nb, c, n0, m0, store);
        else
          w4a8_tile_of<Vnni, 1, 2>(rows, block, block_scales, nb, c, n0, m0, store);
      }
    }
  });
}

// A row's symmetric 8-bit scale: amax / 127 (1 for a row of zeros).
template <typename In>
float row_scale(const In* row, int64_t K) {
  float amax = 0.f;
  for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(static_cast<float>(row[k])));
  return amax > 0.f ? amax / 127.f : 1.f;
}

// Per-row symmetric quantization to signed 8 bits, and each group's sum of the codes.
template <typename In>
void quantize_groups(const In* x, int64_t M, int64_t K, int8_t* q, float* scales, int32_t* sums) {
  const int64_t groups = K / kGroup4;
  for (int64_t m = 0; m < M; ++m) {
    const In* row = x + m * K;
    const float scale = row_scale(row, K), inv = 1.f / scale;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t sum = 0;
      for (int64_t k = g * kGroup4; k < (g + 1) * kGroup4; ++k) {
        const auto code = static_cast<int8_t>(std::nearbyint(static_cast<float>(row[k]) * inv));
        q[m * K + k] = code;
        sum += code;
      }
      sums[m * groups + g] = sum;
    }
    scales[m] = scale;
  }
}

bool cpu_has_avx_vnni() {
  static const bool has = __builtin_cpu_supports("avxvnni");
  return has;
}

bool vnni_allowed = true;  // set_avx_vnni(false): the vpmaddubsw tiles, for tests on VNNI CPUs

bool has_avx_vnni() { return vnni_allowed && cpu_has_avx_vnni(); }

// Per-row symmetric quantization to signed 8 bits in [-127, 127].
template <typename In>
void quantize_rows(const In* x, int64_t M, int64_t K, int8_t* q, float* scales) {
  for (int64_t m = 0; m < M; ++m) {
    const In* row = x + m * K;
    const float scale = row_scale(row, K), inv = 1.f / scale;
    for (int64_t k = 0; k < K; ++k)
      q[m * K + k] = static_cast<int8_t>(std::nearbyint(static_cast<float>(row[k]) * inv));
    scales[m] = scale;
  }
}

}  // namespace

torch::Tensor gemv_bf16(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias) {
  omni_cpu::check_gemv(x, w, 2);
  TORCH_CHECK(w.scalar_type() == torch::kBFloat16, "gemv_bf16: bf16 w");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const auto xf = x.to(torch::kFloat32).contiguous();
  const float* xp = xf.data_ptr<float>();
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  return with_output<Store>(x, N, bias, [&](const auto& store) {
    using S = std::decay_t<decltype(store)>;
    using Out = std::remove_pointer_t<decltype(S::out)>;
    for_each_tile(M, N, [&](int vectors, int64_t nb, int64_t n0, int64_t m0) {
      dispatch<Bf16Tile<Out>::template Of>(vectors, xp, K, wp + n0 * K, nb, int64_t{0}, n0, m0,
                                           store);
    });
  });
}

// wsum is accepted for the AVX-512 kernel's signature (its x is shifted by 128) and unused.
torch::Tensor gemv_w8a8(torch::Tensor x, torch::Tensor w, torch::Tensor wscale,
                        torch::Tensor wsum, c10::optional<torch::Tensor> bias) {
  omni_cpu::check_gemv(x, w, 4);
  TORCH_CHECK(w.scalar_type() == torch::kInt8, "gemv_w8a8: int8 w");
  (void)wsum;
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  auto xq = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto xscale = torch::empty({M}, x.options().dtype(torch::kFloat32));
  int8_t* q = xq.data_ptr<int8_t>();
  float* xs = xscale.data_ptr<float>();
  omni_cpu::with_rows(x, [&](const auto* rows) { quantize_rows(rows, M, K, q, xs); });
  const Int8Rows rows{q, xs, wscale.data_ptr<float>(), K};
  const int8_t* wp = w.data_ptr<int8_t>();
  const bool vnni = has_avx_vnni();
  return with_output<Store>(x, N, bias, [&](const auto& store) {
    using S = std::decay_t<decltype(store)>;
    using Out = std::remove_pointer_t<decltype(S::out)>;
    for_each_tile(M, N, [&](int vectors, int64_t nb, int64_t n0, int64_t m0) {
      if (vnni)
        dispatch<W8a8Tile<Out, true>::template Of>(vectors, rows, wp + n0 * K, nb, int64_t{0},
                                                   n0, m0, store);
      else
        dispatch<W8a8Tile<Out, false>::template Of>(vectors, rows, wp + n0 * K, nb, int64_t{0},
                                                    n0, m0, store);
    });
  });
}

torch::Tensor gemv_w4a8(torch::Tensor x, torch::Tensor w, torch::Tensor scales,
                        c10::optional<torch::Tensor> bias) {
  const bool vnni = has_avx_vnni();
  return omni_cpu::gemv_w4a8_with<Store>(
      x, w, scales, bias, [](const auto* data, auto... rest) { quantize_groups(data, rest...); },
      [vnni](const Int4Rows& rows, int64_t M, const uint8_t* wp, const uint16_t* sp, int64_t N,
             const auto& store) {
        if (vnni)
          w4a8_all<true>(rows, M, wp, sp, N, store);
        else
          w4a8_all<false>(rows, M, wp, sp, N, store);
      });
}

// The same products on raw pointers and caller-owned buffers (declared in predictor_step.cpp,
// which chains them; this module's build of it).
namespace omni_cpu {

int64_t product_rows(int64_t M) { return M; }  // no AMX here: no whole tiles to read

template <typename Out>
void bf16_product_f32(const float* x, const c10::BFloat16* w, int64_t M, int64_t K, int64_t N,
                      const float* bias, Out* out) {
  const auto* wp = reinterpret_cast<const uint16_t*>(w);
  const Store<Out> store{out, bias, N};
  for_each_tile(M, N, [&](int vectors, int64_t nb, int64_t n0, int64_t m0) {
    dispatch<Bf16Tile<Out>::template Of>(vectors, x, K, wp + n0 * K, nb, int64_t{0}, n0, m0,
                                         store);
  });
}

template <typename In>
void quantize_s8_rows(const In* x, int64_t M, int64_t K, int8_t* q, float* scales) {
  quantize_rows(x, M, K, q, scales);
}

template <typename Out>
void w8a8_product_s8(const int8_t* xq, const float* xscale, const int8_t* w, const float* wscale,
                     int64_t M, int64_t K, int64_t N, const float* bias, Out* out) {
  const Int8Rows rows{xq, xscale, wscale, K};
  const Store<Out> store{out, bias, N};
  const bool vnni = has_avx_vnni();
  for_each_tile(M, N, [&](int vectors, int64_t nb, int64_t n0, int64_t m0) {
    if (vnni)
      dispatch<W8a8Tile<Out, true>::template Of>(vectors, rows, w + n0 * K, nb, int64_t{0}, n0,
                                                 m0, store);
    else
      dispatch<W8a8Tile<Out, false>::template Of>(vectors, rows, w + n0 * K, nb, int64_t{0}, n0,
                                                  m0, store);
  });
}

template <typename In>
void quantize_s8(const In* x, int64_t M, int64_t K, int8_t* q, float* scales, int32_t* sums) {
  quantize_groups(x, M, K, q, scales, sums);
}

template <typename Out>
void w4a8_product(const int8_t* xq, const float* xscale, const int32_t* xsum, const uint8_t* w,
                  const c10::BFloat16* scales, int64_t M, int64_t K, int64_t N,
                  const float* bias, Out* out) {
  const Int4Rows rows{xq, xscale, xsum, K};
  const auto* sp = reinterpret_cast<const uint16_t*>(scales);
  const Store<Out> store{out, bias, N};
  if (has_avx_vnni())
    w4a8_all<true>(rows, M, w, sp, N, store);
  else
    w4a8_all<false>(rows, M, w, sp, N, store);
}

#define OMNI_AVX2_ROWS(T)                                                                     \
  template void bf16_product_f32<T>(const float*, const c10::BFloat16*, int64_t, int64_t,     \
                                    int64_t, const float*, T*);                              \
  template void quantize_s8_rows<T>(const T*, int64_t, int64_t, int8_t*, float*);             \
  template void w8a8_product_s8<T>(const int8_t*, const float*, const int8_t*, const float*,  \
                                   int64_t, int64_t, int64_t, const float*, T*);             \
  template void quantize_s8<T>(const T*, int64_t, int64_t, int8_t*, float*, int32_t*);        \
  template void w4a8_product<T>(const int8_t*, const float*, const int32_t*, const uint8_t*,  \
                                const c10::BFloat16*, int64_t, int64_t, int64_t,            \
                                const float*, T*);
OMNI_AVX2_ROWS(float)
OMNI_AVX2_ROWS(c10::BFloat16)
#undef OMNI_AVX2_ROWS

}  // namespace omni_cpu

bool avx_vnni() { return has_avx_vnni(); }

// Allows (the default) or forbids AVX-VNNI in gemv_w8a8 and gemv_w4a8; whether it is used now.
bool set_avx_vnni(bool allowed) {
  vnni_allowed = allowed;
  return has_avx_vnni();
}

// decode_attention.cpp and predictor_step.cpp (built into this module too)
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values,
                               int64_t end, double scale);
void bind_predictor_step(pybind11::module& m);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv_bf16", &gemv_bf16, "y = x @ w.T (+ bias), bf16 weights, float32 arithmetic (AVX2)");
  m.def("gemv_w8a8", &gemv_w8a8, "y = x @ dequant(w).T (+ bias), int8 weights (AVX2 / AVX-VNNI)");
  m.def("gemv_w4a8", &gemv_w4a8, "y = x @ dequant(w).T (+ bias), 4-bit weights in groups of 32");
  m.def("decode_attention", &decode_attention, "one query position over a short KV cache");
  m.def("avx_vnni", &avx_vnni, "whether gemv_w8a8 uses AVX-VNNI's vpdpbusd on this CPU");
  m.def("set_avx_vnni", &set_avx_vnni,
        "allow (default) or forbid AVX-VNNI in gemv_w8a8/gemv_w4a8; whether it is used");
  bind_predictor_step(m);
}
