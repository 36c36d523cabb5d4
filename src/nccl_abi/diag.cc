#include "nccl_abi/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include <string>

#include "nccl_abi/env.h"

namespace yali::nccl_abi {

namespace {

thread_local Failure tlsLastFailure = Failure::kNone;
thread_local std::string tlsShimError;

void vlog(int rank, const char* fmt, va_list ap) {
  char body[1024];
  vsnprintf(body, sizeof(body), fmt, ap);
  // One fprintf per line, so that lines of concurrent threads and ranks do not interleave.
  if (rank >= 0)
    fprintf(stderr, "[yali-nccl rank %d] %s\n", rank, body);
  else
    fprintf(stderr, "[yali-nccl pid %d] %s\n", static_cast<int>(getpid()), body);
}

}  // namespace

bool debugEnabled() { return settings().debug; }

void info(int rank, const char* fmt, ...) {
  if (!debugEnabled()) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(rank, fmt, ap);
  va_end(ap);
}

void warn(int rank, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(rank, fmt, ap);
  va_end(ap);
}

void noteFailure(Failure who) { tlsLastFailure = who; }
Failure lastFailure() { return tlsLastFailure; }

ncclResult_t shimFail(ncclResult_t code, const char* fmt, ...) {
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof(body), fmt, ap);
  va_end(ap);
  tlsShimError = std::string("libyali-nccl: ") + body;
  tlsLastFailure = Failure::kShim;
  info(-1, "%s", body);
  return code;
}

const char* shimLastError() { return tlsShimError.c_str(); }

}  // namespace yali::nccl_abi
