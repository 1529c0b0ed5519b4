// Batch-1..4 matrix-vector products that stream weights at memory speed on AVX-512.
//
// y[M, N] = x[M, K] @ W[N, K]^T, M small (decode), W row-major as checkpoints store it.
// Four weight rows are read side by side (four sequential streams the hardware
// prefetcher follows), each 64-byte load feeding every row of x before the next
// load, so the weights are read once per call whatever M is (M <= 4 per pass).
//
// gemv_bf16: bf16 weights and activations, fp32 accumulation (AVX512_BF16 vdpbf16ps).
// gemv_w8a8: int8 weights with one scale per output row, activations quantized per
//            row to unsigned 8 bits around 128 inside the call (AVX512_VNNI vpdpbusd,
//            32-bit accumulation: no 16-bit saturation, so all 8 bits are kept).
// Built by omni_cpu/platform/gemv.py only on CPUs that report both extensions.

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int64_t kRows = 4;

// The four sums of four accumulators at once (a transpose-add tree: ~12 instructions
// where four separate reductions take ~40, which matters at M = 4 and small K).
inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto fold = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  __m256 ab = _mm256_hadd_ps(fold(a), fold(b));
  __m256 cd = _mm256_hadd_ps(fold(c), fold(d));
  __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

inline __m128i hsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
  auto fold = [](__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  };
  __m256i ab = _mm256_hadd_epi32(fold(a), fold(b));
  __m256i cd = _mm256_hadd_epi32(fold(c), fold(d));
  __m256i abcd = _mm256_hadd_epi32(ab, cd);
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

// Where results go: y[m, j] = value + bias[j], rounded once to the output dtype.
template <typename Out>
struct Store {
  Out* out;
  const float* bias;  // nullptr: none
  int64_t N;
  void operator()(int64_t m, int64_t j, float value) const {
    out[m * N + j] = static_cast<Out>(bias ? value + bias[j] : value);
  }
};

template <int M, typename Out>
void bf16_block(const uint16_t* x, const uint16_t* w, int64_t K, int64_t n, int64_t m0,
                const Store<Out>& store) {
  __m512 acc[M][kRows];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < kRows; ++r) acc[m][r] = _mm512_setzero_ps();
  const uint16_t* block = w + n * K;  // packed: [K / 32][kRows][32]
  for (int64_t k = 0; k < K; k += 32) {
    const uint16_t* chunk = block + k * kRows;
    __m512bh wv[kRows];
    for (int r = 0; r < kRows; ++r) {
      wv[r] = (__m512bh)_mm512_loadu_si512(chunk + r * 32);
    }
    for (int m = 0; m < M; ++m) {
      __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      for (int r = 0; r < kRows; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv[r], xv);
    }
  }
  static_assert(kRows == 4, "hsum4 reduces four rows");
  for (int m = 0; m < M; ++m) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, hsum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
    for (int r = 0; r < kRows; ++r) store(m0 + m, n + r, sums[r]);
  }
}

// Blocks of four weight rows outer, rows of x inner: a block (8-24 KB) stays in
// L1/L2 while every row of x passes over it, so W is read from memory once per call
// for any M (prefill included), and the per-row work is a batch-4 register tile.
template <typename Out>
void bf16_all(const uint16_t* x, const uint16_t* w, int64_t M, int64_t K, int64_t N,
              const Store<Out>& store) {
  at::parallel_for(0, N / kRows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        const uint16_t* xm = x + m0 * K;
        switch (std::min<int64_t>(4, M - m0)) {
          case 1: bf16_block<1>(xm, w, K, b * kRows, m0, store); break;
          case 2: bf16_block<2>(xm, w, K, b * kRows, m0, store); break;
          case 3: bf16_block<3>(xm, w, K, b * kRows, m0, store); break;
          default: bf16_block<4>(xm, w, K, b * kRows, m0, store); break;
        }
      }
  });
}

template <int M, typename Out>
void w8a8_block(const uint8_t* xq, const int8_t* w, int64_t K, int64_t n, int64_t m0,
                const float* xscale, const float* wscale, const int32_t* wsum,
                const Store<Out>& store) {
  __m512i acc[M][kRows];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < kRows; ++r) acc[m][r] = _mm512_setzero_si512();
  const int8_t* block = w + n * K;  // packed: [K / 64][kRows][64]
  for (int64_t k = 0; k < K; k += 64) {
    const int8_t* chunk = block + k * kRows;
    __m512i wv[kRows];
    for (int r = 0; r < kRows; ++r) {
      wv[r] = _mm512_loadu_si512(chunk + r * 64);
    }
    for (int m = 0; m < M; ++m) {
      __m512i xv = _mm512_loadu_si512(xq + m * K + k);
      for (int r = 0; r < kRows; ++r) acc[m][r] = _mm512_dpbusd_epi32(acc[m][r], xv, wv[r]);
    }
  }
  for (int m = 0; m < M; ++m) {
    alignas(16) int32_t sums[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(sums),
                    hsum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
    for (int r = 0; r < kRows; ++r) {
      const int64_t j = n + r;
      const int32_t dot = sums[r] - 128 * wsum[j];
      store(m0 + m, j, static_cast<float>(dot) * xscale[m] * wscale[j]);
    }
  }
}

