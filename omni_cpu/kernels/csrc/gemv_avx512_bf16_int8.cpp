// Matrix-vector and small matrix products that stream weights at memory speed on AVX-512.
//
// y[M, N] = x[M, K] @ W[N, K]^T, W repacked once at load. M is 1 at decode, a few
// rows with batched streams, tens to hundreds in a prefill.
//
// Layout: output columns in the vector lanes. W is cut into blocks of 64 columns
// (the last may be 16, 32 or 48 wide); block b holds W[n0:n0+nb, :] as
// [K / G][nb][G] with G = 2 for bf16 (vdpbf16ps takes pairs) and 4 for int8
// (vpdpbusd takes quads), so a block is one sequential stream (the hardware
// prefetcher follows it) and each 64-byte load feeds 16 output columns.
//
// Register tile: up to 6 rows of x × 4 vectors (64 columns): 24 accumulators,
// 4 weight loads and one broadcast of x per row per step, 24 multiply-adds per
// 4 loads. The weights of a block pass from memory once per call for M <= 6 and
// from L2 for each further tile of 6 rows, so a prefill runs at the multiply-add
// rate (measured 3.4 G vdpbf16ps/s per Zen 4 core, about oneDNN's) and a decode
// step at the memory's. No horizontal sums: each accumulator is 16 outputs.
//
// gemv_bf16: bf16 weights and activations, fp32 accumulation (AVX512_BF16 vdpbf16ps).
// gemv_w8a8: int8 weights with one scale per output row, activations quantized per
//            row to unsigned 8 bits around 128 inside the call (AVX512_VNNI vpdpbusd,
//            32-bit accumulation: no 16-bit saturation, so all 8 bits are kept).
// Both take AMX tiles instead from `amx_rows` rows up (below), where the CPU has
// amx_bf16 / amx_int8 and the caller asks (0: never).
//
// Threads: column blocks are split over torch's OpenMP team (at::parallel_for), so
// the module must be compiled with -fopenmp: without it parallel_for runs serially.
// Built by omni_cpu/kernels/build.py only on CPUs that report both extensions; the module's
// bindings are at the end of this file.

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gemv.h"
#include "kernel_common.h"
#include "vec.h"

