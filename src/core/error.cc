#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/comm.h"
#include "core/env.h"

namespace yali {
namespace {
thread_local std::string tlsLastError;
}

yaliResult_t fail(yaliResult_t code, yaliComm* comm, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  tlsLastError = buf;
  if (comm != nullptr) comm->setLastError(buf);
  logInfo("error %d: %s", static_cast<int>(code), buf);
  return code;
}

const char* threadLastError() { return tlsLastError.c_str(); }

const char* resultString(yaliResult_t result) {
  switch (result) {
    case yaliSuccess: return "no error";
    case yaliUnhandledCudaError: return "unhandled cuda error (a CUDA call failed)";
    case yaliSystemError: return "unhandled system error (an operating-system call failed)";
    case yaliInternalError: return "internal error (a bug in YALI)";
    case yaliInvalidArgument: return "invalid argument";
    case yaliInvalidUsage: return "invalid usage (the call is not allowed in this state)";
    case yaliRemoteError: return "remote process exited or there was a network error";
    case yaliInProgress: return "operation in progress";
    case yaliTimeout: return "timeout (a peer did not arrive within YALI_TIMEOUT_MS)";
    default: return "unknown result code";
  }
}

void logInfo(const char* fmt, ...) {
  if (!debugLoggingEnabled()) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "YALI INFO ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

}  // namespace yali
