// NCCL's API as data: one enum value per function that nccl.h declares (from nccl_api.inc, which
// the build generates from the header), its pointer type, and calls into the real NCCL.
#pragma once

#include <type_traits>
#include <utility>

#include <nccl.h>
#ifdef YALI_NCCL_HAS_DEVICE_HEADER
#include <nccl_device.h>  // its host functions are in the table too (src/nccl_abi/CMakeLists.txt)
#endif

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

// The header's type of each function, as a pointer: the row's return and parameter types, which
// the header checks where forwards.cc defines every function with them. (Not decltype(&::name):
// nccl_device.h also declares C++ overloads of some names, ncclTeamWorld(ncclDevComm const&).)
template <Api f>
struct ApiSignature;
#define YALI_NCCL_FUNCTION(Ret, name, Params, Args) \
  template <>                                       \
  struct ApiSignature<Api::name> {                  \
    using Pointer = Ret(*) Params;                  \
  };
#include "nccl_api.inc"
#undef YALI_NCCL_FUNCTION

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
#ifdef YALI_NCCL_HAS_DEVICE_HEADER
template <>
int missingResult<int>(Api f);  // -1: no rank and no slot count a real call returns
template <>
ncclTeam_t missingResult<ncclTeam_t>(Api f);  // a team of no ranks
#endif

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