namespace {

using omni_cpu::with_output;
using omni_cpu::vec::Store;

constexpr int64_t kLanes = 16;        // fp32/int32 outputs per vector
constexpr int64_t kBlockVecs = 4;     // vectors per full block
constexpr int64_t kBlock = kLanes * kBlockVecs;  // 64 columns
constexpr int kTileRows = 6;          // rows of x per register tile (6 x 4 = 24 accumulators)

template <int M, int NB, typename Out>
void bf16_tile(const uint16_t* x, int64_t K, const uint16_t* block, int64_t n0, int64_t m0,
               const Store<Out>& store) {
  __m512 acc[M][NB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < NB; ++r) acc[m][r] = _mm512_setzero_ps();
  const auto* pairs = reinterpret_cast<const int32_t*>(x);  // x as bf16 pairs
  const int64_t P = K / 2;
  for (int64_t p = 0; p < P; ++p) {
    const uint16_t* step = block + p * NB * 32;
    __m512bh wv[NB];
#pragma GCC unroll 4
    for (int r = 0; r < NB; ++r) wv[r] = (__m512bh)_mm512_loadu_si512(step + r * 32);
#pragma GCC unroll 6
    for (int m = 0; m < M; ++m) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pairs[m * P + p]);
#pragma GCC unroll 4
      for (int r = 0; r < NB; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv[r], xv);
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
    for (int r = 0; r < NB; ++r) store(m0 + m, n0 + r * kLanes, acc[m][r]);
}

template <int M, int NB, typename Out>
void w8a8_tile(const uint8_t* xq, int64_t K, const int8_t* block, int64_t n0, int64_t m0,
               const float* xscale, const float* wscale, const int32_t* wsum,
               const Store<Out>& store) {
  __m512i acc[M][NB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < NB; ++r) acc[m][r] = _mm512_setzero_si512();
  const auto* quads = reinterpret_cast<const int32_t*>(xq);  // x as 4-byte groups
  const int64_t Q = K / 4;
  for (int64_t q = 0; q < Q; ++q) {
    const int8_t* step = block + q * NB * 64;
    __m512i wv[NB];
#pragma GCC unroll 4
    for (int r = 0; r < NB; ++r) wv[r] = _mm512_loadu_si512(step + r * 64);
#pragma GCC unroll 6
    for (int m = 0; m < M; ++m) {
      const __m512i xv = _mm512_set1_epi32(quads[m * Q + q]);
#pragma GCC unroll 4
      for (int r = 0; r < NB; ++r) acc[m][r] = _mm512_dpbusd_epi32(acc[m][r], xv, wv[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NB; ++r) {
    const int64_t j = n0 + r * kLanes;
    // x was shifted by +128 to be unsigned: subtract 128 * sum(w) per column.
    const __m512i shift = _mm512_slli_epi32(_mm512_loadu_si512(wsum + j), 7);
    const __m512 ws = _mm512_loadu_ps(wscale + j);
#pragma GCC unroll 6
    for (int m = 0; m < M; ++m) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[m][r], shift));
      store(m0 + m, j, _mm512_mul_ps(dot, _mm512_mul_ps(ws, _mm512_set1_ps(xscale[m]))));
    }
  }
}

// Calls tile<rows, vectors>(args...) for rows in 1..6 and vectors in 1..4.
template <template <int, int> class Tile, typename... Args>
void dispatch(int rows, int vectors, Args&&... args) {
  auto by_vectors = [&](auto rows_c) {
    constexpr int R = decltype(rows_c)::value;
    switch (vectors) {
      case 1: Tile<R, 1>::run(args...); break;
      case 2: Tile<R, 2>::run(args...); break;
      case 3: Tile<R, 3>::run(args...); break;
      default: Tile<R, 4>::run(args...); break;
    }
  };
  switch (rows) {
    case 1: by_vectors(std::integral_constant<int, 1>{}); break;
    case 2: by_vectors(std::integral_constant<int, 2>{}); break;
    case 3: by_vectors(std::integral_constant<int, 3>{}); break;
    case 4: by_vectors(std::integral_constant<int, 4>{}); break;
    case 5: by_vectors(std::integral_constant<int, 5>{}); break;
    default: by_vectors(std::integral_constant<int, 6>{}); break;
  }
}

template <typename Out>
struct Bf16Tile {
  template <int M, int NB>
  struct Of {
    static void run(const uint16_t* x, int64_t K, const uint16_t* block, int64_t n0, int64_t m0,
                    const Store<Out>& store) {
      bf16_tile<M, NB, Out>(x, K, block, n0, m0, store);
    }
  };
};

template <typename Out>
struct W8a8Tile {
  template <int M, int NB>
  struct Of {
    static void run(const uint8_t* xq, int64_t K, const int8_t* block, int64_t n0, int64_t m0,
                    const float* xscale, const float* wscale, const int32_t* wsum,
                    const Store<Out>& store) {
      w8a8_tile<M, NB, Out>(xq, K, block, n0, m0, xscale, wscale, wsum, store);
    }
  };
};

// Column blocks outer (split over the stage's threads), tiles of rows inner: a
// block's weights come from memory once per call and, for further tiles, from L2.
template <typename Each>
void for_each_tile(int64_t M, int64_t N, Each each) {
  omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
    const int vectors = static_cast<int>(nb / kLanes);
    for (int64_t m0 = 0; m0 < M; m0 += kTileRows)
      each(static_cast<int>(std::min<int64_t>(kTileRows, M - m0)), vectors, n0, m0);
  });
}

template <typename Out>
void bf16_all(const uint16_t* x, const uint16_t* w, int64_t M, int64_t K, int64_t N,
              const Store<Out>& store) {
  for_each_tile(M, N, [&](int rows, int vectors, int64_t n0, int64_t m0) {
    dispatch<Bf16Tile<Out>::template Of>(rows, vectors, x + m0 * K, K, w + n0 * K, n0, m0,
                                         store);
  });
}

