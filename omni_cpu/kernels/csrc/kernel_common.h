// What the GEMV modules' kernels share that is no vector code: the torch-facing argument
// checks and shape reading, the dtype dispatch, the output and bias of a product, the split
// of column blocks over the stage's threads and the packed layout's constants. Included by
// the AVX-512, AVX2 and NEON builds alike (kernels/build.py hashes and copies every header of
// csrc/ with the sources); under OMNI_CPU_STANDALONE (the Arm test harness, no libtorch) the
// tensor parts are left out.

#pragma once

#if !defined(OMNI_CPU_STANDALONE)
#include <torch/extension.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "bf16.h"
#include "parallel.h"

namespace omni_cpu {

constexpr int64_t kBlock = 64;      // output columns per packed block (packing.py's BLOCK)
constexpr int64_t kInt4Group = 32;  // K elements per (scale, minimum) of int4 (INT4_GROUP)

// each(n0, nb) for every block of kBlock output columns (the last nb = 16, 32 or 48 wide
// where N is no multiple), the blocks split over the stage's OpenMP team (at::parallel_for).
template <typename Each>
void for_each_block(int64_t N, Each each) {
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  omni_cpu::parallel_for(int64_t{0}, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) each(b * kBlock, std::min(kBlock, N - b * kBlock));
  });
}

#if !defined(OMNI_CPU_STANDALONE)  // the tensor calls' checks and dispatch
// x [M, K] and a packed bf16 or int8 w [N, K], K in groups of `group`.
inline void check_gemv(const torch::Tensor& x, const torch::Tensor& w, int64_t group) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "gemv: x [M, K] and w [N, K]");
  TORCH_CHECK(x.size(1) == w.size(1), "gemv: K differs between x and w");
  TORCH_CHECK(x.size(1) % group == 0, "gemv: K must be a multiple of ", group);
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "gemv: contiguous inputs only");
  TORCH_CHECK(w.size(0) % 16 == 0, "gemv: N must be a multiple of 16");
}

// fn(data) with x's data as const BF16* or const float*.
template <typename Fn>
void with_rows(const torch::Tensor& x, Fn fn) {
  if (x.scalar_type() == torch::kBFloat16) {
    fn(static_cast<const c10::BFloat16*>(x.data_ptr<c10::BFloat16>()));
  } else {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "gemv: bf16 or float32 activations");
    fn(static_cast<const float*>(x.data_ptr<float>()));
  }
}

// Runs body(Store<Out>{out, bias, N}) for an output [M, N] of x's dtype (bf16 or float32),
// the bias (any dtype) as float32; returns the output.
template <template <typename> class Store, typename Body>
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
#endif

// A row's symmetric 8-bit scale: amax / 127 (1 for a row of zeros).
template <typename In>
float row_scale(const In* row, int64_t K) {
  float amax = 0.f;
  for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(static_cast<float>(row[k])));
  return amax > 0.f ? amax / 127.f : 1.f;
}

// A W4A8 product's x: quantized per row to signed 8 bits, each row's scale and each
// group's sum of the codes.
struct Int4Rows {
  const int8_t* xq;     // [M, K] signed 8-bit x in [-127, 127]
  const float* xscale;  // [M]
  const int32_t* xsum;  // [M, K / kInt4Group] sums of xq per group
  int64_t K;
};

}  // namespace omni_cpu
