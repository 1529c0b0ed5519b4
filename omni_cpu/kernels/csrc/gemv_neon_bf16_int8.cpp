// The GEMV of gemv_avx2_bf16_int8.cpp for aarch64 (NEON): the same raw-pointer products and
// tensor calls (gemv.h's AVX2 signatures) on the same packed weights, so
// omni_cpu/kernels/packing.py packs for Arm as for x86: blocks of 64 output columns (the last
// 16, 32 or 48), each [K / G][nb][G], G = 2 for bf16 and 4 for int8. A 16-byte load here is
// 4 columns of one step. kernels/build.py compiles this file, gemv_neon_int4.cpp and the
// shared ones once per Arm variant (ARM_BUILDS): plain ASIMD, +dotprod, +i8mm+bf16.
//
// gemv_bf16: where the build states bf16 (OMNI_CPU_NEON_BFDOT, neon_dot.h), BFDOT on x
//            rounded to bf16 (as the AVX-512 module's vdpbf16ps takes bf16 x); otherwise the weights widened
//            to float32 by a shift (even K) and a mask (odd K) and float32 FMLA, as AVX2.
// gemv_w8a8: int8 weights (per output row scale), x per row to signed 8 bits in
//            [-127, 127]; signed x signed quads by SDOT where the build states the dot
//            product, else SMULL + SADALP (neon_dot.h); pairs of rows by SMMLA where it
//            states i8mm (w8a8_pair_tile): exact integers every way.
//
// Tiles: one row x 16 columns (4 vectors) over the whole K, the rows of a block's 16-column
// panel one after another (the panel stays in L1/L2 for the next row). Arm speed is
// unmeasured (no Arm hardware here: the kernels are proved under qemu-aarch64,
// tests/kernels/test_arm_kernels.py), so the tiles are the plain ones, not tuned.

#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "gemv.h"
#include "kernel_common.h"
#include "neon_dot.h"
#include "vec.h"

namespace {

using omni_cpu::BF16;
using omni_cpu::vec::Store;

constexpr int64_t kPanel = 16;  // output columns per tile: 4 vectors of 4

// each(n0, nb, c, m) for every 16-column panel c of every block (blocks split over the
// stage's threads) and every row m.
template <typename Each>
void for_each_tile(int64_t M, int64_t N, Each each) {
  omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
    for (int64_t c = 0; c < nb; c += kPanel)
      for (int64_t m = 0; m < M; ++m) each(n0, nb, c, m);
  });
}

#if defined(OMNI_CPU_NEON_BFDOT)
// x row as bf16 [K]; the block's step p is [nb][2] bf16 at block + p * nb * 2.
template <typename Out>
void bf16_tile(const uint16_t* x, int64_t K, const uint16_t* block, int64_t nb, int64_t c,
               int64_t j0, int64_t m, const Store<Out>& store) {
  float32x4_t acc[4];
  for (auto& a : acc) a = vdupq_n_f32(0.f);
  for (int64_t p = 0; p < K / 2; ++p) {
    uint32_t pair;
    __builtin_memcpy(&pair, x + 2 * p, sizeof pair);
    const bfloat16x8_t xp = vreinterpretq_bf16_u32(vdupq_n_u32(pair));
    const uint16_t* step = block + (p * nb + c) * 2;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v)
      acc[v] = vbfdotq_f32(acc[v], vreinterpretq_bf16_u16(vld1q_u16(step + v * 8)), xp);
  }
  for (int v = 0; v < 4; ++v) store(m, j0 + v * 4, acc[v]);
}
#else
// x row as float32 [K]; the block's step p is [nb][2] bf16 at block + p * nb * 2.
template <typename Out>
void bf16_tile(const float* x, int64_t K, const uint16_t* block, int64_t nb, int64_t c,
               int64_t j0, int64_t m, const Store<Out>& store) {
  const uint32x4_t high_half = vdupq_n_u32(0xFFFF0000u);
  float32x4_t even[4], odd[4];  // two sums a vector: twice the independent FMLA chains
  for (int v = 0; v < 4; ++v) even[v] = odd[v] = vdupq_n_f32(0.f);
  for (int64_t p = 0; p < K / 2; ++p) {
    const float32x4_t xe = vdupq_n_f32(x[2 * p]), xo = vdupq_n_f32(x[2 * p + 1]);
    const uint16_t* step = block + (p * nb + c) * 2;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const uint32x4_t w = vreinterpretq_u32_u16(vld1q_u16(step + v * 8));
      even[v] = vfmaq_f32(even[v], vreinterpretq_f32_u32(vshlq_n_u32(w, 16)), xe);
      odd[v] = vfmaq_f32(odd[v], vreinterpretq_f32_u32(vandq_u32(w, high_half)), xo);
    }
  }
  for (int v = 0; v < 4; ++v) store(m, j0 + v * 4, vaddq_f32(even[v], odd[v]));
}
#endif