template <typename Out>
void w8a8_all(const uint8_t* xq, const int8_t* w, int64_t M, int64_t K, int64_t N,
              const float* xscale, const float* wscale, const int32_t* wsum,
              const Store<Out>& store) {
  for_each_tile(M, N, [&](int rows, int vectors, int64_t n0, int64_t m0) {
    dispatch<W8a8Tile<Out>::template Of>(rows, vectors, xq + m0 * K, K, w + n0 * K, n0, m0,
                                         xscale + m0, wscale, wsum, store);
  });
}

// AMX: the same packed blocks through the tile unit, for products of many rows.
//
// A block's [K / G][nb][G] layout is what AMX's B operand wants: the 16 rows of a
// B tile are 16 consecutive K groups (bf16 pairs, int8 quads) of 16 columns, 64
// bytes each, nb * 64 bytes apart, so the one packing serves both units. A tiles
// are 16 rows of x, 64 bytes of K each, read from x itself (padded to whole
// tiles). Tiles 0-3 accumulate a 32 x 32 piece of the output (2 row tiles x 2
// column tiles), 4-5 hold x and 6-7 W: per K step, 4 loads feed 4 tile
// multiplies and each weight tile serves 32 rows. Column pieces outer, rows
// inner: a piece's weights come from memory once per call.

constexpr int64_t kAmxRows = 16;   // rows of a tile
constexpr int64_t kAmxBytes = 64;  // bytes of a tile row

bool amx_permitted() {
  // Linux gives a process AMX's 8 KB of tile state only when asked (arch_prctl).
  static const bool ok = [] {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure_tiles() {  // per thread: every tile 16 rows x 64 bytes
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kAmxRows;
    config.colsb[t] = kAmxBytes;
  }
  _tile_loadconfig(&config);
}

// GCC's tile intrinsics are macros that paste the tile's number into the
// instruction: numbers must be literals, hence one macro per operation.
#define OMNI_TILE_MULTIPLY(Int8, c, a, b) \
  do {                                    \
    if constexpr (Int8)                   \
      _tile_dpbusd(c, a, b);              \
    else                                  \
      _tile_dpbf16ps(c, a, b);            \
  } while (0)

// out[RT * 16][CT * 16] (32-bit) = x rows . W columns of one piece, over all of K.
template <bool Int8, int RT, int CT>
void amx_piece(const uint8_t* a, int64_t a_stride, const uint8_t* b, int64_t b_stride,
               int64_t steps, void* out) {
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) _tile_zero(2);
  if constexpr (RT > 1 && CT > 1) _tile_zero(3);
  const int64_t b_step = kAmxRows * b_stride;  // 16 K groups further down the block
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a + s * kAmxBytes, a_stride);
    if constexpr (RT > 1) _tile_loadd(5, a + kAmxRows * a_stride + s * kAmxBytes, a_stride);
    _tile_loadd(6, b + s * b_step, b_stride);
    if constexpr (CT > 1) _tile_loadd(7, b + s * b_step + kAmxBytes, b_stride);
    OMNI_TILE_MULTIPLY(Int8, 0, 4, 6);
    if constexpr (CT > 1) OMNI_TILE_MULTIPLY(Int8, 1, 4, 7);
    if constexpr (RT > 1) OMNI_TILE_MULTIPLY(Int8, 2, 5, 6);
    if constexpr (RT > 1 && CT > 1) OMNI_TILE_MULTIPLY(Int8, 3, 5, 7);
  }
  auto* o = static_cast<uint8_t*>(out);
  const int64_t o_stride = CT * kAmxBytes;
  _tile_stored(0, o, o_stride);
  if constexpr (CT > 1) _tile_stored(1, o + kAmxBytes, o_stride);
  if constexpr (RT > 1) _tile_stored(2, o + kAmxRows * o_stride, o_stride);
  if constexpr (RT > 1 && CT > 1) _tile_stored(3, o + kAmxRows * o_stride + kAmxBytes, o_stride);
}

