// The code predictor's step in one call: new positions through all of its layers, and
// optionally a whole frame of 15 residual codes (lm heads, top-k, Gumbel-max, embeddings).
//
// Why: FusedRunner (omni_cpu/models/fused_predictor.py) makes ~15 torch calls per layer
// (fused norms, RoPE, SiLU, the GEMV, the attention, slicing and copies) and ~12 more per
// sampled code (lm head, scale, top-k, mask, Gumbel noise, argmax, embedding, projection),
// ~1,900 a frame, each paying the dispatcher and Python; on a quantized code predictor those
// calls cost about what streaming the weights does, and what the step removes is the calls,
// not the bytes (so it saves about the same time a frame in every format; the figures:
// benchmarks/RESULTS.md, "the kernels at one and two threads, against the libraries"). The
// Python side (building it, sampling's random numbers, when it is used):
// omni_cpu/models/predictor_step.py. Here
// one call runs a position through the 5 layers on the GEMV's own tiles and packed
// weights (gemv_avx512_bf16_int8.cpp bf16 / W8A8, gemv_avx512_int4.cpp W4A8) and
// attention_decode.cpp's attention, declared in gemv.h, with every buffer kept by the
// PredictorStep object between calls. Built into every GEMV module: with AVX-512 flags beside
// those files, with AVX2 flags beside gemv_avx2_*.cpp (their tiles and attention, 8-lane row
// ops; vec:: below).
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
// differ is float32 summation order inside a norm (vLLM's vector width vs 16 or 8 partial
// sums here), SiLU's exp, and the first call's attention (SDPA there, this kernel here): by
// an ulp, so hidden states agree with FusedRunner to bf16 rounding, and a code can flip where
// two logits tie within it, as FusedRunner's can against the eager path. Sampling is exact:
// a frame's codes equal predict_codes' loop over the same `run`.
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
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "gemv.h"
#include "kernel_common.h"
#include "vec.h"

namespace {

using BF16 = c10::BFloat16;

enum Format : int64_t { kBf16 = 0, kW8a8 = 1, kW4a8 = 2 };  // checked at load: FORMAT_CODES
using omni_cpu::kInt4Group;  // K elements per (scale, minimum) of int4
constexpr int64_t kMaxHead = 512;

// (format, packed, scales, sums, bias, amx_rows), as omni_cpu/models/predictor_step.py
// reads them off gemv.PackedBf16Weights / PackedInt8Weights / PackedInt4Weights.
using LinearSpec = std::tuple<int64_t, torch::Tensor, c10::optional<torch::Tensor>,
                              c10::optional<torch::Tensor>, c10::optional<torch::Tensor>, int64_t>;

struct Linear {
  int64_t format = kBf16, n = 0, k = 0, amx_rows = 0;
  torch::Tensor packed, scales, sums, bias;  // bias: float32 or undefined
  // Their data, read once here: a data_ptr() call per product showed in a frame's profile.
  const void* packed_p = nullptr;
  const void* scales_p = nullptr;
  const int32_t* sums_p = nullptr;
  const float* bias_p = nullptr;
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
    TORCH_CHECK(lin.k % kInt4Group == 0 && lin.scales.scalar_type() == torch::kBFloat16 &&
                    lin.scales.numel() == lin.n * (lin.k / kInt4Group) * 2,
                "predictor step: W4A8 scales bf16 [N, K / 32 * 2], K % 32 == 0");
  }
  if (bias) {
    lin.bias = bias->to(torch::kFloat32).contiguous();
    TORCH_CHECK(lin.bias.numel() == lin.n, "predictor step: bias [N]");
    lin.bias_p = lin.bias.data_ptr<float>();
  }
  lin.packed_p = lin.packed.data_ptr();
  if (lin.scales.defined()) lin.scales_p = lin.scales.data_ptr();
  if (lin.sums.defined()) lin.sums_p = lin.sums.data_ptr<int32_t>();
  return lin;
}