// x [M, K] float32 through bf16_tile: rounded to bf16 once where the tile takes bf16.
template <typename Out>
void bf16_all(const float* x, const uint16_t* w, int64_t M, int64_t K, int64_t N,
              const Store<Out>& store) {
#if defined(OMNI_CPU_NEON_BFDOT)
  std::vector<BF16> rounded(x, x + M * K);  // round to nearest even (bf16.h / c10)
  const auto* rows = reinterpret_cast<const uint16_t*>(rounded.data());
#else
  const float* rows = x;
#endif
  for_each_tile(M, N, [&](int64_t n0, int64_t nb, int64_t c, int64_t m) {
    bf16_tile<Out>(rows + m * K, K, w + n0 * K, nb, c, n0 + c, m, store);
  });
}

// The block's step q is [nb][4] int8 at block + q * nb * 4; x row signed 8 bits [K].
template <typename Out>
void w8a8_tile(const int8_t* x, float xscale, const float* wscale, int64_t K,
               const int8_t* block, int64_t nb, int64_t c, int64_t j0, int64_t m,
               const Store<Out>& store) {
  using namespace omni_cpu::neon;
  Quads acc[4];
  for (auto& a : acc) a = quads_zero();
  for (int64_t q = 0; q < K / 4; ++q) {
    const int8x16_t xq = broadcast_quad(x + 4 * q);
    const int8_t* step = block + (q * nb + c) * 4;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) add_quads(acc[v], vld1q_s8(step + v * 16), xq);
  }
  const float32x4_t xs = vdupq_n_f32(xscale);
  for (int v = 0; v < 4; ++v) {
    const int64_t j = j0 + v * 4;
    const float32x4_t scale = vmulq_f32(vld1q_f32(wscale + j), xs);
    store(m, j, vmulq_f32(vcvtq_f32_s32(total(acc[v])), scale));
  }
}

#if defined(__ARM_FEATURE_MATMUL_INT8)
// Two rows x 16 columns by SMMLA (i8mm): each instruction a 2 x 8 block of x (rows m, m + 1)
// times 8 x 2 of w (two columns' 8 K values), 32 multiply-adds where SDOT does 16. Two packed
// steps q, q + 1 of 4 columns ([4][4] bytes each) zipped by 32 bits give those columns' 8
// consecutive K values side by side: (c0, c1) and (c2, c3), so the packing stays the x86 one.
// Needs K % 8 == 0 (w8a8_all checks).
template <typename Out>
void w8a8_pair_tile(const int8_t* x, const float* xscale, const float* wscale, int64_t K,
                    const int8_t* block, int64_t nb, int64_t c, int64_t j0, int64_t m,
                    const Store<Out>& store) {
  int32x4_t acc[8];  // column pairs (c0 c1), (c2 c3) of each vector: (m c0, m c1, m+1 c0, m+1 c1)
  for (auto& a : acc) a = vdupq_n_s32(0);
  const int8_t* x0 = x + m * K;
  const int8_t* x1 = x0 + K;
  for (int64_t q = 0; q < K / 4; q += 2) {
    const int8x16_t rows = vcombine_s8(vld1_s8(x0 + 4 * q), vld1_s8(x1 + 4 * q));
    const int8_t* first = block + (q * nb + c) * 4;
    const int8_t* second = first + nb * 4;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const int32x4_t a = vreinterpretq_s32_s8(vld1q_s8(first + v * 16));
      const int32x4_t b = vreinterpretq_s32_s8(vld1q_s8(second + v * 16));
      acc[2 * v] = vmmlaq_s32(acc[2 * v], rows, vreinterpretq_s8_s32(vzip1q_s32(a, b)));
      acc[2 * v + 1] = vmmlaq_s32(acc[2 * v + 1], rows, vreinterpretq_s8_s32(vzip2q_s32(a, b)));
    }
  }
  for (int v = 0; v < 4; ++v) {
    const int64_t j = j0 + v * 4;
    const int64x2_t low = vreinterpretq_s64_s32(acc[2 * v]);
    const int64x2_t high = vreinterpretq_s64_s32(acc[2 * v + 1]);
    const int32x4_t sums[2] = {vreinterpretq_s32_s64(vzip1q_s64(low, high)),
                               vreinterpretq_s32_s64(vzip2q_s64(low, high))};
    for (int r = 0; r < 2; ++r) {
      const float32x4_t scale = vmulq_f32(vld1q_f32(wscale + j), vdupq_n_f32(xscale[m + r]));
      store(m + r, j, vmulq_f32(vcvtq_f32_s32(sums[r]), scale));
    }
  }
}
#endif

template <typename Out>
void w8a8_all(const int8_t* xq, const float* xscale, const int8_t* w, const float* wscale,
              int64_t M, int64_t K, int64_t N, const Store<Out>& store) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  if (M >= 2 && K % 8 == 0) {  // row pairs by SMMLA, an odd last row by SDOT
    omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
      for (int64_t c = 0; c < nb; c += kPanel) {
        int64_t m = 0;
        for (; m + 2 <= M; m += 2)
          w8a8_pair_tile<Out>(xq, xscale, wscale, K, w + n0 * K, nb, c, n0 + c, m, store);
        for (; m < M; ++m)
          w8a8_tile<Out>(xq + m * K, xscale[m], wscale, K, w + n0 * K, nb, c, n0 + c, m, store);
      }
    });
    return;
  }
