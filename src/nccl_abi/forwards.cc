// Every function of nccl.h, exported: a forward to the real NCCL for each (one table row each,
// nccl_api.inc, generated from the header), and the pncclX profiling names.
//
// The forwards are weak definitions: intercept.cc defines the functions YALI takes part in, and
// the linker keeps those strong definitions instead. So the set of intercepted functions is written
// once, as the definitions themselves, and a function nccl.h adds is forwarded without a change
// here. Each forward unwraps the communicators among its arguments (realArg, comm.h) and passes
// everything else as it is.
//
// This file includes nccl.h and defines each function with the header's own parameter list, so the
// compiler checks every definition against the header's declaration.
#include <type_traits>

#include <nccl.h>

#include "nccl_abi/comm.h"
#include "nccl_abi/nccl_api.h"

#define YALI_NCCL_EXPORT __attribute__((visibility("default")))

namespace yali::nccl_abi {
namespace {

template <Api f, typename... A>
auto forwardToReal(A... args) {
  // A call on one of our comms whose background set-up still runs is refused, as NCCL refuses a call
  // on a comm in progress (refuseWhileSetUp, comm.h). The device API's team functions (ncclTeamWorld,
  // ...), which return a value and only read the comm's fields, as NCCL does without a check, pass.
  // A refused call inside a group does not fail the group here (NCCL fails it for
  // ncclCommWindowRegister and ncclDevCommCreate; the intercepted calls do: refuseInGroupWhileSetUp).
  using Result = decltype(callReal<f>(realArg(args)...));
  if constexpr (std::is_same_v<Result, ncclResult_t>) {
    ncclResult_t refused = ncclSuccess;
    ((refused = refused != ncclSuccess ? refused : refuseWhileSetUpArg(args, apiName(f))), ...);
    if (refused != ncclSuccess) return refused;
  }
  return callReal<f>(realArg(args)...);
}

}  // namespace
}  // namespace yali::nccl_abi

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit

#define YALI_NCCL_FUNCTION(Ret, name, Params, Args)                     \
  extern "C" YALI_NCCL_EXPORT __attribute__((weak)) Ret name Params { \
    return ::yali::nccl_abi::forwardToReal<::yali::nccl_abi::Api::name> Args; \
  }
#include "nccl_api.inc"
#undef YALI_NCCL_FUNCTION

// pncclX is ncclX under another name (NCCL's profiling interface: a tool that defines ncclX calls
// pncclX to reach the library). It calls our ncclX, intercepted or forwarded; the library is linked
// with -Bsymbolic-functions, so that call stays inside it even when a tool loaded before us
// defines ncclX too.
#define YALI_NCCL_PROFILING_ALIAS(Ret, name, Params, Args)                                  \
  static_assert(std::is_same<decltype(&::name), decltype(&::p##name)>::value,               \
                "p" #name " is declared with another type than " #name);                     \
  extern "C" YALI_NCCL_EXPORT Ret p##name Params { return ::name Args; }
#include "nccl_api.inc"
#undef YALI_NCCL_PROFILING_ALIAS

// The device API's functions (nccl_device.h) have pncclX aliases in libnccl too, which no header
// declares: the same alias, without the type check against a declaration. (::name picks the
// extern "C" function among nccl_device.h's C++ overloads by its arguments.)
#define YALI_NCCL_DEVICE_PROFILING_ALIAS(Ret, name, Params, Args) \
  extern "C" YALI_NCCL_EXPORT Ret p##name Params { return ::name Args; }
#include "nccl_api.inc"
#undef YALI_NCCL_DEVICE_PROFILING_ALIAS

#pragma GCC diagnostic pop
