// One new query position attending to a short per-frame KV cache: the code
// predictor's attention at every step after the first.
//
// out[b, h*D:(h+1)*D] = softmax(q[b, h] . K[b, g, :end]^T * scale) @ V[b, g, :end],
// g = h / (H / G) (grouped-query attention). K and V are one layer of omni-cpu's
// FrameCache, [B, G, S, D] contiguous with S >= end; q is [B, H * D].
//
// Why: torch's SDPA pays a fixed cost per call whatever the size (dispatch, a
// flash-attention tiling meant for long sequences), many times this call's arithmetic
// (~16 heads x 17 keys x 128), and the predictor calls it 70 times a frame. Scores and the weighted sum are accumulated in float32 (SDPA's CPU path
// accumulates bf16 inputs in float32 too), and the result is rounded once.
// Built into every GEMV module, on vec.h's vectors: 16 float32 lanes with the AVX-512 flags,
// 8 with the AVX2 ones, 4 with the NEON ones.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gemv.h"
#include "parallel.h"
#include "vec.h"

namespace {

template <typename T>
void attend(const T* q, const T* keys, const T* values, T* out, int64_t B, int64_t H, int64_t G,
            int64_t S, int64_t D, int64_t end, float scale) {
  using namespace omni_cpu::vec;
  const int64_t per_group = H / G;
  const int64_t vectors = D / kLanes;
  omni_cpu::parallel_for(int64_t{0}, B * H, 1, [&](int64_t begin, int64_t stop) {
    std::vector<float> scores(end);
    std::vector<V> acc(vectors);
    for (int64_t bh = begin; bh < stop; ++bh) {
      const int64_t b = bh / H, h = bh % H, g = h / per_group;
      const T* qh = q + (b * H + h) * D;
      const T* kg = keys + (b * G + g) * S * D;
      const T* vg = values + (b * G + g) * S * D;
      float top = -INFINITY;
      for (int64_t s = 0; s < end; ++s) {
        V dot = zero();
        for (int64_t v = 0; v < vectors; ++v)
          dot = fmadd(load(qh + v * kLanes), load(kg + s * D + v * kLanes), dot);
        scores[s] = sum(dot) * scale;
        top = std::max(top, scores[s]);
      }
      float total = 0.f;
      for (int64_t s = 0; s < end; ++s) {
        scores[s] = std::exp(scores[s] - top);
        total += scores[s];
      }
      for (int64_t v = 0; v < vectors; ++v) acc[v] = zero();
      for (int64_t s = 0; s < end; ++s) {
        const V weight = set1(scores[s] / total);
        for (int64_t v = 0; v < vectors; ++v)
          acc[v] = fmadd(weight, load(vg + s * D + v * kLanes), acc[v]);
      }
      T* oh = out + (b * H + h) * D;
      for (int64_t v = 0; v < vectors; ++v) store(oh + v * kLanes, acc[v]);
    }
  });
}

}  // namespace

#if !defined(OMNI_CPU_STANDALONE)  // the tensor call: torch modules only
torch::Tensor omni_cpu::decode_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values,
                               int64_t end, double scale) {
  TORCH_CHECK(keys.dim() == 4 && keys.sizes() == values.sizes(),
              "decode_attention: keys and values [B, G, S, D] alike");
  const int64_t B = keys.size(0), G = keys.size(1), S = keys.size(2), D = keys.size(3);
  TORCH_CHECK(q.dim() == 2 && q.size(0) == B && q.size(1) % D == 0,
              "decode_attention: q [B, H * D]");
  const int64_t H = q.size(1) / D;
  TORCH_CHECK(H % G == 0, "decode_attention: heads must be a multiple of the KV heads");
  TORCH_CHECK(D % omni_cpu::vec::kLanes == 0, "decode_attention: head size must be a multiple of ",
              omni_cpu::vec::kLanes);
  TORCH_CHECK(end >= 1 && end <= S, "decode_attention: 1 <= end <= cache length");
  TORCH_CHECK(q.is_contiguous() && keys.is_contiguous() && values.is_contiguous(),
              "decode_attention: contiguous inputs only");
  TORCH_CHECK(q.scalar_type() == keys.scalar_type() && keys.scalar_type() == values.scalar_type(),
              "decode_attention: one dtype for q, keys and values");
  auto out = torch::empty_like(q);
  const float s = static_cast<float>(scale);
  if (q.scalar_type() == torch::kBFloat16) {
    attend(q.data_ptr<c10::BFloat16>(), keys.data_ptr<c10::BFloat16>(),
           values.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), B, H, G, S, D, end, s);
  } else {
    TORCH_CHECK(q.scalar_type() == torch::kFloat32, "decode_attention: bf16 or float32");
    attend(q.data_ptr<float>(), keys.data_ptr<float>(), values.data_ptr<float>(),
           out.data_ptr<float>(), B, H, G, S, D, end, s);
  }
  return out;
}
#endif

// The same attention on raw pointers and caller-owned buffers (gemv.h; predictor_step.cpp
// chains it).
template <typename T>
void omni_cpu::attend_positions(const T* q, const T* keys, const T* values, T* out, int64_t B,
                                int64_t H, int64_t G, int64_t S, int64_t D, int64_t end,
                                float scale) {
  attend(q, keys, values, out, B, H, G, S, D, end, scale);
}

template void omni_cpu::attend_positions<float>(const float*, const float*, const float*, float*,
                                                int64_t, int64_t, int64_t, int64_t, int64_t,
                                                int64_t, float);
template void omni_cpu::attend_positions<omni_cpu::BF16>(const omni_cpu::BF16*,
                                                         const omni_cpu::BF16*,
                                                         const omni_cpu::BF16*, omni_cpu::BF16*,
                                                         int64_t, int64_t, int64_t, int64_t,
                                                         int64_t, int64_t, float);