// Every piece of y = x . W^T through AMX; `finish(piece, rows, m0, n0, column_tiles)`
// turns a piece's 32-bit sums into outputs. `a` holds whole tiles of rows.
template <bool Int8, typename Finish>
void amx_all(const uint8_t* a, int64_t a_stride, int64_t M, const uint8_t* w,
             int64_t column_bytes, int64_t N, Finish finish) {
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  const int64_t steps = a_stride / kAmxBytes;  // K steps of 64 bytes of x
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    configure_tiles();
    alignas(64) uint32_t piece[2 * kAmxRows * 2 * kLanes];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t n0 = blk * kBlock;
      const int64_t vectors = std::min(kBlock, N - n0) / kLanes;
      const uint8_t* block = w + n0 * column_bytes;
      const int64_t b_stride = vectors * kAmxBytes;
      for (int64_t c = 0; c < vectors; c += 2) {
        const bool two_columns = vectors - c > 1;
        for (int64_t m0 = 0; m0 < M; m0 += 2 * kAmxRows) {
          const bool two_rows = M - m0 > kAmxRows;
          const uint8_t* rows = a + m0 * a_stride;
          const uint8_t* cols = block + c * kAmxBytes;
          if (two_rows && two_columns)
            amx_piece<Int8, 2, 2>(rows, a_stride, cols, b_stride, steps, piece);
          else if (two_rows)
            amx_piece<Int8, 2, 1>(rows, a_stride, cols, b_stride, steps, piece);
          else if (two_columns)
            amx_piece<Int8, 1, 2>(rows, a_stride, cols, b_stride, steps, piece);
          else
            amx_piece<Int8, 1, 1>(rows, a_stride, cols, b_stride, steps, piece);
          finish(piece, std::min<int64_t>(2 * kAmxRows, M - m0), m0, n0 + c * kLanes,
                 two_columns ? 2 : 1);
        }
      }
    }
    _tile_release();
  });
}

template <typename Out>
void amx_bf16_all(const uint16_t* x, const uint16_t* w, int64_t M, int64_t K, int64_t N,
                  const Store<Out>& store) {
  amx_all<false>(reinterpret_cast<const uint8_t*>(x), K * 2, M,
                 reinterpret_cast<const uint8_t*>(w), K * 2, N,
                 [&](const uint32_t* piece, int64_t rows, int64_t m0, int64_t n0, int tiles) {
                   const auto* sums = reinterpret_cast<const float*>(piece);
                   for (int64_t r = 0; r < rows; ++r)
                     for (int t = 0; t < tiles; ++t)
                       store(m0 + r, n0 + t * kLanes,
                             _mm512_load_ps(sums + (r * tiles + t) * kLanes));
                 });
}

template <typename Out>
void amx_w8a8_all(const uint8_t* xq, const int8_t* w, int64_t M, int64_t K, int64_t N,
                  const float* xscale, const float* wscale, const int32_t* wsum,
                  const Store<Out>& store) {
  amx_all<true>(xq, K, M, reinterpret_cast<const uint8_t*>(w), K, N,
                [&](const uint32_t* piece, int64_t rows, int64_t m0, int64_t n0, int tiles) {
                  for (int t = 0; t < tiles; ++t) {
                    const int64_t j = n0 + t * kLanes;
                    const __m512i shift = _mm512_slli_epi32(_mm512_loadu_si512(wsum + j), 7);
                    const __m512 ws = _mm512_loadu_ps(wscale + j);
                    for (int64_t r = 0; r < rows; ++r) {
                      const __m512i sums = _mm512_load_si512(piece + (r * tiles + t) * kLanes);
                      const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, shift));
                      store(m0 + r, j,
                            _mm512_mul_ps(dot, _mm512_mul_ps(ws, _mm512_set1_ps(xscale[m0 + r]))));
                    }
                  }
                });
}