#endif
  for_each_tile(M, N, [&](int64_t n0, int64_t nb, int64_t c, int64_t m) {
    w8a8_tile<Out>(xq + m * K, xscale[m], wscale, K, w + n0 * K, nb, c, n0 + c, m, store);
  });
}

// Per-row symmetric quantization to signed 8 bits in [-127, 127] (the AVX2 module's).
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

// The raw-pointer products (gemv.h; predictor_step.cpp chains them, the Arm harness tests them).
int64_t omni_cpu::product_rows(int64_t M) { return M; }  // no whole tiles of rows to read

template <typename Out>
void omni_cpu::bf16_product_f32(const float* x, const BF16* w, int64_t M, int64_t K, int64_t N,
                                const float* bias, Out* out) {
  bf16_all<Out>(x, reinterpret_cast<const uint16_t*>(w), M, K, N, Store<Out>{out, bias, N});
}

template <typename In>
void omni_cpu::quantize_s8_rows(const In* x, int64_t M, int64_t K, int8_t* q, float* scales) {
  quantize_rows(x, M, K, q, scales);
}

template <typename Out>
void omni_cpu::w8a8_product_s8(const int8_t* xq, const float* xscale, const int8_t* w,
                               const float* wscale, int64_t M, int64_t K, int64_t N,
                               const float* bias, Out* out) {
  w8a8_all<Out>(xq, xscale, w, wscale, M, K, N, Store<Out>{out, bias, N});
}

#define OMNI_NEON_ROWS(T)                                                                      \
  template void omni_cpu::bf16_product_f32<T>(const float*, const omni_cpu::BF16*, int64_t,    \
                                              int64_t, int64_t, const float*, T*);             \
  template void omni_cpu::quantize_s8_rows<T>(const T*, int64_t, int64_t, int8_t*, float*);    \
  template void omni_cpu::w8a8_product_s8<T>(const int8_t*, const float*, const int8_t*,       \
                                             const float*, int64_t, int64_t, int64_t,          \
                                             const float*, T*);
OMNI_NEON_ROWS(float)
OMNI_NEON_ROWS(omni_cpu::BF16)
#undef OMNI_NEON_ROWS

// Which instructions this build's products use: the harness prints it, the module binds it.
const char* omni_cpu_neon_variant() {
#if defined(OMNI_CPU_NEON_BFDOT) && defined(__ARM_FEATURE_MATMUL_INT8)
  return "bfdot+smmla";
#elif defined(OMNI_CPU_NEON_BFDOT) && defined(__ARM_FEATURE_DOTPROD)
  return "bfdot+sdot";
#elif defined(__ARM_FEATURE_DOTPROD)
  return "sdot";
#else
  return "asimd";
#endif
}

#if !defined(OMNI_CPU_STANDALONE)  // the tensor calls and the module: torch builds only
torch::Tensor gemv_bf16(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias) {
  omni_cpu::check_gemv(x, w, 2);
  TORCH_CHECK(w.scalar_type() == torch::kBFloat16, "gemv_bf16: bf16 w");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const auto xf = x.to(torch::kFloat32).contiguous();
  const float* xp = xf.data_ptr<float>();
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  return omni_cpu::with_output<Store>(x, N, bias, [&](const auto& store) {
    using S = std::decay_t<decltype(store)>;
    using Out = std::remove_pointer_t<decltype(S::out)>;
    bf16_all<Out>(xp, wp, M, K, N, store);
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
  const float* ws = wscale.data_ptr<float>();
  const int8_t* wp = w.data_ptr<int8_t>();
  return omni_cpu::with_output<Store>(x, N, bias, [&](const auto& store) {
    using S = std::decay_t<decltype(store)>;
    using Out = std::remove_pointer_t<decltype(S::out)>;
    w8a8_all<Out>(q, xs, wp, ws, M, K, N, store);
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv_bf16", &gemv_bf16, "y = x @ w.T (+ bias), bf16 weights (NEON: BFDOT or float32)");
  m.def("gemv_w8a8", &gemv_w8a8, "y = x @ dequant(w).T (+ bias), int8 weights (NEON: SDOT)");
  m.def("gemv_w4a8", &omni_cpu::gemv_w4a8,
        "y = x @ dequant(w).T (+ bias), 4-bit weights in groups of 32");
  m.def("decode_attention", &omni_cpu::decode_attention,
        "one query position over a short KV cache");
  m.def("snake_beta", &omni_cpu::snake_beta,
        "x + inv_beta * sin(alpha * x)^2 per channel of time-major [B, L, C], after a tail");
  m.def("avx_vnni", []() { return false; }, "x86's AVX-VNNI: never on aarch64");
  m.def("neon_variant", &omni_cpu_neon_variant, "the instructions this build's products use");
  omni_cpu::bind_predictor_step(m);
}
#endif
