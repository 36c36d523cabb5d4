// Every setting of libyali-nccl, read once from the environment. (YALI's own YALI_* settings, read
// by libyali, apply to the YALI communicators as usual.)
#pragma once

#include <string>

#include "nccl_abi/routing.h"
#include "vocabulary.h"

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
  // NCCL_GRAPH_MIXING_SUPPORT=0 (NCCL's setting): neither NCCL nor, then, the scratches' users or
  // YALI's launches (YALI_GRAPH_MIXING=0, set for libyali unless the program set it) order a comm's
  // graph replays against its other calls; the program does. Default 1, as NCCL's.
  bool graphMixing = true;
  // YALI_TIMEOUT_MS (libyali's setting, read here with its default and range): the bound on each
  // wait of libyali-nccl's set-up rounds for its peers (comm.cc, realRound), so that a peer that
  // cannot take part in a round ends the set-up with an error instead of a hang.
  long long timeoutMs = kDefaultTimeoutMs;
  // YALI_NCCL_TEST_SETUP_DELAY=<rank>:<round>:<ms> (testing only; round: records, id, agreement or
  // answer): that rank sleeps ms before it issues that set-up round (comm.cc, realRound), so that a
  // GPU test can make a peer late past YALI_TIMEOUT_MS (tests/gpu/ncclabi_setup_faults.py). Unset,
  // or unparsable: -1, nothing.
  int testDelayRank = -1;
  std::string testDelayRound;
  long long testDelayMs = 0;
  // YALI_NCCL_TEST_NO_STREAM_JOIN=1 (testing only): a group's streams are not joined
  // (group_streams.cc), so that a GPU test can show what the join prevents
  // (tests/gpu/ncclabi_group_streams.py).
  bool testNoStreamJoin = false;
  // YALI_NCCL_TEST_CALL_ORDER=1 (testing only): a group's deferred calls run in call order, not comm
  // by comm in the comms' key order (intercept.cc, runDeferredCallsOf), so that a GPU test can show
  // what the order prevents (tests/gpu/ncclabi_group_order.py).
  bool testCallOrder = false;
};

const Settings& settings();

}  // namespace yali::nccl_abi
