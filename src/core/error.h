// Result codes, the per-thread and per-comm "last error" text, and the CUDA-call check macro.
#pragma once

#include <string>

#include "yali/yali.h"

namespace yali {

// Records a formatted message as the calling thread's last error (and, when comm is non-null,
// the comm's) and returns `code`. Every failing path of the public API ends here, so that
// yaliGetLastError() always says which call and which argument.
yaliResult_t fail(yaliResult_t code, yaliComm* comm, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char* threadLastError();

const char* resultString(yaliResult_t result);

// Debug log to stderr when YALI_DEBUG=1.
void logInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace yali

// Inside a function that returns yaliResult_t and has `comm` and `call` (the API name) in scope.
#define YALI_CUDA_CHECK(expr)                                                               \
  do {                                                                                      \
    cudaError_t yali_err_ = (expr);                                                         \
    if (yali_err_ != cudaSuccess) {                                                         \
      return ::yali::fail(yaliUnhandledCudaError, comm, "%s: %s failed: %s (%s)", call, #expr, \
                          cudaGetErrorName(yali_err_), cudaGetErrorString(yali_err_));      \
    }                                                                                       \
  } while (0)
