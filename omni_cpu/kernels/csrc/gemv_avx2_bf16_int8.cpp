// The GEMV of gemv_avx512_bf16_int8.cpp for CPUs with AVX2 + FMA only (Zen 2/3, Haswell to
// Skylake client, Cascade Lake without avx512_bf16): modules of their own, built without
// AVX-512. kernels/build.py compiles this file, gemv_avx2_int4.cpp and the shared ones twice:
// plain AVX2, and with -mavxvnni for CPUs that report avx_vnni (Alder Lake and later, Zen 5),
// chosen at run time by the CPU's flags. One source: `__AVXVNNI__` picks the instruction
// (vec.h's dot_quads), as ggml's CPU kernels do.
//
// Same packed layout as the AVX-512 module (omni_cpu/kernels/packing.py packs both): blocks of
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
//            widens to 32 bits. Built with AVX-VNNI, vpdpbusd (VEX) does the multiply and
//            the 32-bit sum in one step on the same operands: the same integers.
// gemv_w4a8: gemv_avx2_int4.cpp.
// decode_attention: attention_decode.cpp, built into these modules too on vec.h's 8-lane
//            vectors (the code predictor's attention at every step after its first).
//
// Register tile (16 ymm registers): one row x the whole block (8 vectors), the block's
// weights from memory for the first row and from L2 for the others. Tiles of 2 rows x
// half or a quarter of a block share each load between rows but walk the block in
// strides; they were slower at M = 2 and 4 in bf16 and int8 (benchmarks/RESULTS.md, "The
// kernels, one thread", under "int4 weights and the AVX2 GEMV"), so one row a tile here
// (gemv_avx2_int4.cpp keeps them where int4 gains).

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gemv.h"
#include "kernel_common.h"
#include "vec.h"

namespace {

using omni_cpu::with_output;
using omni_cpu::vec::Store;

constexpr int64_t kLanes = 8;  // float32/int32 outputs per ymm vector

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
        acc[m][v] = omni_cpu::vec::dot_quads(acc[m][v], magnitude, _mm256_sign_epi8(xv[m], w));
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

template <typename Out>
struct W8a8Tile {
  template <int M, int V>
  struct Of {
    static void run(const Int8Rows& rows, const int8_t* block, int64_t nb, int64_t c, int64_t n0,
                    int64_t m0, const Store<Out>& store) {
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

// Per-row symmetric quantization to signed 8 bits in [-127, 127].
template <typename In>
void quantize_rows(const In* x, int64_t M, int64_t K, int8_t* q, float* scales) {
  for (int64_t m = 0; m < M; ++m) {
    const In* row = x + m * K;
    const float scale = omni_cpu::row_scale(row, K), inv = 1.f / scale;
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
  return with_output<Store>(x, N, bias, [&](const auto& store) {
    using S = std::decay_t<decltype(store)>;
    using Out = std::remove_pointer_t<decltype(S::out)>;
    for_each_tile(M, N, [&](int vectors, int64_t nb, int64_t n0, int64_t m0) {
      dispatch<W8a8Tile<Out>::template Of>(vectors, rows, wp + n0 * K, nb, int64_t{0}, n0, m0,
                                           store);
    });
  });
}

// The same products on raw pointers and caller-owned buffers (gemv.h; predictor_step.cpp
// chains them).
int64_t omni_cpu::product_rows(int64_t M) { return M; }  // no AMX here: no whole tiles to read

template <typename Out>
void omni_cpu::bf16_product_f32(const float* x, const c10::BFloat16* w, int64_t M, int64_t K,
                                int64_t N, const float* bias, Out* out) {
  const auto* wp = reinterpret_cast<const uint16_t*>(w);
  const Store<Out> store{out, bias, N};
  for_each_tile(M, N, [&](int vectors, int64_t nb, int64_t n0, int64_t m0) {
    dispatch<Bf16Tile<Out>::template Of>(vectors, x, K, wp + n0 * K, nb, int64_t{0}, n0, m0,
                                         store);
  });
}

template <typename In>
void omni_cpu::quantize_s8_rows(const In* x, int64_t M, int64_t K, int8_t* q, float* scales) {
  quantize_rows(x, M, K, q, scales);
}

template <typename Out>
void omni_cpu::w8a8_product_s8(const int8_t* xq, const float* xscale, const int8_t* w,
                               const float* wscale, int64_t M, int64_t K, int64_t N,
                               const float* bias, Out* out) {
  const Int8Rows rows{xq, xscale, wscale, K};
  const Store<Out> store{out, bias, N};
  for_each_tile(M, N, [&](int vectors, int64_t nb, int64_t n0, int64_t m0) {
    dispatch<W8a8Tile<Out>::template Of>(vectors, rows, w + n0 * K, nb, int64_t{0}, n0, m0,
                                         store);
  });
}

#define OMNI_AVX2_ROWS(T)                                                                      \
  template void omni_cpu::bf16_product_f32<T>(const float*, const c10::BFloat16*, int64_t,     \
                                              int64_t, int64_t, const float*, T*);             \
  template void omni_cpu::quantize_s8_rows<T>(const T*, int64_t, int64_t, int8_t*, float*);    \
  template void omni_cpu::w8a8_product_s8<T>(const int8_t*, const float*, const int8_t*,       \
                                             const float*, int64_t, int64_t, int64_t,          \
                                             const float*, T*);
OMNI_AVX2_ROWS(float)
OMNI_AVX2_ROWS(c10::BFloat16)
#undef OMNI_AVX2_ROWS

// Whether this build's int8 products use AVX-VNNI's vpdpbusd (the -mavxvnni module).
bool avx_vnni() {
#if defined(__AVXVNNI__)
  return true;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv_bf16", &gemv_bf16, "y = x @ w.T (+ bias), bf16 weights, float32 arithmetic (AVX2)");
  m.def("gemv_w8a8", &gemv_w8a8, "y = x @ dequant(w).T (+ bias), int8 weights (AVX2 / AVX-VNNI)");
  m.def("gemv_w4a8", &omni_cpu::gemv_w4a8,
        "y = x @ dequant(w).T (+ bias), 4-bit weights in groups of 32");
  m.def("decode_attention", &omni_cpu::decode_attention,
        "one query position over a short KV cache");
  m.def("snake_beta", &omni_cpu::snake_beta,
        "x + inv_beta * sin(alpha * x)^2 per channel of time-major [B, L, C], after a tail");
  m.def("avx_vnni", &avx_vnni, "whether this build's int8 products use AVX-VNNI's vpdpbusd");
  omni_cpu::bind_predictor_step(m);
}
