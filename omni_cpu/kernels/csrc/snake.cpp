// SnakeBeta in one pass: y[b, t, c] = x + inv_beta[c] * sin(alpha[c] * x)^2, the activation
// of the Qwen3-TTS codec's vocoder (vLLM-Omni's SnakeBeta with its precomputed exp(alpha) and
// 1 / (exp(beta) + eps)), on activations laid out time-major ([B, L, C], the channels of one
// time step side by side: oneDNN's own layout for the convolutions around it). Where a causal
// convolution follows, the output is written after that convolution's carried input (`tail`,
// [B, keep, C]), so the convolution reads [tail | y] without another copy.
//
// Why: torch runs it as five passes over the activations (mul, sin, pow, mul, add), each
// converting bf16 to float32 and back, and the codec runs it 29 times a frame on up to
// 1920 x 96 values. Here each value is read once, the arithmetic is float32 (as vLLM-Omni's
// own fused kernel for GPUs) and the result is rounded once. Built into every GEMV module,
// on vec.h's vectors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gemv.h"
#include "parallel.h"
#include "vec.h"

namespace {

template <typename T>
void snake_steps(const T* x, const float* alpha, const float* inv_beta, const T* tail, T* out,
                 int64_t B, int64_t L, int64_t C, int64_t keep) {
  using namespace omni_cpu::vec;
  const int64_t width = keep + L;
  if (keep) {
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(out + b * width * C, tail + b * keep * C, keep * C * sizeof(T));
  }
  omni_cpu::parallel_for(int64_t{0}, B * L, 64, [&](int64_t begin, int64_t end) {
    for (int64_t step = begin; step < end; ++step) {
      const int64_t b = step / L, t = step % L;
      const T* in = x + step * C;
      T* dst = out + (b * width + keep + t) * C;
      int64_t c = 0;
      for (; c + kLanes <= C; c += kLanes) {
        const V v = load(in + c);
        const V s = sin(mul(v, load(alpha + c)));
        store(dst + c, fmadd(mul(s, s), load(inv_beta + c), v));
      }
      for (; c < C; ++c) {  // channels past the last whole vector
        const float v = static_cast<float>(in[c]), s = std::sin(v * alpha[c]);
        dst[c] = static_cast<T>(v + inv_beta[c] * s * s);
      }
    }
  });
}

}  // namespace

// The raw-pointer call (gemv.h): the Arm test harness's, and the tensor call's below.
template <typename T>
void omni_cpu::snake_rows(const T* x, const float* alpha, const float* inv_beta, const T* tail,
                          T* out, int64_t B, int64_t L, int64_t C, int64_t keep) {
  snake_steps(x, alpha, inv_beta, tail, out, B, L, C, keep);
}

template void omni_cpu::snake_rows<float>(const float*, const float*, const float*, const float*,
                                          float*, int64_t, int64_t, int64_t, int64_t);
template void omni_cpu::snake_rows<omni_cpu::BF16>(const omni_cpu::BF16*, const float*,
                                                   const float*, const omni_cpu::BF16*,
                                                   omni_cpu::BF16*, int64_t, int64_t, int64_t,
                                                   int64_t);

#if !defined(OMNI_CPU_STANDALONE)  // the tensor call: torch modules only
torch::Tensor omni_cpu::snake_beta(torch::Tensor x, torch::Tensor alpha, torch::Tensor inv_beta,
                                   c10::optional<torch::Tensor> tail) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous(), "snake_beta: x [B, L, C] contiguous");
  const int64_t B = x.size(0), L = x.size(1), C = x.size(2);
  TORCH_CHECK(alpha.numel() == C && inv_beta.numel() == C,
              "snake_beta: alpha and inv_beta of C values");
  int64_t keep = 0;
  if (tail.has_value() && tail->defined()) {
    TORCH_CHECK(tail->dim() == 3 && tail->size(0) == B && tail->size(2) == C &&
                    tail->is_contiguous() && tail->scalar_type() == x.scalar_type(),
                "snake_beta: tail [B, keep, C] contiguous, of x's dtype");
    keep = tail->size(1);
  }
  const auto a = alpha.to(torch::kFloat32).contiguous();
  const auto ib = inv_beta.to(torch::kFloat32).contiguous();
  auto out = torch::empty({B, keep + L, C}, x.options());
  if (x.scalar_type() == torch::kBFloat16) {
    using T = c10::BFloat16;
    snake_steps(x.data_ptr<T>(), a.data_ptr<float>(), ib.data_ptr<float>(),
                keep ? tail->data_ptr<T>() : nullptr, out.data_ptr<T>(), B, L, C, keep);
  } else {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "snake_beta: bf16 or float32");
    snake_steps(x.data_ptr<float>(), a.data_ptr<float>(), ib.data_ptr<float>(),
                keep ? tail->data_ptr<float>() : nullptr, out.data_ptr<float>(), B, L, C, keep);
  }
  return out;
}
#endif
