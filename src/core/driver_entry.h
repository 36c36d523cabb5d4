// The CUDA driver's functions, reached through the runtime's entry points: libyali links only the
// CUDA runtime, and uses a few driver calls the runtime lacks (cuMem*, stream memory operations).
#pragma once

#include <cuda_runtime.h>

namespace yali {

// Looks `name` up (the ABI of CUDA 12.0 or later) into *fn; false when the driver lacks it.
template <typename F>
bool lookUpDriver(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

}  // namespace yali
