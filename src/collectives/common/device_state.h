// State shared between the host side of a communicator and its kernels: the memory each rank
// exposes to its peers (the window), the rank-private device state, the host-mapped status words
// and the argument block every kernel receives.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define YALI_HOST_DEVICE __host__ __device__
#else
#define YALI_HOST_DEVICE
#endif

namespace yali {

constexpr int kMaxRanks = 8;
constexpr int kMaxCtas = 64;

// Why a device wait was abandoned (HostStatus::failure).
enum DeviceFailure : int {
  kFailNone = 0,
  kFailTimeout = 1,      // a peer did not arrive within YALI_TIMEOUT_MS
  kFailAborted = 2,      // yaliCommAbort on this rank
  kFailRemoteAbort = 3,  // a peer called yaliCommAbort
};

// ---- The window: one cudaMalloc per rank, mapped by every peer (CUDA IPC or peer access) ----------
//
// Byte layout (offsets in WindowLayout, all 256-byte aligned):
//   header      WindowHeader
//   pushFlags   uint64[kMaxCtas][kMaxRanks]  [b][s]: sender s's block b pushed its reduce-scatter
//                                            pieces into our staging; value = flagValue(epoch, step)
//   resultFlags uint64[kMaxCtas][kMaxRanks]  [b][s]: sender s's block b has its reduced shard ready
//                                            in its result area for step `step` of epoch `epoch`
//   ll          LL packets [parity 2][sender nranks][llSlotBytes]: one-shot data, flags inline
//   staging     [parity 2][sender nranks][stagingBytes]: reduce-scatter pieces pushed by senders;
//               block b with slot size s uses bytes [b*s, (b+1)*s) of each sender's part
//   result      [parity 2][stagingBytes]: this rank's reduced shards, pulled by peers (twoshot)
//   gather      [parity 2][sender nranks][stagingBytes]: reduced shards pushed by their owners
//               (twoshot_push); same slot rule as staging
//   copyIn      [parity 2][copyInBytes]: this rank's whole input, copied in for oneshot_pull and
//               read by every peer; block b's run of elements at the same offset as in the input
struct WindowHeader {
  int abortedByPeer;  // set by a peer's yaliCommAbort; our device waits give up when they see it
  int pad[63];
};

struct WindowLayout {
  size_t pushFlags;
  size_t resultFlags;
  size_t ll;
  size_t llSlotBytes;  // bytes of packets per (parity, sender); payload is half of it
  size_t staging;
  size_t stagingBytes;  // bytes per (parity, sender)
  size_t result;
  size_t gather;
  size_t copyIn;
  size_t copyInBytes;  // bytes per parity: the largest oneshot_pull message
  size_t total;
};

// Flag values grow monotonically over the life of a comm (epoch, then step within a launch), so a
// wait is "flag >= expected" and nothing is ever reset; a peer that is already one step ahead
// satisfies it too.
YALI_HOST_DEVICE inline uint64_t flagValue(uint64_t epoch, uint32_t step) {
  return (epoch << 32) | step;
}

// ---- Rank-private device state (plain cudaMalloc on the rank's GPU) ------------------------------
struct LocalState {
  uint64_t epoch;          // the next launch's epoch; starts at 1 (LL buffers are zero: never valid)
  unsigned epochReaders;   // blocks of the current launch that have read `epoch`
  int failed;              // sticky: a wait of this comm failed; later launches return at once
};

// ---- Host-mapped status (cudaHostAlloc, mapped) ---------------------------------------------------
// Written by the device on failure, read by the host at every API call without synchronizing.
struct HostStatus {
  int failure;        // DeviceFailure, first one wins (atomicCAS)
  int failurePhase;   // which wait (kPhase* of the algorithm)
  int failureBlock;   // blockIdx.x of the first failing block
  int abortRequested; // set by yaliCommAbort on this rank; device waits poll it
  uint64_t failureEpoch;
};

// ---- Kernel arguments (passed by value) -----------------------------------------------------------
struct DeviceArgs {
  const void* send;
  void* recv;
  size_t count;
  int rank;
  int nranks;
  char* window;                 // this rank's window (device address)
  char* peerWindows[kMaxRanks]; // every rank's window as mapped here; [rank] == window
  WindowLayout layout;
  LocalState* local;
  HostStatus* host;  // device alias of the host-mapped status
  uint64_t timeoutNs;
  uint64_t epochHint;  // host-side launch count, for error reports only
  size_t slotBytes;    // two-shot: bytes per (block, sender) slot and per step;
                       // oneshot_pull: bytes of the message per block
};

}  // namespace yali
