// Checking CUDA runtime calls: a failure is fatal and names the call, the file and the line.
#ifndef YALI_PERF_CUDA_CHECK_H_
#define YALI_PERF_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <string>

#include "perf_error.h"

namespace yali_perf {

inline void CheckCuda(cudaError_t result, const char* call, const char* file, int line) {
  if (result == cudaSuccess) return;
  Fatal(std::string(call) + " failed: " + cudaGetErrorName(result) + " (" +
        std::to_string(static_cast<int>(result)) + "): " + cudaGetErrorString(result) + " at " +
        file + ":" + std::to_string(line));
}

}  // namespace yali_perf

#define YALI_PERF_CUDA(call) ::yali_perf::CheckCuda((call), #call, __FILE__, __LINE__)

#endif  // YALI_PERF_CUDA_CHECK_H_