template <typename Out>
void w8a8_all(const uint8_t* xq, const int8_t* w, int64_t M, int64_t K, int64_t N,
              const float* xscale, const float* wscale, const int32_t* wsum,
              const Store<Out>& store) {
  at::parallel_for(0, N / kRows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        const uint8_t* xm = xq + m0 * K;
        const float* sm = xscale + m0;
        const int64_t n = b * kRows;
        switch (std::min<int64_t>(4, M - m0)) {
          case 1: w8a8_block<1>(xm, w, K, n, m0, sm, wscale, wsum, store); break;
          case 2: w8a8_block<2>(xm, w, K, n, m0, sm, wscale, wsum, store); break;
          case 3: w8a8_block<3>(xm, w, K, n, m0, sm, wscale, wsum, store); break;
          default: w8a8_block<4>(xm, w, K, n, m0, sm, wscale, wsum, store); break;
        }
      }
  });
}

// Per-row symmetric quantization to unsigned 8 bits around 128.
template <typename In>
void quantize_rows(const In* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  for (int64_t m = 0; m < M; ++m) {
    const In* row = x + m * K;
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(static_cast<float>(row[k])));
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    const float inv = 1.f / scale;
    for (int64_t k = 0; k < K; ++k)
      q[m * K + k] = static_cast<uint8_t>(std::nearbyint(static_cast<float>(row[k]) * inv) + 128.f);
    scales[m] = scale;
  }
}

void check(const torch::Tensor& x, const torch::Tensor& w, int64_t step) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "gemv: x [M, K] and w [N, K]");
  TORCH_CHECK(x.size(1) == w.size(1), "gemv: K differs between x and w");
  TORCH_CHECK(x.size(1) % step == 0, "gemv: K must be a multiple of ", step);
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "gemv: contiguous inputs only");
  TORCH_CHECK(w.size(0) % kRows == 0, "gemv: N must be a multiple of ", kRows);
}

// Runs `body(store)` with a Store for an output of x's dtype (bf16 or float32).
template <typename Body>
torch::Tensor with_output(const torch::Tensor& x, int64_t N,
                          const c10::optional<torch::Tensor>& bias, Body body) {
  auto out = torch::empty({x.size(0), N}, x.options());
  torch::Tensor bias_f;
  const float* bias_p = nullptr;
  if (bias.has_value() && bias->defined()) {
    bias_f = bias->to(torch::kFloat32).contiguous();
    bias_p = bias_f.data_ptr<float>();
  }
  if (x.scalar_type() == torch::kBFloat16) {
    body(Store<c10::BFloat16>{out.data_ptr<c10::BFloat16>(), bias_p, N});
  } else {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "gemv: bf16 or float32 activations");
    body(Store<float>{out.data_ptr<float>(), bias_p, N});
  }
  return out;
}

}  // namespace

torch::Tensor gemv_bf16(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias) {
  check(x, w, 32);
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16,
              "gemv_bf16: bf16 x and w");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  return with_output(x, N, bias, [&](const auto& store) { bf16_all(xp, wp, M, K, N, store); });
}

torch::Tensor gemv_w8a8(torch::Tensor x, torch::Tensor w, torch::Tensor wscale,
                        torch::Tensor wsum, c10::optional<torch::Tensor> bias) {
  check(x, w, 64);
  TORCH_CHECK(w.scalar_type() == torch::kInt8, "gemv_w8a8: int8 w");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  auto xq = torch::empty({M, K}, x.options().dtype(torch::kUInt8));
  auto xscale = torch::empty({M}, x.options().dtype(torch::kFloat32));
  uint8_t* q = xq.data_ptr<uint8_t>();
  float* xs = xscale.data_ptr<float>();
  if (x.scalar_type() == torch::kBFloat16)
    quantize_rows(x.data_ptr<c10::BFloat16>(), M, K, q, xs);
  else
    quantize_rows(x.data_ptr<float>(), M, K, q, xs);
  const int8_t* wp = w.data_ptr<int8_t>();
  const float* ws = wscale.data_ptr<float>();
  const int32_t* wsm = wsum.data_ptr<int32_t>();
  return with_output(x, N, bias, [&](const auto& store) {
    w8a8_all(q, wp, M, K, N, xs, ws, wsm, store);
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv_bf16", &gemv_bf16, "y = x @ w.T (+ bias), bf16, small M");
  m.def("gemv_w8a8", &gemv_w8a8, "y = x @ dequant(w).T (+ bias), int8 weights, small M");
}
