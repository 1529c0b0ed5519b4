// What one file of a GEMV module calls in another: the tensor calls the bindings file
// registers, and the products and attention on raw pointers that predictor_step.cpp chains.
//
// Every file that defines one of these includes this header and defines it by its qualified
// name (`omni_cpu::gemv_w4a8`), which C++ accepts only for a declared signature: a definition
// that drifts from its declaration is a compile error, not a missing symbol at load.
//
// The raw-pointer products give the same bits as the module's tensor calls (the same tiles on
// the same packed weights): y[M, N] = x[M, K] @ W[N, K]^T (+ bias), rounded once to Out.
// Which ones a module has depends on its ISA: the AVX-512 module's W8A8 takes activations
// shifted to unsigned 8 bits and its bf16 product bf16 ones (AMX tiles from amx_rows rows);
// the AVX2 and NEON (aarch64) modules' W8A8 takes signed activations and their bf16 product
// float32 ones. Under OMNI_CPU_STANDALONE (the cross-compiled Arm test harness, no libtorch)
// only the raw-pointer calls are declared.

#pragma once

#include <cstdint>

#include "bf16.h"

#if !defined(OMNI_CPU_STANDALONE)
#include <torch/extension.h>
#endif

namespace omni_cpu {

#if !defined(OMNI_CPU_STANDALONE)

// Tensor calls, bound to Python by the bindings file of each module.
// gemv_w4a8.cpp: y = x @ dequant(w).T (+ bias), W4A8, on the module's two calls below.
torch::Tensor gemv_w4a8(torch::Tensor x, torch::Tensor w, torch::Tensor scales,
                        c10::optional<torch::Tensor> bias);
// attention_decode.cpp: one query position per row over cache positions [0, end).
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values,
                               int64_t end, double scale);
// snake.cpp: SnakeBeta in one pass on time-major [B, L, C], after a convolution's carried input.
torch::Tensor snake_beta(torch::Tensor x, torch::Tensor alpha, torch::Tensor inv_beta,
                         c10::optional<torch::Tensor> tail);
// predictor_step.cpp: the PredictorStep class.
void bind_predictor_step(pybind11::module& m);
#endif

// Rows a buffer of M rows must have: where amx_rows sends a product to AMX tiles, x (bf16)
// or xq (int8) is read in whole tiles of 16 rows (M itself without AMX).
int64_t product_rows(int64_t M);

// W4A8: x per row to signed 8 bits, each row's scale and each group's code sum (gemv_w4a8.cpp,
// on vec.h's vectors: one definition for every module); the product on the packed nibbles
// (gemv_avx512_int4.cpp, gemv_avx2_int4.cpp).
template <typename In>
void quantize_s8(const In* x, int64_t M, int64_t K, int8_t* q, float* scales, int32_t* sums);
template <typename Out>
void w4a8_product(const int8_t* xq, const float* xscale, const int32_t* xsum, const uint8_t* w,
                  const BF16* scales, int64_t M, int64_t K, int64_t N,
                  const float* bias, Out* out);

// Both int4 files instantiate the product for float32 and bf16 outputs.
#define OMNI_CPU_W4A8_INSTANCES(T)                                                           \
  template void omni_cpu::w4a8_product<T>(const int8_t*, const float*, const int32_t*,        \
                                          const uint8_t*, const omni_cpu::BF16*, int64_t,     \
                                          int64_t, int64_t, const float*, T*);

// attention_decode.cpp's attention (every ISA).
template <typename T>
void attend_positions(const T* q, const T* keys, const T* values, T* out, int64_t B, int64_t H,
                      int64_t G, int64_t S, int64_t D, int64_t end, float scale);

// snake.cpp's SnakeBeta on raw pointers: out [B, keep + L, C] = [tail | snake(x)].
template <typename T>
void snake_rows(const T* x, const float* alpha, const float* inv_beta, const T* tail, T* out,
                int64_t B, int64_t L, int64_t C, int64_t keep);

#if defined(__AVX512F__)
// gemv_avx512_bf16_int8.cpp: x to unsigned 8 bits around 128; bf16 x.
template <typename In>
void quantize_u8(const In* x, int64_t M, int64_t K, uint8_t* q, float* scales);
template <typename Out>
void bf16_product(const BF16* x, const BF16* w, int64_t M, int64_t K,
                  int64_t N, const float* bias, Out* out, int64_t amx_rows);
template <typename Out>
void w8a8_product(const uint8_t* xq, const float* xscale, const int8_t* w, const float* wscale,
                  const int32_t* wsum, int64_t M, int64_t K, int64_t N, const float* bias,
                  Out* out, int64_t amx_rows);
#else
// gemv_avx2_bf16_int8.cpp, and gemv_neon_bf16_int8.cpp on aarch64 (the same signatures, on
// the same packed weights): x to signed 8 bits; float32 x.
template <typename Out>
void bf16_product_f32(const float* x, const BF16* w, int64_t M, int64_t K, int64_t N,
                      const float* bias, Out* out);
template <typename In>
void quantize_s8_rows(const In* x, int64_t M, int64_t K, int8_t* q, float* scales);
template <typename Out>
void w8a8_product_s8(const int8_t* xq, const float* xscale, const int8_t* w, const float* wscale,
                     int64_t M, int64_t K, int64_t N, const float* bias, Out* out);
#endif

}  // namespace omni_cpu
