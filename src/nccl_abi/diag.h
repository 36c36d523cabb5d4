// Logging and the "last error" of libyali-nccl: which library failed last, on this thread.
#pragma once

#include <nccl.h>

namespace yali::nccl_abi {

// Messages go to stderr as "[yali-nccl rank R] ..." (rank -1: "[yali-nccl pid P] ..."): info()
// only with YALI_NCCL_DEBUG=1, warn() always.
void info(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void warn(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
bool debugEnabled();

// Who failed last on this thread, for ncclGetLastError: NCCL (whatever the real library returned),
// YALI (a YALI call whose error we returned), or libyali-nccl itself (no NCCL library found, a
// function missing from it).
enum class Failure { kNone, kNccl, kYali, kShim };
void noteFailure(Failure who);
Failure lastFailure();

// Records a failure of libyali-nccl's own (the message for ncclGetLastError; logged with
// YALI_NCCL_DEBUG=1) and returns code. Callers warn themselves where a warning is due, once.
ncclResult_t shimFail(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
const char* shimLastError();

}  // namespace yali::nccl_abi
