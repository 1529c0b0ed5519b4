// The one seam between the kernels and torch's thread pool: omni_cpu::parallel_for is
// at::parallel_for (the stage's OpenMP team, so its thread binding applies) in the extension
// modules, and a plain loop on the calling thread under OMNI_CPU_STANDALONE (the
// cross-compiled Arm test harness, which links no libtorch). Every output element is computed
// by one thread in one order either way, so the harness checks the modules' arithmetic.

#pragma once

#include <cstdint>

#if !defined(OMNI_CPU_STANDALONE)
#include <ATen/Parallel.h>
#endif

namespace omni_cpu {

// body(begin, end) over [begin, end) in chunks of at least `grain`.
template <typename Body>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, const Body& body) {
#if defined(OMNI_CPU_STANDALONE)
  (void)grain;
  if (begin < end) body(begin, end);
#else
  at::parallel_for(begin, end, grain, body);
#endif
}

}  // namespace omni_cpu
