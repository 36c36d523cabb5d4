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
// Two-shot may split a block into teams that run independent pipelines (block_ops.cuh: Team); the
// flag arrays hold one row per pipeline.
constexpr int kMaxTeamsPerBlock = 2;
constexpr int kMaxPipelines = kMaxCtas * kMaxTeamsPerBlock;
// Copy-engine AllReduce (copy_engine.cu): rounds in flight per direction, i.e. how many rounds'
// worth of staging each window holds. Three lets a sender run two rounds ahead of the slowest
// receiver's reduction.
constexpr int kCeSlots = 3;

// Why a device wait was abandoned (HostStatus::failure).
enum DeviceFailure : int {
  kFailNone = 0,
  kFailTimeout = 1,      // a peer did not arrive within YALI_TIMEOUT_MS
  kFailAborted = 2,      // yaliCommAbort on this rank
  kFailRemoteAbort = 3,  // a peer called yaliCommAbort
  kFailMismatch = 4,     // direct: a peer made a different call (DeviceArgs::callTag differs)
};

// ---- The window: one cudaMalloc per rank, mapped by every peer (CUDA IPC or peer access) ----------
//
// Byte layout (offsets in WindowLayout, all 256-byte aligned):
//   header      WindowHeader
//   pushFlags   uint64[kMaxPipelines][kMaxRanks]  [p][s]: sender s's pipeline p (a block, or a
//                                            team of one) pushed its reduce-scatter pieces into our
//                                            staging; value = flagValue(epoch, step)
//   resultFlags uint64[kMaxPipelines][kMaxRanks]  [p][s]: sender s's pipeline p has its reduced
//                                            shard ready for step `step` of epoch `epoch`
//   directFlags uint64[2][kMaxCtas][kMaxRanks]  direct's [0] enter and [1] leave flags:
//                                            [b][s]: sender s's block b has started (enter) or
//                                            finished with every buffer (leave) in epoch `epoch`;
//                                            enter = flagValue(epoch, callTag), leave =
//                                            flagValue(epoch, 0)
//   ll          LL packets [parity 2][sender nranks][llSlotBytes]: one-shot data, flags inline
//   staging     [parity 2][sender nranks][stagingBytes]: reduce-scatter pieces pushed by senders;
//               pipeline p with slot size s uses bytes [p*s, (p+1)*s) of each sender's part
//   result      [parity 2][stagingBytes]: this rank's reduced shards, pulled by peers (twoshot)
//   gather      [parity 2][sender nranks][stagingBytes]: reduced shards pushed by their owners
//               (twoshot_push); same slot rule as staging
//   copyIn      [parity 2][copyInBytes]: this rank's whole input, copied in for oneshot_pull and
//               read by every peer; block b's run of elements at the same offset as in the input
//   ceFlags     CeFlags: the copy-engine algorithm's flags (below)
//   ceRs        [slot kCeSlots][sender nranks][ceChunkBytes]: reduce-scatter pieces that senders'
//               copy engines wrote; round g uses slot g % kCeSlots
//   ceAg        [slot kCeSlots][ceChunkBytes]: this rank's reduced shard of round g, read by every
//               peer's copy engine
struct WindowHeader {
  int abortedByPeer;  // set by a peer's yaliCommAbort; our device waits give up when they see it
  int pad[63];
};

struct WindowLayout {
  size_t pushFlags;
  size_t resultFlags;
  size_t directFlags;
  size_t ll;
  size_t llSlotBytes;  // bytes of packets per (parity, sender); payload is half of it
  size_t staging;
  size_t stagingBytes;  // bytes per (parity, sender)
  size_t result;
  size_t gather;
  size_t copyIn;
  size_t copyInBytes;  // bytes per parity: the largest oneshot_pull message
  size_t ceFlags;
  size_t ceRs;
  size_t ceAg;
  size_t ceChunkBytes;  // bytes per (slot, sender): the largest shard of one round; 0 = no CE
  size_t total;
};

// The copy-engine algorithm's flags, in the receiver's window. Round j of a launch uses slot
// j % kCeSlots (so the host knows every copy's addresses, and a captured graph replays them), and
// is that slot's use number u = LocalState::ceSlotUses[slot] + j / kCeSlots, counted over the life
// of the comm and the same on every rank. Every flag holds "u + 1" of the last use it announces, so
// zero means never and every wait is "flag >= value"; nothing is ever reset.
struct CeFlags {
  uint64_t arrived[kCeSlots][kMaxRanks];         // [slot][sender]: sender's copy into our
                                                 // ceRs[slot][sender] for that round has completed
  uint64_t ready[kCeSlots][kMaxRanks][kMaxCtas];  // [slot][owner][block]: the owner's block has
                                                 // written its part of the owner's ceAg[slot] (and
                                                 // so has finished reading the owner's ceRs[slot])
  uint64_t freed[kCeSlots][kMaxRanks];           // [slot][reader]: reader's copy out of our
                                                 // ceAg[slot] for that round has completed
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
  uint64_t ceSlotUses[kCeSlots];  // copy-engine AllReduce: how many rounds of earlier launches
                                  // used each slot (a round's "use" number, see CeFlags)
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
  size_t slotBytes;    // two-shot: bytes per (pipeline, sender) slot and per step;
                       // oneshot_pull: bytes of the message per block
  int teamsPerBlock;   // two-shot: pipelines per block (Team); 1 for every other kernel
  // direct (registered buffers): every rank's send and recv buffers of this call as mapped here
  // ([rank] is ours), and a digest of the call (count, type, op, registrations and offsets) that
  // every peer's must equal.
  const void* peerSend[kMaxRanks];
  void* peerRecv[kMaxRanks];
  uint32_t callTag;
};

}  // namespace yali
