// The code predictor's step in one call: new positions through all of its layers, and
// optionally a whole frame of 15 residual codes (lm heads, top-k, Gumbel-max, embeddings).
//
// Why, how, the trade-off and the measured numbers: omni_cpu/models/predictor_step.py.
// In short: FusedRunner (omni_cpu/models/fused_predictor.py) makes ~15 torch calls per
// layer and ~12 more per sampled code, ~1,900 a frame, each paying the dispatcher and
// Python; on int4 weights those calls cost about what streaming the weights does. Here
// one call runs a position through the 5 layers on the GEMV's own tiles and packed
// weights (gemv_avx512.cpp bf16 / W8A8, gemv_int4.cpp W4A8) and decode_attention.cpp's
// attention, with every buffer kept by the PredictorStep object between calls.
//
// Per layer, for rows r = i * B + b (position start + i of stream b, position-major, so
// each position's B rows are contiguous for the attention):
//   residual add + RMSNorm -> qkv product -> per-head q/k RMSNorm -> neox RoPE (k straight
//   into the KV cache, v copied beside it) -> attention of each row over cache positions
//   [0, its own + 1) -> o product -> add + RMSNorm -> gate_up product -> SiLU-and-mul ->
//   down product; then the final add + RMSNorm.
// Rounding follows FusedRunner step for step: every tensor FusedRunner stores in the
// model's dtype is rounded to it here at the same point (GEMV outputs, norms, RoPE,
// residual, SiLU-and-mul), arithmetic in float32 between (vLLM's CPU ops' formulas:
// x * rsqrt(mean(x^2) + eps) * w from the rounded residual; x cos - y sin). What can
// differ is float32 summation order inside a norm (vLLM's vector width vs 16 partial
// sums here), SiLU's exp, and the first call's attention (SDPA there, this kernel here).
//
// Threads: each product splits its column blocks over the stage's OpenMP team, as the
// GEMV calls do, and the attention its heads; every output element is computed by one
// thread in one order, so 1 and 16 threads give the same bits. Norms, RoPE and sampling
// (microseconds) run on the calling thread.
//
// Written against torch 2.13 (extension API, at::parallel_for) for vLLM-Omni 0.30.0's
// Qwen3 code predictor (models/common/qwen3_code_predictor.py).

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

// The GEMV module's products and attention on raw pointers and caller-owned buffers,
// defined beside their tensor calls (gemv_avx512.cpp, gemv_int4.cpp, decode_attention.cpp):
// the same tiles on the same packed weights, so the same bits as gemv_bf16/w8a8/w4a8.
// Products: y[M, N] = x[M, K] @ W[N, K]^T (+ bias), rounded once to Out. Where amx_rows
// sends a product to AMX tiles, x (bf16) or xq (int8) must hold product_rows(M) rows.
namespace omni_cpu {
int64_t product_rows(int64_t M);
template <typename In>
void quantize_u8(const In* x, int64_t M, int64_t K, uint8_t* q, float* scales);
template <typename Out>
void bf16_product(const c10::BFloat16* x, const c10::BFloat16* w, int64_t M, int64_t K,
                  int64_t N, const float* bias, Out* out, int64_t amx_rows);
template <typename Out>
void w8a8_product(const uint8_t* xq, const float* xscale, const int8_t* w, const float* wscale,
                  const int32_t* wsum, int64_t M, int64_t K, int64_t N, const float* bias,
                  Out* out, int64_t amx_rows);
template <typename In>
void quantize_s8(const In* x, int64_t M, int64_t K, int8_t* q, float* scales, int32_t* sums);
template <typename Out>
void w4a8_product(const int8_t* xq, const float* xscale, const int32_t* xsum, const uint8_t* w,
                  const c10::BFloat16* scales, int64_t M, int64_t K, int64_t N,
                  const float* bias, Out* out);
template <typename T>
void attend_positions(const T* q, const T* keys, const T* values, T* out, int64_t B, int64_t H,
                      int64_t G, int64_t S, int64_t D, int64_t end, float scale);
}  // namespace omni_cpu

