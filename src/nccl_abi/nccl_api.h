// NCCL's API as data: one enum value per function that nccl.h declares (from nccl_api.inc, which
// the build generates from the header), its pointer type, and calls into the real NCCL.
#pragma once

#include <type_traits>
#include <utility>

#include <nccl.h>

#include "nccl_abi/diag.h"

namespace yali::nccl_abi {

enum class Api : int {
#define YALI_NCCL_FUNCTION(Ret, name, Params, Args) name,
#include "nccl_api.inc"
#undef YALI_NCCL_FUNCTION
  kCount
};
constexpr int kApiCount = static_cast<int>(Api::kCount);

const char* apiName(Api f);  // "ncclAllReduce"

// The real NCCL's f (real_nccl.cc), or null when no NCCL library was found or it lacks f (it is
// older than the header). Looked up once per function.
void* realAddress(Api f);

// nccl.h's type of each function, as a pointer. (ncclResetDebugInit is declared deprecated; naming
// its type is no use of it.)
template <Api f>
struct ApiSignature;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define YALI_NCCL_FUNCTION(Ret, name, Params, Args) \
  template <>                                       \
  struct ApiSignature<Api::name> {                  \
    using Pointer = decltype(&::name);              \
  };
#include "nccl_api.inc"
#undef YALI_NCCL_FUNCTION
#pragma GCC diagnostic pop

// What a call of a real function that is missing returns: an error for ncclResult_t (the reason
// is in ncclGetLastError), the reason for strings, nothing for void. A return type nccl.h adds
// one day fails to build here, on purpose.
template <typename R>
R missingResult(Api f);
template <>
ncclResult_t missingResult<ncclResult_t>(Api f);
template <>
const char* missingResult<const char*>(Api f);
template <>
void missingResult<void>(Api f);

template <typename Pointer>
struct RealCall;
template <typename R, typename... A>
struct RealCall<R (*)(A...)> {
  template <Api f>
  static R call(A... args) {
    auto fn = reinterpret_cast<R (*)(A...)>(realAddress(f));
    if (fn == nullptr) return missingResult<R>(f);
    if constexpr (std::is_same_v<R, ncclResult_t>) {
      const ncclResult_t r = fn(args...);
      if (r != ncclSuccess && r != ncclInProgress) noteFailure(Failure::kNccl);
      return r;
    } else {
      return fn(args...);
    }
  }
};

// The real NCCL's f called with these arguments, as they are: communicators must already be the
// real ones (realComm() in comm.h).
template <Api f, typename... A>
auto callReal(A&&... args) {
  return RealCall<typename ApiSignature<f>::Pointer>::template call<f>(std::forward<A>(args)...);
}

}  // namespace yali::nccl_abi
