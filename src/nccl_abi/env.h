// Every setting of libyali-nccl, read once from the environment. (YALI's own YALI_* settings, read
// by libyali, apply to the YALI communicators as usual.)
#pragma once

#include <string>

#include "nccl_abi/routing.h"

namespace yali::nccl_abi {

struct Settings {
  // YALI_NCCL_LIBRARY: the real NCCL to forward to (a path); unset: found as real_nccl.h says.
  std::string library;
  // YALI_NCCL_DEBUG=1: log, once per (collective, power-of-2 size class, library), which library
  // ran a collective and why; and every communicator's set-up. Warnings are printed regardless.
  bool debug = false;
  // YALI_NCCL_DISABLE: collectives that stay on NCCL ("allgather,reducescatter", "all").
  CollectiveMask disabled = 0;
  std::string unknownDisabled;  // names it did not know (warned about once)
  // YALI_NCCL_REGISTER=1: ncclCommRegister registers with YALI too (parseRegisterSetting says why
  // it is off by default), for programs whose ranks register the same buffers in the same order.
  bool registerYali = false;
};

const Settings& settings();

}  // namespace yali::nccl_abi