namespace {

using BF16 = c10::BFloat16;

enum Format : int64_t { kBf16 = 0, kW8a8 = 1, kW4a8 = 2 };  // gemv.py's STEP_FORMATS
constexpr int64_t kGroup = 32;   // gemv_int4.cpp's K elements per (scale, minimum)
constexpr int64_t kParts = 16;   // partial sums of a norm's squares (one vector's lanes)
constexpr int64_t kMaxHead = 512;

// (format, packed, scales, sums, bias, amx_rows), as omni_cpu/models/predictor_step.py
// reads them off gemv.PackedBf16Weights / PackedInt8Weights / PackedInt4Weights.
using LinearSpec = std::tuple<int64_t, torch::Tensor, c10::optional<torch::Tensor>,
                              c10::optional<torch::Tensor>, c10::optional<torch::Tensor>, int64_t>;

struct Linear {
  int64_t format = kBf16, n = 0, k = 0, amx_rows = 0;
  torch::Tensor packed, scales, sums, bias;  // bias: float32 or undefined
};

Linear make_linear(const LinearSpec& spec) {
  Linear lin;
  const auto& [format, packed, scales, sums, bias, amx_rows] = spec;
  TORCH_CHECK(packed.dim() == 2 && packed.is_contiguous(), "predictor step: packed [N, K]");
  lin.format = format;
  lin.packed = packed;
  lin.amx_rows = amx_rows;
  lin.n = packed.size(0);
  TORCH_CHECK(lin.n % 16 == 0, "predictor step: N must be a multiple of 16");
  if (format == kBf16) {
    TORCH_CHECK(packed.scalar_type() == torch::kBFloat16, "predictor step: bf16 weights");
    lin.k = packed.size(1);
  } else if (format == kW8a8) {
    TORCH_CHECK(packed.scalar_type() == torch::kInt8 && scales && sums,
                "predictor step: W8A8 is int8 weights, row scales and row sums");
    lin.k = packed.size(1);
    lin.scales = scales->contiguous();
    lin.sums = sums->contiguous();
    TORCH_CHECK(lin.k % 4 == 0 && lin.scales.scalar_type() == torch::kFloat32 &&
                    lin.scales.numel() == lin.n && lin.sums.scalar_type() == torch::kInt32 &&
                    lin.sums.numel() == lin.n,
                "predictor step: W8A8 scales float32 [N], sums int32 [N], K % 4 == 0");
  } else {
    TORCH_CHECK(format == kW4a8, "predictor step: unknown weight format ", format);
    TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && scales,
                "predictor step: W4A8 is uint8 nibbles and bf16 (scale, minimum) pairs");
    lin.k = packed.size(1) * 2;
    lin.scales = scales->contiguous();
    TORCH_CHECK(lin.k % kGroup == 0 && lin.scales.scalar_type() == torch::kBFloat16 &&
                    lin.scales.numel() == lin.n * (lin.k / kGroup) * 2,
                "predictor step: W4A8 scales bf16 [N, K / 32 * 2], K % 32 == 0");
  }
  if (bias) {
    lin.bias = bias->to(torch::kFloat32).contiguous();
    TORCH_CHECK(lin.bias.numel() == lin.n, "predictor step: bias [N]");
  }
  return lin;
}

struct Layer {
  torch::Tensor input_norm, q_norm, k_norm, post_norm;  // the model's dtype
  Linear qkv, o, gate_up, down;
};

struct Head {  // code group g = index + 1
  Linear lm_head;
  torch::Tensor embedding;  // [vocab, talker width], the model's dtype
};

inline float to_float(float v) { return v; }
inline float to_float(BF16 v) { return static_cast<float>(v); }
template <typename T>
inline T round_to(float v) {
  return static_cast<T>(v);  // c10::BFloat16(float) rounds to nearest even, as vcvtneps2bf16
}