// AMX for this product: asked for (M >= amx_rows > 0), K in whole tile rows, permitted.
bool use_amx(int64_t M, int64_t K_bytes, int64_t amx_rows) {
  return amx_rows > 0 && M >= amx_rows && K_bytes % kAmxBytes == 0 && amx_permitted();
}

int64_t whole_tiles(int64_t M) { return (M + kAmxRows - 1) / kAmxRows * kAmxRows; }

// 16 values of a row as float32 (masked past the row's end: zeros).
inline __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
inline __m512 load16(const c10::BFloat16* p, __mmask16 mask) {
  const __m256i raw = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// Per-row symmetric quantization to unsigned 8 bits around 128, 16 values a vector,
// rows split over the stage's threads for a prefill (a decode's one row stays put).
template <typename In>
void quantize_rows(const In* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  at::parallel_for(0, M, 8, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const In* row = x + m * K;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < K; k += kLanes) {
        const __mmask16 mask = K - k >= kLanes ? 0xFFFF : (1u << (K - k)) - 1;
        amax = _mm512_max_ps(amax, _mm512_abs_ps(load16(row + k, mask)));
      }
      const float top = _mm512_reduce_max_ps(amax);
      const float scale = top > 0.f ? top / 127.f : 1.f;
      const __m512 inv = _mm512_set1_ps(1.f / scale);
      const __m512i offset = _mm512_set1_epi32(128);
      for (int64_t k = 0; k < K; k += kLanes) {
        const __mmask16 mask = K - k >= kLanes ? 0xFFFF : (1u << (K - k)) - 1;
        // cvtps rounds to nearest even, as nearbyint does in the default mode.
        const __m512i v = _mm512_add_epi32(
            _mm512_cvtps_epi32(_mm512_mul_ps(load16(row + k, mask), inv)), offset);
        _mm_mask_storeu_epi8(q + m * K + k, mask, _mm512_cvtepi32_epi8(v));
      }
      scales[m] = scale;
    }
  });
}

}  // namespace

torch::Tensor gemv_bf16(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias,
                        int64_t amx_rows) {
  omni_cpu::check_gemv(x, w, 2);
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16,
              "gemv_bf16: bf16 x and w");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  if (use_amx(M, K * 2, amx_rows)) {
    torch::Tensor rows = x;  // A tiles read whole tiles of 16 rows: pad with zeros
    if (M % kAmxRows) rows = torch::constant_pad_nd(x, {0, 0, 0, whole_tiles(M) - M});
    const auto* xp = reinterpret_cast<const uint16_t*>(rows.data_ptr());
    return with_output<Store>(x, N, bias,
                              [&](const auto& store) { amx_bf16_all(xp, wp, M, K, N, store); });
  }
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr());
  return with_output<Store>(x, N, bias,
                            [&](const auto& store) { bf16_all(xp, wp, M, K, N, store); });
}

torch::Tensor gemv_w8a8(torch::Tensor x, torch::Tensor w, torch::Tensor wscale,
                        torch::Tensor wsum, c10::optional<torch::Tensor> bias, int64_t amx_rows) {
  omni_cpu::check_gemv(x, w, 4);
  TORCH_CHECK(w.scalar_type() == torch::kInt8, "gemv_w8a8: int8 w");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const bool amx = use_amx(M, K, amx_rows);
  // A tiles read whole tiles of 16 rows: the rows past M are never stored.
  auto xq = torch::empty({amx ? whole_tiles(M) : M, K}, x.options().dtype(torch::kUInt8));
  auto xscale = torch::empty({M}, x.options().dtype(torch::kFloat32));
  uint8_t* q = xq.data_ptr<uint8_t>();
  float* xs = xscale.data_ptr<float>();
  omni_cpu::with_rows(x, [&](const auto* rows) { quantize_rows(rows, M, K, q, xs); });
  const int8_t* wp = w.data_ptr<int8_t>();
  const float* ws = wscale.data_ptr<float>();
  const int32_t* wsm = wsum.data_ptr<int32_t>();
  return with_output<Store>(x, N, bias, [&](const auto& store) {
    if (amx)
      amx_w8a8_all(q, wp, M, K, N, xs, ws, wsm, store);
    else
      w8a8_all(q, wp, M, K, N, xs, ws, wsm, store);
  });
}

