// The bf16 type every kernel file names: c10::BFloat16 in the torch extension modules, and
// under OMNI_CPU_STANDALONE (the cross-compiled Arm test harness, tests/kernels/arm/, which
// has no libtorch) a 16-bit type of the same bits: round to nearest even from float32, a NaN
// to the quiet NaN 0x7FC0, as c10's conversion does.

#pragma once

#include <cstdint>

#if defined(OMNI_CPU_STANDALONE)
#include <cstring>

namespace omni_cpu {

struct BF16 {
  uint16_t x;
  BF16() = default;
  BF16(float value) {  // NOLINT: implicit, as c10::BFloat16's
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    x = value != value ? uint16_t{0x7FC0}
                       : static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
  operator float() const {  // NOLINT: implicit, as c10::BFloat16's
    const uint32_t bits = static_cast<uint32_t>(x) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
};
static_assert(sizeof(BF16) == 2, "bf16 is two bytes");

}  // namespace omni_cpu
#else
#include <c10/util/BFloat16.h>

namespace omni_cpu {
using BF16 = c10::BFloat16;
}  // namespace omni_cpu
#endif