template <typename T>
T* ptr(const torch::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// 1 / sqrt(mean(x^2) + eps) over `width` (a multiple of kParts) float32 values.
inline float inverse_rms(const float* squares, int64_t width, float eps) {
  float part[kParts];
  for (int64_t l = 0; l < kParts; ++l) part[l] = squares[l];
  for (int64_t half = kParts / 2; half > 0; half /= 2)
    for (int64_t l = 0; l < half; ++l) part[l] += part[l + half];
  return 1.f / std::sqrt(part[0] / static_cast<float>(width) + eps);
}

// out = x * rsqrt(mean(x^2) + eps) * w, rounded once (vLLM's rms_norm).
template <typename T>
void rms_norm(const T* x, const T* w, T* out, int64_t width, float eps) {
  float squares[kParts] = {};
  for (int64_t j = 0; j < width; j += kParts)
    for (int64_t l = 0; l < kParts; ++l) {
      const float v = to_float(x[j + l]);
      squares[l] += v * v;
    }
  const float inv = inverse_rms(squares, width, eps);
  for (int64_t j = 0; j < width; ++j) out[j] = round_to<T>(to_float(x[j]) * inv * to_float(w[j]));
}

// residual += hidden (rounded); hidden = norm(residual) (vLLM's fused_add_rms_norm: the
// mean of squares of the unrounded sum, the norm of the rounded residual).
template <typename T>
void add_norm(T* hidden, T* residual, const T* w, int64_t width, float eps) {
  float squares[kParts] = {};
  for (int64_t j = 0; j < width; j += kParts)
    for (int64_t l = 0; l < kParts; ++l) {
      const float v = to_float(hidden[j + l]) + to_float(residual[j + l]);
      squares[l] += v * v;
      residual[j + l] = round_to<T>(v);
    }
  const float inv = inverse_rms(squares, width, eps);
  for (int64_t j = 0; j < width; ++j)
    hidden[j] = round_to<T>(to_float(residual[j]) * inv * to_float(w[j]));
}

// One head: RMSNorm (rounded, as FusedRunner stores it), then neox RoPE from the rounded
// values with cos/sin in the model's dtype (FusedRunner's cos_sin), rounded again.
template <typename T>
void norm_rope(const T* x, const T* w, const T* cos_sin, T* out, int64_t D, float eps) {
  float normed[kMaxHead];
  float squares[kParts] = {};
  for (int64_t j = 0; j < D; j += kParts)
    for (int64_t l = 0; l < kParts; ++l) {
      const float v = to_float(x[j + l]);
      squares[l] += v * v;
    }
  const float inv = inverse_rms(squares, D, eps);
  for (int64_t j = 0; j < D; ++j)
    normed[j] = to_float(round_to<T>(to_float(x[j]) * inv * to_float(w[j])));
  const int64_t half = D / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float c = to_float(cos_sin[j]), s = to_float(cos_sin[half + j]);
    const float a = normed[j], b = normed[half + j];
    out[j] = round_to<T>(a * c - b * s);
    out[half + j] = round_to<T>(b * c + a * s);
  }
}

template <typename T>
void silu_and_mul(const T* gate_up, T* out, int64_t width) {
  for (int64_t j = 0; j < width; ++j) {
    const float g = to_float(gate_up[j]);
    out[j] = round_to<T>(g / (1.f + std::exp(-g)) * to_float(gate_up[width + j]));
  }
}

// Index of the first largest value, NaN counting as largest (torch's argmax).
template <typename Score>
int64_t first_argmax(int64_t count, Score score) {
  int64_t best_index = 0;
  float best = score(0);
  for (int64_t v = 1; v < count; ++v) {
    const float s = score(v);
    if (!std::isnan(best) && !(s <= best)) {
      best = s;
      best_index = v;
    }
  }
  return best_index;
}