// The same products on raw pointers and caller-owned buffers (gemv.h; predictor_step.cpp
// chains them).
int64_t omni_cpu::product_rows(int64_t M) { return whole_tiles(M); }

template <typename In>
void omni_cpu::quantize_u8(const In* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  quantize_rows(x, M, K, q, scales);
}

template <typename Out>
void omni_cpu::bf16_product(const c10::BFloat16* x, const c10::BFloat16* w, int64_t M, int64_t K,
                            int64_t N, const float* bias, Out* out, int64_t amx_rows) {
  const auto* xp = reinterpret_cast<const uint16_t*>(x);
  const auto* wp = reinterpret_cast<const uint16_t*>(w);
  const Store<Out> store{out, bias, N};
  if (use_amx(M, K * 2, amx_rows))
    amx_bf16_all(xp, wp, M, K, N, store);
  else
    bf16_all(xp, wp, M, K, N, store);
}

template <typename Out>
void omni_cpu::w8a8_product(const uint8_t* xq, const float* xscale, const int8_t* w,
                            const float* wscale, const int32_t* wsum, int64_t M, int64_t K,
                            int64_t N, const float* bias, Out* out, int64_t amx_rows) {
  const Store<Out> store{out, bias, N};
  if (use_amx(M, K, amx_rows))
    amx_w8a8_all(xq, w, M, K, N, xscale, wscale, wsum, store);
  else
    w8a8_all(xq, w, M, K, N, xscale, wscale, wsum, store);
}

#define OMNI_AVX512_ROWS(T)                                                                   \
  template void omni_cpu::quantize_u8<T>(const T*, int64_t, int64_t, uint8_t*, float*);       \
  template void omni_cpu::bf16_product<T>(const c10::BFloat16*, const c10::BFloat16*, int64_t, \
                                          int64_t, int64_t, const float*, T*, int64_t);        \
  template void omni_cpu::w8a8_product<T>(const uint8_t*, const float*, const int8_t*,         \
                                          const float*, const int32_t*, int64_t, int64_t,      \
                                          int64_t, const float*, T*, int64_t);
OMNI_AVX512_ROWS(float)
OMNI_AVX512_ROWS(c10::BFloat16)
#undef OMNI_AVX512_ROWS

bool amx_ready() { return amx_permitted(); }

// How many of the stage's threads one parallel region over `items` reaches (tests).
int64_t parallel_threads(int64_t items) {
  std::vector<std::atomic<int>> seen(at::get_num_threads());
  at::parallel_for(0, items, 1, [&](int64_t, int64_t) {
    seen[at::get_thread_num() % static_cast<int>(seen.size())] = 1;
  });
  int64_t reached = 0;
  for (auto& flag : seen) reached += flag.load();
  return reached;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv_bf16", &gemv_bf16, "y = x @ w.T (+ bias), bf16, weights packed by column blocks;"
        " AMX tiles from amx_rows rows (0: never)");
  m.def("gemv_w8a8", &gemv_w8a8, "y = x @ dequant(w).T (+ bias), int8 weights packed likewise");
  m.def("gemv_w4a8", &omni_cpu::gemv_w4a8,
        "y = x @ dequant(w).T (+ bias), 4-bit weights in groups of 32");
  m.def("amx_ready", &amx_ready, "this process may use AMX tiles (Linux granted the state)");
  m.def("parallel_threads", &parallel_threads, "threads one parallel region reaches");
  m.def("decode_attention", &omni_cpu::decode_attention,
        "one query position over a short KV cache");
  m.def("snake_beta", &omni_cpu::snake_beta,
        "x + inv_beta * sin(alpha * x)^2 per channel of time-major [B, L, C], after a tail");
  omni_cpu::bind_predictor_step(m);
}