template <typename T>
T* ptr(const torch::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// A tensor the step keeps and its data pointer, read once.
struct Buffer {
  torch::Tensor tensor;
  void* data = nullptr;
  void hold(torch::Tensor t) {
    tensor = t.contiguous();
    data = tensor.data_ptr();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

struct Layer {
  Buffer input_norm, q_norm, k_norm, post_norm;  // the model's dtype
  Linear qkv, o, gate_up, down;
};

struct Head {  // code group g = index + 1
  Linear lm_head;
  Buffer embedding;  // [vocab, talker width], the model's dtype
};

inline float to_float(float v) { return v; }
inline float to_float(BF16 v) { return static_cast<float>(v); }

// The row ops' vectors: 16 float32 lanes on AVX-512, 8 on AVX2 (the module's flags; vec.h).
namespace vec = omni_cpu::vec;

using vec::kLanes;

// 1 / sqrt(mean(x^2) + eps) from the lanes' partial sums of squares.
inline float inverse_rms(vec::V squares, int64_t width, float eps) {
  return 1.f / std::sqrt(vec::sum(squares) / static_cast<float>(width) + eps);
}

// 1 / sqrt(mean(x^2) + eps) of `width` values of x.
template <typename T>
inline float inverse_rms_of(const T* x, int64_t width, float eps) {
  using namespace vec;
  V squares = zero();
  for (int64_t j = 0; j < width; j += kLanes) {
    const V v = load(x + j);
    squares = add(squares, mul(v, v));
  }
  return inverse_rms(squares, width, eps);
}

// out = x * rsqrt(mean(x^2) + eps) * w, rounded once (vLLM's rms_norm).
template <typename T>
void rms_norm(const T* x, const T* w, T* out, int64_t width, float eps) {
  using namespace vec;
  const V inv = set1(inverse_rms_of(x, width, eps));
  for (int64_t j = 0; j < width; j += kLanes)
    store(out + j, mul(mul(load(x + j), inv), load(w + j)));
}

// residual += hidden (rounded); hidden = norm(residual) (vLLM's fused_add_rms_norm: the
// mean of squares of the unrounded sum, the norm of the rounded residual).
template <typename T>
void add_norm(T* hidden, T* residual, const T* w, int64_t width, float eps) {
  using namespace vec;
  V squares = zero();
  for (int64_t j = 0; j < width; j += kLanes) {
    const V v = add(load(hidden + j), load(residual + j));
    squares = add(squares, mul(v, v));
    store(residual + j, v);
  }
  const V inv = set1(inverse_rms(squares, width, eps));
  for (int64_t j = 0; j < width; j += kLanes)
    store(hidden + j, mul(mul(load(residual + j), inv), load(w + j)));
}

// One head: RMSNorm (rounded, as FusedRunner stores it), then neox RoPE from the rounded
// values with cos/sin in the model's dtype (FusedRunner's cos_sin), rounded again.
template <typename T>
void norm_rope(const T* x, const T* w, const T* cos_sin, T* out, int64_t D, float eps) {
  using namespace vec;
  alignas(64) float normed[kMaxHead];
  const V inv = set1(inverse_rms_of(x, D, eps));
  for (int64_t j = 0; j < D; j += kLanes)
    store(normed + j, rounded<T>(mul(mul(load(x + j), inv), load(w + j))));
  const int64_t half = D / 2;
  for (int64_t j = 0; j < half; j += kLanes) {
    const V c = load(cos_sin + j), s = load(cos_sin + half + j);
    const V a = load(normed + j), b = load(normed + half + j);
    store(out + j, sub(mul(a, c), mul(b, s)));
    store(out + half + j, add(mul(b, c), mul(a, s)));
  }
}

// out = silu(gate) * up = gate / (1 + e^-gate) * up, gate_up = [gate | up] (vLLM's
// silu_and_mul), rounded once. libm's scalar expf here showed in an int4 frame's profile.
template <typename T>
void silu_and_mul(const T* gate_up, T* out, int64_t width) {
  using namespace vec;
  for (int64_t j = 0; j < width; j += kLanes) {
    const V g = load(gate_up + j);
    const V silu = div(g, add(set1(1.f), vec::exp(sub(zero(), g))));
    store(out + j, mul(silu, load(gate_up + width + j)));
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
  const vec::V inv = vec::set1(inv_temperature);
  for (int64_t v = 0; v < V; v += kLanes)
    vec::store(scaled.data() + v, vec::rounded<T>(vec::mul(vec::load(logits + v), inv)));
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
        scaling_(static_cast<float>(scaling)) {
    dtype_ = final_norm.scalar_type();
    TORCH_CHECK(dtype_ == torch::kBFloat16 || dtype_ == torch::kFloat32,
                "predictor step: bf16 or float32 models");
    TORCH_CHECK(hidden % kLanes == 0 && head_dim % (2 * kLanes) == 0 && head_dim <= kMaxHead,
                "predictor step: hidden a multiple of 16, head size of 32 (at most 512)");
    TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0,
                "predictor step: heads must be a multiple of the KV heads");
    final_norm_.hold(norm(final_norm, hidden));
    TORCH_CHECK(cos_sin.dim() == 2 && cos_sin.size(1) == head_dim &&
                    cos_sin.scalar_type() == dtype_,
                "predictor step: cos_sin [positions, head_dim] in the model's dtype");
    cos_sin_.hold(cos_sin);
  }

  void add_layer(torch::Tensor input_norm, torch::Tensor q_norm, torch::Tensor k_norm,
                 torch::Tensor post_norm, const LinearSpec& qkv, const LinearSpec& o,
                 const LinearSpec& gate_up, const LinearSpec& down) {
    Layer layer{{}, {}, {}, {}, make_linear(qkv), make_linear(o), make_linear(gate_up),
                make_linear(down)};
    layer.input_norm.hold(norm(input_norm, hidden_));
    layer.q_norm.hold(norm(q_norm, head_dim_));
    layer.k_norm.hold(norm(k_norm, head_dim_));
    layer.post_norm.hold(norm(post_norm, hidden_));
    const int64_t q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
    TORCH_CHECK(layer.qkv.k == hidden_ && layer.qkv.n == q + 2 * kv,
                "predictor step: qkv is [(heads + 2 kv heads) * head_dim, hidden]");
    TORCH_CHECK(layer.o.k == q && layer.o.n == hidden_, "predictor step: o is [hidden, q]");
    TORCH_CHECK(layer.gate_up.k == hidden_ && layer.gate_up.n % 2 == 0 &&
                    layer.down.k == layer.gate_up.n / 2 && layer.down.n == hidden_,
                "predictor step: gate_up [2 I, hidden] and down [hidden, I]");
    TORCH_CHECK(layers_.empty() || layer.down.k == layers_[0].down.k,
                "predictor step: one intermediate size for every layer");
    TORCH_CHECK(layer.down.k % kLanes == 0, "predictor step: intermediate size % 16");
    for (const Linear* lin : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) widest(*lin);
    layers_.push_back(std::move(layer));
  }

  // The lm head and codec embedding of code group len(heads) + 1 (frame()).
  void add_head(const LinearSpec& lm_head, torch::Tensor embedding) {
    Head head{make_linear(lm_head), {}};
    head.embedding.hold(embedding);
    const torch::Tensor& table = head.embedding.tensor;
    TORCH_CHECK(head.lm_head.k == hidden_, "predictor step: lm head is [vocab, hidden]");
    TORCH_CHECK(table.dim() == 2 && table.scalar_type() == dtype_,
                "predictor step: embedding [vocab, width] in the model's dtype");
    TORCH_CHECK(heads_list_.empty() || (head.lm_head.n == heads_list_[0].lm_head.n &&
                                        table.sizes() == heads_list_[0].embedding.tensor.sizes()),
                "predictor step: every code group has one vocabulary and width");
    TORCH_CHECK(table.size(0) >= head.lm_head.n, "predictor step: an embedding per code");
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
    TORCH_CHECK(!layers_.empty(), "predictor step: no layers (add_layer)");
    TORCH_CHECK(embeds.dim() == 3 && embeds.size(2) == hidden_ &&
                    embeds.scalar_type() == dtype_,
                "predictor step: embeds [B, n, hidden] in the model's dtype");
    const int64_t B = embeds.size(0), n = embeds.size(1);
    TORCH_CHECK(start >= 0 && n >= 1, "predictor step: at least one new position");
    check_cache(keys, B, start + n);
    check_cache(values, B, start + n);
    embeds = embeds.contiguous();
    auto out = torch::empty({B, hidden_}, embeds.options());
    const std::lock_guard<std::mutex> hold(busy_);  // one call at a time: shared buffers
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
    TORCH_CHECK(!layers_.empty() && !heads_list_.empty(),
                "predictor step: frame() needs the layers and lm heads (add_layer, add_head)");
    TORCH_CHECK(first.dim() == 3 && first.size(1) == 2 && first.size(2) == hidden_ &&
                    first.scalar_type() == dtype_,
                "predictor step: first [B, 2, hidden] in the model's dtype");
    const int64_t B = first.size(0), groups = codes.size(1);
    const int64_t V = heads_list_[0].lm_head.n;
    TORCH_CHECK(codes.dim() == 2 && codes.size(0) == B && codes.is_contiguous() &&
                    codes.scalar_type() == torch::kInt64 &&
                    groups == static_cast<int64_t>(heads_list_.size()) + 1,
                "predictor step: codes [B, lm heads + 1] int64");
    TORCH_CHECK(has_projection_ || heads_list_[0].embedding.tensor.size(1) == hidden_,
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
    const std::lock_guard<std::mutex> hold(busy_);  // one call at a time: shared buffers
    TORCH_CHECK(positions <= cos_sin_.tensor.size(0),
                "predictor step: more positions than the RoPE table has");
    const std::vector<int64_t> shape{static_cast<int64_t>(layers_.size()), B, kv_heads_,
                                     positions, head_dim_};
    if (!cache_keys_.tensor.defined() || cache_keys_.tensor.sizes() != c10::IntArrayRef(shape)) {
      cache_keys_.hold(torch::empty(shape, first.options()));
      cache_values_.hold(torch::empty(shape, first.options()));
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
    TORCH_CHECK(end <= cache.size(3) && end <= cos_sin_.tensor.size(0),
                "predictor step: positions past the cache or the RoPE table");
  }

  // Buffers for `M` rows (whole AMX tiles of them), kept until more are needed.
  void reserve(int64_t M) {
    const int64_t rows = omni_cpu::product_rows(M);
    if (rows <= rows_) return;
    const int64_t q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
    const int64_t inter = layers_.empty() ? 0 : layers_[0].down.k;
    const int64_t vocab = heads_list_.empty() ? 0 : heads_list_[0].lm_head.n;
    const int64_t width = heads_list_.empty() ? 0 : heads_list_[0].embedding.tensor.size(1);
    // Zeros: AMX tiles read whole tiles of rows and never store the extra ones.
    auto rows_of = [&](int64_t columns, torch::ScalarType dtype) {
      return torch::zeros({rows, columns}, dtype);
    };
    residual_.hold(rows_of(hidden_, dtype_));
    hidden_rows_.hold(rows_of(hidden_, dtype_));
    last_.hold(rows_of(hidden_, dtype_));
    qkv_.hold(rows_of(q + 2 * kv, dtype_));
    q_.hold(rows_of(q, dtype_));
    attn_.hold(rows_of(q, dtype_));
    gate_up_.hold(rows_of(2 * inter, dtype_));
    act_.hold(rows_of(inter, dtype_));
    logits_.hold(rows_of(vocab, dtype_));
    embed_.hold(rows_of(width, dtype_));
    xq_.hold(rows_of(widest_k_, torch::kUInt8));
    xscale_.hold(rows_of(1, torch::kFloat32));
    xsum_.hold(rows_of(widest_k_ / kInt4Group + 1, torch::kInt32));
#if !defined(__AVX512F__)
    xf_.hold(rows_of(widest_k_, torch::kFloat32));
#endif
    rows_ = rows;
  }

  template <typename T>
  void product(const Linear& lin, const T* x, int64_t M, T* out) {
    if (lin.format == kW4a8) {
      omni_cpu::quantize_s8<T>(x, M, lin.k, xq_.as<int8_t>(), xscale_.as<float>(),
                               xsum_.as<int32_t>());
      omni_cpu::w4a8_product<T>(xq_.as<int8_t>(), xscale_.as<float>(), xsum_.as<int32_t>(),
                                static_cast<const uint8_t*>(lin.packed_p),
                                static_cast<const BF16*>(lin.scales_p), M, lin.k, lin.n,
                                lin.bias_p, out);
      return;
    }
#if defined(__AVX512F__)
    if (lin.format == kBf16) {
      if constexpr (std::is_same_v<T, BF16>) {
        omni_cpu::bf16_product<T>(x, static_cast<const BF16*>(lin.packed_p), M, lin.k, lin.n,
                                  lin.bias_p, out, lin.amx_rows);
      } else {
        TORCH_CHECK(false, "predictor step: bf16 weights need a bf16 model");
      }
      return;
    }
    omni_cpu::quantize_u8<T>(x, M, lin.k, xq_.as<uint8_t>(), xscale_.as<float>());
    omni_cpu::w8a8_product<T>(xq_.as<uint8_t>(), xscale_.as<float>(),
                              static_cast<const int8_t*>(lin.packed_p),
                              static_cast<const float*>(lin.scales_p), lin.sums_p, M, lin.k,
                              lin.n, lin.bias_p, out, lin.amx_rows);
#else
    if (lin.format == kBf16) {  // float32 arithmetic: x widened once, as gemv_bf16 does
      float* wide = xf_.as<float>();
      for (int64_t i = 0; i < M * lin.k; i += kLanes) vec::store(wide + i, vec::load(x + i));
      omni_cpu::bf16_product_f32<T>(wide, static_cast<const BF16*>(lin.packed_p), M, lin.k,
                                    lin.n, lin.bias_p, out);
      return;
    }
    omni_cpu::quantize_s8_rows<T>(x, M, lin.k, xq_.as<int8_t>(), xscale_.as<float>());
    omni_cpu::w8a8_product_s8<T>(xq_.as<int8_t>(), xscale_.as<float>(),
                                 static_cast<const int8_t*>(lin.packed_p),
                                 static_cast<const float*>(lin.scales_p), M, lin.k, lin.n,
                                 lin.bias_p, out);
#endif
  }

  // The positions in residual_ (B * n rows, position-major) through every layer; the
  // final norm's output is in hidden_rows_, the last position's B rows last.
  template <typename T>
  void forward(int64_t B, int64_t n, int64_t start, T* keys, T* values, int64_t S) {
    const int64_t M = B * n, H = hidden_, D = head_dim_, G = kv_heads_;
    const int64_t q_size = heads_ * D, kv_size = G * D, qkv_size = q_size + 2 * kv_size;
    T* residual = residual_.as<T>();
    T* hidden = hidden_rows_.as<T>();
    T* qkv = qkv_.as<T>();
    T* q = q_.as<T>();
    T* attn = attn_.as<T>();
    T* gate_up = gate_up_.as<T>();
    T* act = act_.as<T>();
    const T* cos_sin = cos_sin_.as<T>();
    for (int64_t r = 0; r < M; ++r)
      rms_norm(residual + r * H, layers_[0].input_norm.as<T>(), hidden + r * H, H, eps_);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      if (l > 0)
        for (int64_t r = 0; r < M; ++r)
          add_norm(hidden + r * H, residual + r * H, layer.input_norm.as<T>(), H, eps_);
      product(layer.qkv, hidden, M, qkv);
      T* layer_keys = keys + l * B * G * S * D;
      T* layer_values = values + l * B * G * S * D;
      for (int64_t r = 0; r < M; ++r) {
        const int64_t b = r % B, position = start + r / B;
        const T* row = qkv + r * qkv_size;
        const T* table = cos_sin + position * D;
        for (int64_t h = 0; h < heads_; ++h)
          norm_rope(row + h * D, layer.q_norm.as<T>(), table, q + r * q_size + h * D, D, eps_);
        for (int64_t g = 0; g < G; ++g) {
          const int64_t at = ((b * G + g) * S + position) * D;
          norm_rope(row + q_size + g * D, layer.k_norm.as<T>(), table, layer_keys + at, D, eps_);
          std::memcpy(layer_values + at, row + q_size + kv_size + g * D, D * sizeof(T));
        }
      }
      for (int64_t i = 0; i < n; ++i)
        omni_cpu::attend_positions<T>(q + i * B * q_size, layer_keys, layer_values,
                                      attn + i * B * q_size, B, heads_, G, S, D, start + i + 1,
                                      scaling_);
      product(layer.o, attn, M, hidden);
      for (int64_t r = 0; r < M; ++r)
        add_norm(hidden + r * H, residual + r * H, layer.post_norm.as<T>(), H, eps_);
      product(layer.gate_up, hidden, M, gate_up);
      const int64_t inter = layer.down.k;
      for (int64_t r = 0; r < M; ++r)
        silu_and_mul(gate_up + r * 2 * inter, act + r * inter, inter);
      product(layer.down, act, M, hidden);
    }
    for (int64_t r = 0; r < M; ++r)
      add_norm(hidden + r * H, residual + r * H, final_norm_.as<T>(), H, eps_);
  }

  template <typename T>
  void run_typed(const torch::Tensor& embeds, const torch::Tensor& keys,
                 const torch::Tensor& values, int64_t start, torch::Tensor& out) {
    const int64_t B = embeds.size(0), n = embeds.size(1), H = hidden_;
    reserve(B * n);
    const T* in = ptr<T>(embeds);
    T* residual = residual_.as<T>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(residual + (i * B + b) * H, in + (b * n + i) * H, H * sizeof(T));
    forward<T>(B, n, start, ptr<T>(keys), ptr<T>(values), keys.size(3));
    std::memcpy(ptr<T>(out), hidden_rows_.as<T>() + (n - 1) * B * H, B * H * sizeof(T));
  }

  template <typename T>
  void frame_typed(const torch::Tensor& first, torch::Tensor& codes, const float* noise,
                   float inv_temperature, int64_t top_k) {
    const int64_t B = first.size(0), H = hidden_, groups = codes.size(1);
    const int64_t V = heads_list_[0].lm_head.n;
    const int64_t width = heads_list_[0].embedding.tensor.size(1);
    const int64_t S = cache_keys_.tensor.size(3);
    reserve(2 * B);
    T* keys = cache_keys_.as<T>();
    T* values = cache_values_.as<T>();
    T* residual = residual_.as<T>();
    T* last = last_.as<T>();
    T* logits = logits_.as<T>();
    T* embed = embed_.as<T>();
    int64_t* out = codes.data_ptr<int64_t>();
    const T* in = ptr<T>(first);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < 2; ++i)
        std::memcpy(residual + (i * B + b) * H, in + (b * 2 + i) * H, H * sizeof(T));
    forward<T>(B, 2, 0, keys, values, S);
    std::memcpy(last, hidden_rows_.as<T>() + B * H, B * H * sizeof(T));
    for (int64_t step = 1; step < groups; ++step) {
      const Head& head = heads_list_[step - 1];
      product(head.lm_head, last, B, logits);
      for (int64_t b = 0; b < B; ++b) {
        const float* row_noise = noise ? noise + ((step - 1) * B + b) * V : nullptr;
        const int64_t code =
            sample(logits + b * V, V, row_noise, inv_temperature, top_k, scaled_, sorted_);
        out[b * groups + step] = code;
        if (step < groups - 1)
          std::memcpy(embed + b * width, head.embedding.as<T>() + code * width,
                      width * sizeof(T));
      }
      if (step == groups - 1) break;
      if (has_projection_)
        product(projection_, static_cast<const T*>(embed), B, residual);
      else
        std::memcpy(residual, embed, B * H * sizeof(T));
      forward<T>(B, 1, step + 1, keys, values, S);
      std::memcpy(last, hidden_rows_.as<T>(), B * H * sizeof(T));
    }
  }

  int64_t hidden_, heads_, kv_heads_, head_dim_;
  float eps_, scaling_;
  torch::ScalarType dtype_;
  Buffer cos_sin_, final_norm_;
  std::vector<Layer> layers_;
  std::vector<Head> heads_list_;
  Linear projection_;
  bool has_projection_ = false;
  int64_t widest_k_ = 0, rows_ = 0;
  Buffer residual_, hidden_rows_, last_, qkv_, q_, attn_, gate_up_, act_, logits_, embed_;
  Buffer xq_, xscale_, xsum_, xf_, cache_keys_, cache_values_;
  std::vector<float> scaled_, sorted_;
  // run() and frame() release the GIL; a second Python thread calling the same step
  // waits here rather than sharing its buffers (a stage's runner makes one call at a time).
  std::mutex busy_;
};

}  // namespace

void omni_cpu::bind_predictor_step(pybind11::module& m) {
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
  // The codes of Format, which models/predictor_step.py checks its own table against at load.
  py::dict formats;
  formats["bf16"] = static_cast<int64_t>(kBf16);
  formats["w8a8"] = static_cast<int64_t>(kW8a8);
  formats["w4a8"] = static_cast<int64_t>(kW4a8);
  m.attr("predictor_step_formats") = formats;
}
