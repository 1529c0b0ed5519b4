// The W4A8 tensor call and its activation quantizer, the same in every GEMV module: checks
// x [M, K], w [N, K / 2] nibbles and scales [N, K / 32 * 2] bf16 (scale, minimum), quantizes
// x by quantize_s8 below (on vec.h's vectors, so each module's ISA) and multiplies by the
// module's w4a8_product (gemv_avx512_int4.cpp, gemv_avx2_int4.cpp or gemv_neon_int4.cpp;
// gemv.h).

#include <cstdint>

#include "gemv.h"
#include "kernel_common.h"
#include "vec.h"

// x per row to signed 8 bits (scale amax / 127), and each group's sum of the codes, a vector
// of kLanes values at a time (K is whole groups, a group whole vectors). The scalar loop it
// replaced (amax, amax / 127, nearbyint(x * (1 / scale))) gives the same bits: max is exact in
// any order (a NaN loses, as in std::max), vcvtps2dq rounds to nearest even as nearbyint does.
template <typename In>
void omni_cpu::quantize_s8(const In* x, int64_t M, int64_t K, int8_t* q, float* scales,
                           int32_t* sums) {
  using namespace vec;
  static_assert(kInt4Group % kLanes == 0, "a group is whole vectors");
  const int64_t groups = K / kInt4Group;
  for (int64_t m = 0; m < M; ++m) {
    const In* row = x + m * K;
    V top = zero();
    for (int64_t k = 0; k < K; k += kLanes) top = vec::max(vec::abs(load(row + k)), top);
    const float amax = max_of(top);
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    const V inv = set1(1.f / scale);
    for (int64_t g = 0; g < groups; ++g) {
      int32_t sum = 0;
      for (int64_t k = g * kInt4Group; k < (g + 1) * kInt4Group; k += kLanes)
        sum += store_s8(q + m * K + k, mul(load(row + k), inv));
      sums[m * groups + g] = sum;
    }
    scales[m] = scale;
  }
}

template void omni_cpu::quantize_s8<float>(const float*, int64_t, int64_t, int8_t*, float*,
                                           int32_t*);
template void omni_cpu::quantize_s8<omni_cpu::BF16>(const omni_cpu::BF16*, int64_t, int64_t,
                                                    int8_t*, float*, int32_t*);

#if !defined(OMNI_CPU_STANDALONE)  // the tensor call: torch modules only

torch::Tensor omni_cpu::gemv_w4a8(torch::Tensor x, torch::Tensor w, torch::Tensor scales,
                                  c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && scales.dim() == 2, "gemv_w4a8: 2-D x, w, scales");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(K % kInt4Group == 0, "gemv_w4a8: K must be a multiple of ", kInt4Group);
  TORCH_CHECK(N % 16 == 0, "gemv_w4a8: N must be a multiple of 16");
  TORCH_CHECK(w.scalar_type() == torch::kUInt8 && w.size(1) == K / 2,
              "gemv_w4a8: w is uint8 [N, K / 2] (two 4-bit codes a byte)");
  TORCH_CHECK(scales.scalar_type() == torch::kBFloat16 && scales.size(0) == N &&
                  scales.size(1) == K / kInt4Group * 2,
              "gemv_w4a8: scales are bf16 [N, K / 32 * 2] (scale, minimum)");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && scales.is_contiguous(),
              "gemv_w4a8: contiguous inputs only");
  auto xq = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto xscale = torch::empty({M}, x.options().dtype(torch::kFloat32));
  auto xsum = torch::empty({M, K / kInt4Group}, x.options().dtype(torch::kInt32));
  int8_t* q = xq.data_ptr<int8_t>();
  float* xs = xscale.data_ptr<float>();
  int32_t* sums = xsum.data_ptr<int32_t>();
  with_rows(x, [&](const auto* data) { quantize_s8(data, M, K, q, xs, sums); });
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const auto* sp = static_cast<const c10::BFloat16*>(scales.data_ptr());
  return with_output<vec::Store>(x, N, bias, [&](const auto& store) {
    w4a8_product(q, xs, sums, wp, sp, M, K, N, store.bias, store.out);
  });
}
#endif