// One code from one row of logits, as predict_codes' per-call sampling does it:
// greedy (no noise) is argmax(logits); otherwise scaled = logits * inv_temperature in the
// logits' dtype, entries below the top_k-th largest masked, then
// argmax(float(scaled) - noise) with noise = log(-log(u)) (Gumbel-max).
template <typename T>
int64_t sample(const T* logits, int64_t V, const float* noise, float inv_temperature,
               int64_t top_k, std::vector<float>& scaled, std::vector<float>& sorted) {
  if (noise == nullptr) return first_argmax(V, [&](int64_t v) { return to_float(logits[v]); });
  scaled.resize(V);
  for (int64_t v = 0; v < V; ++v)
    scaled[v] = to_float(round_to<T>(to_float(logits[v]) * inv_temperature));
  float threshold = -std::numeric_limits<float>::infinity();
  if (top_k > 0 && top_k < V) {
    sorted.assign(scaled.begin(), scaled.end());
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                     std::greater<float>());
    threshold = sorted[top_k - 1];
  }
  const float masked = -std::numeric_limits<float>::infinity();
  return first_argmax(V, [&](int64_t v) {
    return (scaled[v] < threshold ? masked : scaled[v]) - noise[v];
  });
}

class PredictorStep {
 public:
  PredictorStep(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, double eps,
                double scaling, torch::Tensor cos_sin, torch::Tensor final_norm)
      : hidden_(hidden),
        heads_(heads),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        eps_(static_cast<float>(eps)),
        scaling_(static_cast<float>(scaling)),
        cos_sin_(cos_sin.contiguous()),
        final_norm_(final_norm.contiguous()) {
    dtype_ = final_norm_.scalar_type();
    TORCH_CHECK(dtype_ == torch::kBFloat16 || dtype_ == torch::kFloat32,
                "predictor step: bf16 or float32 models");
    TORCH_CHECK(hidden % kParts == 0 && head_dim % kParts == 0 && head_dim <= kMaxHead,
                "predictor step: hidden and head sizes must be multiples of 16 (head <= 512)");
    TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0,
                "predictor step: heads must be a multiple of the KV heads");
    TORCH_CHECK(final_norm_.numel() == hidden, "predictor step: final norm [hidden]");
    TORCH_CHECK(cos_sin_.dim() == 2 && cos_sin_.size(1) == head_dim &&
                    cos_sin_.scalar_type() == dtype_,
                "predictor step: cos_sin [positions, head_dim] in the model's dtype");
  }

  void add_layer(torch::Tensor input_norm, torch::Tensor q_norm, torch::Tensor k_norm,
                 torch::Tensor post_norm, const LinearSpec& qkv, const LinearSpec& o,
                 const LinearSpec& gate_up, const LinearSpec& down) {
    Layer layer{norm(input_norm, hidden_),    norm(q_norm, head_dim_),
                norm(k_norm, head_dim_),      norm(post_norm, hidden_),
                make_linear(qkv),             make_linear(o),
                make_linear(gate_up),         make_linear(down)};
    const int64_t q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
    TORCH_CHECK(layer.qkv.k == hidden_ && layer.qkv.n == q + 2 * kv,
                "predictor step: qkv is [(heads + 2 kv heads) * head_dim, hidden]");
    TORCH_CHECK(layer.o.k == q && layer.o.n == hidden_, "predictor step: o is [hidden, q]");
    TORCH_CHECK(layer.gate_up.k == hidden_ && layer.gate_up.n % 2 == 0 &&
                    layer.down.k == layer.gate_up.n / 2 && layer.down.n == hidden_,
                "predictor step: gate_up [2 I, hidden] and down [hidden, I]");
    TORCH_CHECK(layer.down.k % kParts == 0, "predictor step: intermediate size % 16");
    for (const Linear* lin : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) widest(*lin);
    layers_.push_back(std::move(layer));
  }

  // The lm head and codec embedding of code group len(heads) + 1 (frame()).
  void add_head(const LinearSpec& lm_head, torch::Tensor embedding) {
    Head head{make_linear(lm_head), embedding.contiguous()};
    TORCH_CHECK(head.lm_head.k == hidden_, "predictor step: lm head is [vocab, hidden]");
    TORCH_CHECK(head.embedding.dim() == 2 && head.embedding.scalar_type() == dtype_,
                "predictor step: embedding [vocab, width] in the model's dtype");
    TORCH_CHECK(heads_list_.empty() || (head.lm_head.n == heads_list_[0].lm_head.n &&
                                        head.embedding.sizes() == heads_list_[0].embedding.sizes()),
                "predictor step: every code group has one vocabulary and width");
    widest(head.lm_head);
    heads_list_.push_back(std::move(head));
  }

  // The talker-width -> predictor-width projection of each new code's embedding (frame()).
  void set_projection(const LinearSpec& projection) {
    projection_ = make_linear(projection);
    has_projection_ = true;
    TORCH_CHECK(projection_.n == hidden_, "predictor step: projection is [hidden, width]");
    widest(projection_);
  }

  // embeds [B, n, hidden] at positions start..start+n-1 of every stream; keys/values one
  // FrameCache's [layers, B, kv_heads, S, head_dim]: the normed hidden state of the last
  // new position [B, hidden] (FusedRunner's __call__).
  torch::Tensor run(torch::Tensor embeds, torch::Tensor keys, torch::Tensor values,
                    int64_t start) {
    TORCH_CHECK(embeds.dim() == 3 && embeds.size(2) == hidden_ &&
                    embeds.scalar_type() == dtype_,
                "predictor step: embeds [B, n, hidden] in the model's dtype");
    const int64_t B = embeds.size(0), n = embeds.size(1);
    check_cache(keys, B, start + n);
    check_cache(values, B, start + n);
    TORCH_CHECK(keys.sizes() == values.sizes(), "predictor step: keys and values alike");
    embeds = embeds.contiguous();
    auto out = torch::empty({B, hidden_}, embeds.options());
    if (dtype_ == torch::kBFloat16)
      run_typed<BF16>(embeds, keys, values, start, out);
    else
      run_typed<float>(embeds, keys, values, start, out);
    return out;
  }

  // A whole frame: first [B, 2, hidden] (the projected talker state and layer-0 code's
  // embedding) at positions 0-1, then one code per group into codes[:, 1:] (codes [B,
  // groups] int64, column 0 given). noise [groups - 1, B, vocab] float32 = log(-log(u))
  // of the draws predict_codes would make, or None for greedy codes.
  void frame(torch::Tensor first, torch::Tensor codes, c10::optional<torch::Tensor> noise,
             double inv_temperature, int64_t top_k) {
    TORCH_CHECK(!heads_list_.empty(), "predictor step: frame() needs the lm heads (add_head)");
    TORCH_CHECK(first.dim() == 3 && first.size(1) == 2 && first.size(2) == hidden_ &&
                    first.scalar_type() == dtype_,
                "predictor step: first [B, 2, hidden] in the model's dtype");
    const int64_t B = first.size(0), groups = codes.size(1);
    const int64_t V = heads_list_[0].lm_head.n;
    TORCH_CHECK(codes.dim() == 2 && codes.size(0) == B && codes.is_contiguous() &&
                    codes.scalar_type() == torch::kInt64 &&
                    groups == static_cast<int64_t>(heads_list_.size()) + 1,
                "predictor step: codes [B, lm heads + 1] int64");
    TORCH_CHECK(has_projection_ || heads_list_[0].embedding.size(1) == hidden_,
                "predictor step: embeddings wider than hidden need the projection");
    const float* noise_p = nullptr;
    torch::Tensor noise_c;
    if (noise) {
      noise_c = noise->contiguous();
      TORCH_CHECK(noise_c.scalar_type() == torch::kFloat32 && noise_c.dim() == 3 &&
                      noise_c.size(0) == groups - 1 && noise_c.size(1) == B &&
                      noise_c.size(2) == V,
                  "predictor step: noise [groups - 1, B, vocab] float32");
      noise_p = noise_c.data_ptr<float>();
    }
    const int64_t positions = groups + 1;
    TORCH_CHECK(positions <= cos_sin_.size(0), "predictor step: more positions than RoPE has");
    const std::vector<int64_t> shape{static_cast<int64_t>(layers_.size()), B, kv_heads_,
                                     positions, head_dim_};
    if (!cache_keys_.defined() || cache_keys_.sizes() != c10::IntArrayRef(shape)) {
      cache_keys_ = torch::empty(shape, first.options());
      cache_values_ = torch::empty(shape, first.options());
    }
    first = first.contiguous();
    if (dtype_ == torch::kBFloat16)
      frame_typed<BF16>(first, codes, noise_p, static_cast<float>(inv_temperature), top_k);
    else
      frame_typed<float>(first, codes, noise_p, static_cast<float>(inv_temperature), top_k);
  }

 private:
  torch::Tensor norm(const torch::Tensor& weight, int64_t width) const {
    TORCH_CHECK(weight.numel() == width && weight.scalar_type() == dtype_,
                "predictor step: a norm weight of the wrong size or dtype");
    return weight.contiguous();
  }

  void widest(const Linear& lin) {
    widest_k_ = std::max(widest_k_, lin.k);
    rows_ = 0;  // the buffers' widths may change: allocate them again on the next call
  }

  void check_cache(const torch::Tensor& cache, int64_t B, int64_t end) const {
    TORCH_CHECK(cache.dim() == 5 && cache.size(0) == static_cast<int64_t>(layers_.size()) &&
                    cache.size(1) == B && cache.size(2) == kv_heads_ &&
                    cache.size(4) == head_dim_ && cache.is_contiguous() &&
                    cache.scalar_type() == dtype_,
                "predictor step: cache [layers, B, kv_heads, S, head_dim], contiguous");
    TORCH_CHECK(end <= cache.size(3) && end <= cos_sin_.size(0),
                "predictor step: positions past the cache or RoPE table");
  }

  // Buffers for `M` rows (whole AMX tiles of them), kept until more are needed.
  void reserve(int64_t M) {
    const int64_t rows = omni_cpu::product_rows(M);
    if (rows <= rows_) return;
    const auto options = torch::TensorOptions().dtype(dtype_);
    const int64_t q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
    const int64_t inter = layers_.empty() ? 0 : layers_[0].down.k;
    const int64_t vocab = heads_list_.empty() ? 0 : heads_list_[0].lm_head.n;
    const int64_t width = heads_list_.empty() ? 0 : heads_list_[0].embedding.size(1);
    // Zeros: AMX tiles read whole tiles of rows, never stored (any finite values do).
    residual_ = torch::zeros({rows, hidden_}, options);
    hidden_rows_ = torch::zeros({rows, hidden_}, options);
    last_ = torch::zeros({rows, hidden_}, options);
    qkv_ = torch::zeros({rows, q + 2 * kv}, options);
    q_ = torch::zeros({rows, q}, options);
    attn_ = torch::zeros({rows, q}, options);
    gate_up_ = torch::zeros({rows, 2 * inter}, options);
    act_ = torch::zeros({rows, inter}, options);
    logits_ = torch::zeros({rows, vocab}, options);
    embed_ = torch::zeros({rows, width}, options);
    xq_ = torch::zeros({rows, widest_k_}, torch::kUInt8);
    xscale_ = torch::zeros({rows}, torch::kFloat32);
    xsum_ = torch::zeros({rows, widest_k_ / kGroup + 1}, torch::kInt32);
    rows_ = rows;
  }

  template <typename T>
  void product(const Linear& lin, const T* x, int64_t M, T* out) {
    const float* bias = lin.bias.defined() ? lin.bias.data_ptr<float>() : nullptr;
    if (lin.format == kBf16) {
      if constexpr (std::is_same_v<T, BF16>) {
        omni_cpu::bf16_product<T>(x, ptr<BF16>(lin.packed), M, lin.k, lin.n, bias, out,
                                  lin.amx_rows);
      } else {
        TORCH_CHECK(false, "predictor step: bf16 weights need a bf16 model");
      }
    } else if (lin.format == kW8a8) {
      omni_cpu::quantize_u8<T>(x, M, lin.k, ptr<uint8_t>(xq_), ptr<float>(xscale_));
      omni_cpu::w8a8_product<T>(ptr<uint8_t>(xq_), ptr<float>(xscale_), ptr<int8_t>(lin.packed),
                                ptr<float>(lin.scales), ptr<int32_t>(lin.sums), M, lin.k, lin.n,
                                bias, out, lin.amx_rows);
    } else {
      omni_cpu::quantize_s8<T>(x, M, lin.k, ptr<int8_t>(xq_), ptr<float>(xscale_),
                               ptr<int32_t>(xsum_));
      omni_cpu::w4a8_product<T>(ptr<int8_t>(xq_), ptr<float>(xscale_), ptr<int32_t>(xsum_),
                                ptr<uint8_t>(lin.packed), ptr<BF16>(lin.scales), M, lin.k,
                                lin.n, bias, out);
    }
  }

  // The positions in residual_ (B * n rows, position-major) through every layer; the
  // final norm's output is in hidden_rows_, the last position's B rows last.
  template <typename T>
  void forward(int64_t B, int64_t n, int64_t start, T* keys, T* values, int64_t S) {
    const int64_t M = B * n, H = hidden_, D = head_dim_, G = kv_heads_;
    const int64_t q_size = heads_ * D, kv_size = G * D, qkv_size = q_size + 2 * kv_size;
    T* residual = ptr<T>(residual_);
    T* hidden = ptr<T>(hidden_rows_);
    T* qkv = ptr<T>(qkv_);
    T* q = ptr<T>(q_);
    T* attn = ptr<T>(attn_);
    T* gate_up = ptr<T>(gate_up_);
    T* act = ptr<T>(act_);
    const T* cos_sin = ptr<T>(cos_sin_);
    for (int64_t r = 0; r < M; ++r)
      rms_norm(residual + r * H, ptr<T>(layers_[0].input_norm), hidden + r * H, H, eps_);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      if (l > 0)
        for (int64_t r = 0; r < M; ++r)
          add_norm(hidden + r * H, residual + r * H, ptr<T>(layer.input_norm), H, eps_);
      product(layer.qkv, hidden, M, qkv);
      T* layer_keys = keys + l * B * G * S * D;
      T* layer_values = values + l * B * G * S * D;
      for (int64_t r = 0; r < M; ++r) {
        const int64_t b = r % B, position = start + r / B;
        const T* row = qkv + r * qkv_size;
        const T* table = cos_sin + position * D;
        for (int64_t h = 0; h < heads_; ++h)
          norm_rope(row + h * D, ptr<T>(layer.q_norm), table, q + r * q_size + h * D, D, eps_);
        for (int64_t g = 0; g < G; ++g) {
          const int64_t at = ((b * G + g) * S + position) * D;
          norm_rope(row + q_size + g * D, ptr<T>(layer.k_norm), table, layer_keys + at, D, eps_);
          std::memcpy(layer_values + at, row + q_size + kv_size + g * D, D * sizeof(T));
        }
      }
      for (int64_t i = 0; i < n; ++i)
        omni_cpu::attend_positions<T>(q + i * B * q_size, layer_keys, layer_values,
                                      attn + i * B * q_size, B, heads_, G, S, D, start + i + 1,
                                      scaling_);
      product(layer.o, attn, M, hidden);
      for (int64_t r = 0; r < M; ++r)
        add_norm(hidden + r * H, residual + r * H, ptr<T>(layer.post_norm), H, eps_);
      product(layer.gate_up, hidden, M, gate_up);
      const int64_t inter = layer.down.k;
      for (int64_t r = 0; r < M; ++r) silu_and_mul(gate_up + r * 2 * inter, act + r * inter, inter);
      product(layer.down, act, M, hidden);
    }
    for (int64_t r = 0; r < M; ++r)
      add_norm(hidden + r * H, residual + r * H, ptr<T>(final_norm_), H, eps_);
  }

  template <typename T>
  void run_typed(const torch::Tensor& embeds, const torch::Tensor& keys,
                 const torch::Tensor& values, int64_t start, torch::Tensor& out) {
    const int64_t B = embeds.size(0), n = embeds.size(1), H = hidden_;
    reserve(B * n);
    const T* in = ptr<T>(embeds);
    T* residual = ptr<T>(residual_);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(residual + (i * B + b) * H, in + (b * n + i) * H, H * sizeof(T));
    forward<T>(B, n, start, ptr<T>(keys), ptr<T>(values), keys.size(3));
    std::memcpy(ptr<T>(out), ptr<T>(hidden_rows_) + (n - 1) * B * H, B * H * sizeof(T));
  }

  template <typename T>
  void frame_typed(const torch::Tensor& first, torch::Tensor& codes, const float* noise,
                   float inv_temperature, int64_t top_k) {
    const int64_t B = first.size(0), H = hidden_, groups = codes.size(1);
    const int64_t V = heads_list_[0].lm_head.n, width = heads_list_[0].embedding.size(1);
    const int64_t S = cache_keys_.size(3);
    reserve(2 * B);
    T* keys = ptr<T>(cache_keys_);
    T* values = ptr<T>(cache_values_);
    T* residual = ptr<T>(residual_);
    T* last = ptr<T>(last_);
    T* logits = ptr<T>(logits_);
    T* embed = ptr<T>(embed_);
    int64_t* out = codes.data_ptr<int64_t>();
    const T* in = ptr<T>(first);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < 2; ++i)
        std::memcpy(residual + (i * B + b) * H, in + (b * 2 + i) * H, H * sizeof(T));
    forward<T>(B, 2, 0, keys, values, S);
    std::memcpy(last, ptr<T>(hidden_rows_) + B * H, B * H * sizeof(T));
    for (int64_t step = 1; step < groups; ++step) {
      const Head& head = heads_list_[step - 1];
      product(head.lm_head, last, B, logits);
      for (int64_t b = 0; b < B; ++b) {
        const float* row_noise = noise ? noise + ((step - 1) * B + b) * V : nullptr;
        const int64_t code =
            sample(logits + b * V, V, row_noise, inv_temperature, top_k, scaled_, sorted_);
        out[b * groups + step] = code;
        if (step < groups - 1)
          std::memcpy(embed + b * width, ptr<T>(head.embedding) + code * width,
                      width * sizeof(T));
      }
      if (step == groups - 1) break;
      if (has_projection_)
        product(projection_, static_cast<const T*>(embed), B, residual);
      else
        std::memcpy(residual, embed, B * H * sizeof(T));
      forward<T>(B, 1, step + 1, keys, values, S);
      std::memcpy(last, ptr<T>(hidden_rows_), B * H * sizeof(T));
    }
  }

  int64_t hidden_, heads_, kv_heads_, head_dim_;
  float eps_, scaling_;
  torch::Tensor cos_sin_, final_norm_;
  torch::ScalarType dtype_;
  std::vector<Layer> layers_;
  std::vector<Head> heads_list_;
  Linear projection_;
  bool has_projection_ = false;
  int64_t widest_k_ = 0, rows_ = 0;
  torch::Tensor residual_, hidden_rows_, last_, qkv_, q_, attn_, gate_up_, act_, logits_, embed_;
  torch::Tensor xq_, xscale_, xsum_, cache_keys_, cache_values_;
  std::vector<float> scaled_, sorted_;
};

}  // namespace

void bind_predictor_step(pybind11::module& m) {
  namespace py = pybind11;
  py::class_<PredictorStep>(m, "PredictorStep",
                            "the code predictor's layers (and sampling) in one call per position")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, double, double, torch::Tensor,
                    torch::Tensor>(),
           py::arg("hidden"), py::arg("heads"), py::arg("kv_heads"), py::arg("head_dim"),
           py::arg("eps"), py::arg("scaling"), py::arg("cos_sin"), py::arg("final_norm"))
      .def("add_layer", &PredictorStep::add_layer)
      .def("add_head", &PredictorStep::add_head)
      .def("set_projection", &PredictorStep::set_projection)
      .def("run", &PredictorStep::run, py::call_guard<py::gil_scoped_release>(),
           "new positions [B, n, hidden] through every layer; the last one's normed state")
      .def("frame", &PredictorStep::frame, py::call_guard<py::gil_scoped_release>(),
           "a whole frame's residual codes into codes[:, 1:]");
}
