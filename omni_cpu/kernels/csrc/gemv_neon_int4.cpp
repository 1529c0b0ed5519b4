// int4 weights, int8 activations on aarch64 (W4A8): the GEMV of gemv_avx2_int4.cpp on the same
// packed weights (groups of 32 along K, a bf16 scale and minimum each; packing.py's
// pack_int4: step p of 8 K elements is 4 bytes a column, byte j holding element j in its low
// nibble and 4 + j in its high one), activations per row to signed 8 bits (gemv_w4a8.cpp's
// quantize_s8 on vec.h's NEON vectors).
//
// A 16-byte load is one step of 4 columns: AND 0x0F gives their elements 0-3, USHR 4 their
// elements 4-7, each multiplied with x's quad by SDOT where the build states the dot product
// (SMULL + SADALP otherwise: neon_dot.h). A group's int32 sums then go to float32 as AVX2's:
// acc += dot * scale + xsum * minimum, times the row's scale at the end. Tiles: one row x 16
// columns. Arm speed is unmeasured (tests/kernels/test_arm_kernels.py runs this under
// qemu-aarch64 only).

#include <arm_neon.h>

#include <cstdint>

#include "gemv.h"
#include "kernel_common.h"
#include "neon_dot.h"
#include "vec.h"

namespace {

using omni_cpu::Int4Rows;
using omni_cpu::kInt4Group;
using omni_cpu::vec::Store;

constexpr int64_t kPanel = 16;  // output columns per tile: 4 vectors of 4

// Columns c..c+16 of a block nb columns wide, row m. Step p is [nb][4] bytes at
// block + p * nb * 4; group g's (scale, minimum) pairs [nb][2] bf16 at scales + g * nb * 2.
template <typename Out>
void w4a8_tile(const Int4Rows& rows, const uint8_t* block, const uint16_t* scales, int64_t nb,
               int64_t c, int64_t j0, int64_t m, const Store<Out>& store) {
  using namespace omni_cpu::neon;
  const int64_t K = rows.K, groups = K / kInt4Group;
  const int8_t* x = rows.xq + m * K;
  const int32_t* xsum = rows.xsum + m * groups;
  const uint8x16_t nibble = vdupq_n_u8(0x0F);
  float32x4_t acc[4];
  for (auto& a : acc) a = vdupq_n_f32(0.f);
  for (int64_t g = 0; g < groups; ++g) {
    Quads dot[4];
    for (auto& d : dot) d = quads_zero();
#pragma GCC unroll 4
    for (int64_t s = 0; s < kInt4Group / 8; ++s) {
      const int64_t p = g * (kInt4Group / 8) + s;
      const int8x16_t low_x = broadcast_quad(x + 8 * p), high_x = broadcast_quad(x + 8 * p + 4);
      const uint8_t* step = block + (p * nb + c) * 4;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const uint8x16_t w = vld1q_u8(step + v * 16);
        add_quads(dot[v], vreinterpretq_s8_u8(vandq_u8(w, nibble)), low_x);
        add_quads(dot[v], vreinterpretq_s8_u8(vshrq_n_u8(w, 4)), high_x);
      }
    }
    const float32x4_t sum = vdupq_n_f32(static_cast<float>(xsum[g]));
    const uint16_t* pairs = scales + (g * nb + c) * 2;
    for (int v = 0; v < 4; ++v) {
      const uint16x4x2_t both = vld2_u16(pairs + v * 8);  // (scales, minimums) of 4 columns
      const float32x4_t scale = vreinterpretq_f32_u32(vshll_n_u16(both.val[0], 16));
      const float32x4_t minimum = vreinterpretq_f32_u32(vshll_n_u16(both.val[1], 16));
      acc[v] = vfmaq_f32(acc[v], vcvtq_f32_s32(total(dot[v])), scale);
      acc[v] = vfmaq_f32(acc[v], sum, minimum);
    }
  }
  const float32x4_t xs = vdupq_n_f32(rows.xscale[m]);
  for (int v = 0; v < 4; ++v) store(m, j0 + v * 4, vmulq_f32(acc[v], xs));
}

}  // namespace

// The module's W4A8 product (gemv.h): gemv_w4a8.cpp's tensor call and predictor_step.cpp chain
// it after quantize_s8.
template <typename Out>
void omni_cpu::w4a8_product(const int8_t* xq, const float* xscale, const int32_t* xsum,
                            const uint8_t* w, const BF16* scales, int64_t M, int64_t K,
                            int64_t N, const float* bias, Out* out) {
  const Int4Rows rows{xq, xscale, xsum, K};
  const Store<Out> store{out, bias, N};
  const auto* pairs = reinterpret_cast<const uint16_t*>(scales);
  omni_cpu::for_each_block(N, [&](int64_t n0, int64_t nb) {
    const uint8_t* block = w + n0 * K / 2;
    const uint16_t* block_scales = pairs + n0 * (K / kInt4Group) * 2;
    for (int64_t c = 0; c < nb; c += kPanel)
      for (int64_t m = 0; m < M; ++m)
        w4a8_tile<Out>(rows, block, block_scales, nb, c, n0 + c, m, store);
  });
}

OMNI_CPU_W4A8_INSTANCES(float)
OMNI_CPU_W4A8_INSTANCES(omni_cpu::BF16)
