// State shared between the host side of a communicator and its kernels: the memory each rank
// exposes to its peers (the window), the rank-private device state, the host-mapped status words
// and the argument block every kernel receives.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "vocabulary.h"

namespace yali {

// Why a device wait was abandoned (HostStatus::failure).
enum DeviceFailure : int {
  kFailNone = 0,
  kFailTimeout = 1,   // a peer did not arrive within YALI_TIMEOUT_MS
  kFailAborted = 2,   // yaliCommAbort on this rank
  kFailRemote = 3,    // a peer failed and told us (HostStatus::failureOrigin, failureRemoteCode)
  kFailMismatch = 4,  // registered buffers: a peer made a different call (DeviceArgs::callTag)
  kFailCounts = 5,    // AlltoAllv: this rank's counts failed a check (failurePhase says which)
  kFailHost = 6,      // a CUDA call failed half-way through queuing a call (copy engines: the host
                      // queues the whole call; copy_engine.cc, issueCopyEngine)
  kFailWatched = 7,   // the word the comm watches (DeviceArgs::failureWatch) was nonzero at a launch
  kFailP2PBytes = 8,  // point-to-point: a matched yaliSend and yaliRecv move different bytes
};

// Which wait a failure happened in (HostStatus::failurePhase), named in error messages
// (waitPhaseName). The values are part of no interface but the messages: new ones go at the end.
enum WaitPhase : int {
  kPhaseAdmission = 0,        // a launch found that a peer had failed
  kPhaseLLRecv = 1,           // one-shot LL AllReduce: a peer's packets
  kPhasePushWait = 2,         // two-shot: the peers' pieces in our staging
  kPhaseResultWait = 3,       // two-shot: the peers' reduced shards
  kPhasePullWait = 4,         // oneshot_pull: the peers' copy-in
  kPhaseTwoshotEnter = 11,    // twoshot_direct: the entry handshake
  kPhaseExchangeLL = 12,      // an *_ll exchange: a sender's packets
  kPhaseExchangePieces = 13,  // a *_staged exchange: a sender's pieces in our staging
  kPhaseExchangeCredit = 14,  // a *_staged exchange: a receiver's credit for our next pieces
  kPhaseExchangeArrive = 15,  // an exchange: a peer's start of the launch (the launch covenant)
  kPhaseDirectEnter = 16,     // a *_direct exchange: the entry handshake
  kPhaseDirectLeave = 17,     // a *_direct exchange: the peers' writes into our output
  kPhaseRebaseArrive = 20,    // the epoch rebase: every rank ended its last launch of the round
  kPhaseRebaseClear = 21,     // the epoch rebase: every rank cleared its window
  kPhaseCountsExchange = 22,  // alltoallv: a sender's counts
  // alltoallv's count checks (kFailCounts; not waits, but named the same way in messages):
  kPhaseCountsNegative = 23,  // a device count or displacement below 0
  kPhaseCountsCapacity = 24,  // the rows received exceed the receiving buffer's capacity
  kPhaseCountsSendExtent = 25,// the rows to send lie past the end of the sending buffer
  kPhaseCountsMismatch = 26,  // host recvcounts differ from what the peers send
  kPhaseCountsRecvExtent = 27,// combine: rows land past the end of recvbuff's allocation
  kPhaseCountsShape = 28,     // a sender's row width, experts per rank or direction differ from ours
  kPhaseCountsVerdict = 29,   // alltoallv: a peer's word that its count checks passed
  // The copy-engine algorithms (no kernel: the host's watch reports these, copy_engine.h):
  kPhaseCopyEngineReady = 30, // a peer's word that its input is ready for this call
  kPhaseCopyEngineDone = 31,  // a peer's word that it has read our input
  // Point-to-point (collectives/p2p/p2p.cu; no registry row, so outside the 32 phase bits):
  kPhaseP2PSlot = 32,         // a receiver: the sender's next slot of the pair's ring
  kPhaseP2PCredit = 33,       // a sender: the receiver's credit for a slot we want to reuse
  kPhaseP2PBytes = 34,        // (a check, kFailP2PBytes) the sender's call moves other bytes than ours
};
const char* waitPhaseName(int phase);  // "one-shot LL: a peer's packets", ...; host only

// WindowHeader::remoteFailure: which peer failed and how, in one word a peer writes with one store.
YALI_HOST_DEVICE inline uint32_t encodeRemoteFailure(int code, int rank) {
  return (static_cast<uint32_t>(code) << 8) | static_cast<uint32_t>(rank + 1);
}
YALI_HOST_DEVICE inline int remoteFailureCode(uint32_t word) { return static_cast<int>(word >> 8); }
// kFailCounts travels with its check (a kPhaseCounts* value) above the code's low byte:
// failureCode() and failureCheck() take a remote code apart again.
YALI_HOST_DEVICE inline int withCheck(int code, int phase) { return code | (phase << 8); }
YALI_HOST_DEVICE inline int failureCode(int remoteCode) { return remoteCode & 0xFF; }
YALI_HOST_DEVICE inline int failureCheck(int remoteCode) { return remoteCode >> 8; }
YALI_HOST_DEVICE inline int remoteFailureRank(uint32_t word) { return static_cast<int>(word & 0xFF) - 1; }

// The entry tag of a registered-buffer call that must not run (its registration is gone or its
// memory was freed): different from the call's real tag and from every other rank's poisoned tag,
// so that the entry handshake fails on every rank even when every rank poisons (block_ops.cuh:
// enterWithTag). A plain complement would match when all ranks complement.
YALI_HOST_DEVICE inline uint32_t poisonedTag(uint32_t tag, int rank) {
  return tag ^ (0x80000000u | static_cast<uint32_t>(rank + 1));
}

// ---- The window: one cuMem allocation per rank, mapped by every peer ------------------------------
//
// Byte layout (offsets in WindowLayout, all 256-byte aligned):
//   header      WindowHeader
//   pushFlags   uint64[kMaxPipelines][kMaxRanks]  [p][s]: sender s's pipeline p (a block, or a
//                                            team of one) pushed its pieces of step `step` into our
//                                            staging; value = flagValue(epoch, step)
//   resultFlags uint64[kMaxPipelines][kMaxRanks]  [p][s]: two-shot: sender s's pipeline p has its
//                                            reduced shard ready for step `step` of epoch `epoch`;
//                                            a staged exchange: receiver s's pipeline p has
//                                            consumed our pieces up to step `step` (its credit)
//   directFlags uint64[3][kMaxCtas][kMaxRanks]  the registered-buffer kernels' [0] enter and
//                                            [1] leave flags: [b][s]: sender s's block b has
//                                            started (enter) or finished with every buffer (leave)
//                                            in epoch `epoch`; enter = flagValue(epoch, tag),
//                                            leave = flagValue(epoch, 0); [2] not a flag: the
//                                            direct exchanges' output offset of sender s within
//                                            its registration, written before its enter flag
//   arriveFlags uint64[kMaxRanks]            [s]: rank s has started its launch of epoch `epoch`
//                                            (value flagValue(epoch, 0)); written by the exchange
//                                            kernels whose pattern leaves some peer silent
//                                            (exchange.cuh: the launch covenant); AlltoAllv: s's
//                                            count checks passed (flagValue(epoch, 1))
//   ll          LL packets [parity 2][sender nranks][llSlotBytes]: one-shot data, flags inline
//               (one-shot AllReduce and every *_ll exchange: sender s's packets for us)
//   counts      LL packets [parity 2][sender kMaxRanks][kMaxLocalExperts]: alltoallv's counts,
//               [p][s][e] = rows sender s sends to our local expert e (one packet each: the
//               count and the sender's call shape as payload, the epoch as flag; alltoallv.cu)
//   staging     [parity 2][sender nranks][stagingBytes]: pieces pushed by senders (two-shot's
//               reduce-scatter, every *_staged exchange); pipeline p with slot size s uses bytes
//               [p*s, (p+1)*s) of each sender's part
//   result      [parity 2][stagingBytes]: this rank's reduced shards, pulled by peers (twoshot)
//   gather      [parity 2][sender nranks][stagingBytes]: reduced shards pushed by their owners
//               (twoshot_push); same slot rule as staging
//   copyIn      [parity 2][copyInBytes]: this rank's whole input, copied in for oneshot_pull and
//               read by every peer; block b's run of elements at the same offset as in the input
//   p2pFlags    P2PSlotFlag[sender kMaxRanks][channel kMaxP2PChannels][slot kP2PSlots]: sender s's
//               announcement of what lies in slot k of its ring c for us (point-to-point; p2p.cu)
//   p2pCredits  uint64[receiver kMaxRanks][channel kMaxP2PChannels][slot kP2PSlots]: [r][c][k]: the
//               number plus one of the last slot at place k of our ring c into rank r's window that
//               r has consumed (r writes it)
//   p2pLL       [sender nranks][channel p2pChannels][slot kP2PSlots][kP2PLLSlotBytes]: the LL slots
//               sender s wrote for us (a small call's chunks, p2p.h): a header packet (the shape), then
//               one packet per 8 bytes; older chunks' packets stay until we clear the place, once every
//               kP2PLLCleanPeriod slots of its ring (p2p.h: p2pLLFlag, p2pClearsLLSlot)
//   p2pRing     [sender nranks][channel p2pChannels][slot kP2PSlots][p2pSlotStride]: the slots sender
//               s pushed for us; a slot's data starts at its announced skew (0..15)
//   local       LocalState: this rank's private launch state (in the window only to share its
//               allocation and lifetime; no peer reads or writes it)
// Everything from pushFlags to the end of counts is epoch-stamped (WindowLayout::stampedBytes): the
// epoch rebase clears it. The point-to-point areas are not: their counters count slots per pair
// for the comm's life (64 bits: they never wrap) and never go back to 0.
struct WindowHeader {
  // 0, or encodeRemoteFailure(code, rank) of a peer that failed: written by the peer's device when
  // one of its waits fails (recordFailure), or by its host in yaliCommAbort; our device waits and
  // our next launch give up when they see it. Last writer wins: any one names a failed peer.
  uint32_t remoteFailure;
  uint32_t pad0;
  // The epoch rebase's two rounds (device.cuh: rebaseEpochs); [s] is written by rank s, with the
  // number of rebases rank s has completed plus one.
  uint64_t rebaseArrived[kMaxRanks];  // s finished its launch of epoch kEpochLimit
  uint64_t rebaseCleared[kMaxRanks];  // s cleared its own window's epoch-stamped areas
  uint64_t pad[256 / 8 - 1 - 2 * kMaxRanks];
};
static_assert(sizeof(WindowHeader) == 256, "WindowHeader is one 256-byte block");

struct WindowLayout {
  size_t ceFlags;     // the copy-engine handshake (copy_engine.h): uint32_t ready[kMaxRanks], done[kMaxRanks]
  size_t pushFlags;
  size_t resultFlags;
  size_t directFlags;
  size_t arriveFlags;
  size_t ll;
  size_t llSlotBytes;  // bytes of packets per (parity, sender); payload is half of it
  size_t counts;
  size_t stampedBytes; // [pushFlags, pushFlags + stampedBytes): flags and LL packets
  size_t staging;
  size_t stagingBytes;  // bytes per (parity, sender)
  size_t result;
  size_t gather;
  size_t copyIn;
  size_t copyInBytes;  // bytes per parity: the largest oneshot_pull message
  size_t p2pFlags;
  size_t p2pCredits;
  size_t p2pLL;
  size_t p2pRing;
  size_t p2pSlotBytes;   // payload of one slot (YALI_P2P_SLOT_BYTES); 0: no point-to-point areas
  size_t p2pSlotStride;  // bytes from one slot to the next: the payload, its skew, 256-aligned
  size_t p2pChannels;    // rings per ordered pair (YALI_P2P_CHANNELS)
  size_t p2pLLBytes;     // calls of at most this travel as LL packets (YALI_P2P_LL_BYTES; p2p.h)
  size_t local;        // this rank's LocalState (private: no peer touches it)
  size_t total;
};

// Flag values grow monotonically over a round of epochs (epoch, then step within a launch), so a
// wait is "flag >= expected" and nothing is reset but by the rebase; a peer that is already one
// step ahead satisfies it too. epoch <= kEpochLimit < 2^32, so the shift never overflows.
YALI_HOST_DEVICE inline uint64_t flagValue(uint64_t epoch, uint32_t step) {
  return (epoch << 32) | step;
}

// ---- Rank-private device state (at WindowLayout::local in the rank's own window) ------------------
struct LocalState {
  uint64_t epoch;   // the next launch's epoch, 1..kEpochLimit (YALI_TEST_EPOCH_START at first)
  unsigned exits;   // blocks of the current launch that have left it; its last block resets it
  uint32_t regEpoch;  // bumped by the host when a registration that a graph captured goes away:
                      // replays of calls captured before then must not touch registered memory
  // failed and closed are read together as one 8-byte word (device.cuh: readGate).
  int failed;       // sticky: a wait of this comm failed; later launches touch nothing but poison
                    // their outputs
  int closed;       // set by the host (yaliCommDestroy, yaliCommAbort): later launches touch nothing
  uint64_t rebases; // epoch rebases this comm has completed
  int propagated;   // this rank has told its peers of its failure (recordFailure, once)
  // Blocks of eager launches (DeviceArgs::eagerSeq != 0) that have ended: every block of every
  // eager launch adds 1 once no warp of it still runs (device.cuh: exitLaunch, countEagerBlockEnded:
  // a relaxed red.add, which nothing on the device waits for); graph launches never touch it.
  // Contract: when the host reads a value >= the blocks of the comm's first k eager kernel
  // launches (yaliComm::eagerIssued.kernelBlocks), no warp of those launches still runs; their
  // last stores may still drain, and the host waits for that by time (comm.cc: kStoreDrainUs,
  // kReleaseGraceMs). A count that high cannot be made of later launches' blocks while an earlier
  // one's is missing: the comm's launches run one after another, as the host orders them (stream
  // order with griddepcontrol.wait before any block counts, and the order events of enqueue.cc
  // across streams); where the host cannot (enqueue.cc: the last launch's stream has begun a
  // capture since) the program must, and the count relies on that as the epochs do. In device memory: a store
  // to host memory at every eager launch's end cost about 1 us per call on 2 H200s (PERF.md Session
  // 25). The host reads it by a copy when it must wait for the launches (comm.cc:
  // eagerLaunchesEnded), never at a call. 2^64 blocks never wrap.
  uint64_t eagerBlocksEnded;
  // Point-to-point: the slots this rank has pushed into ring [peer][channel] of `peer`'s window,
  // and those it has consumed of ring [peer][channel] in its own (peer the sender). Each is read
  // and written by the one block of a launch that runs that ring (p2p.cu: a lane), the comm's
  // launches running one after another; a matched pair of calls advances the sender's and the
  // receiver's counter alike, so they agree at every launch.
  uint64_t p2pSent[kMaxRanks][kMaxP2PChannels];
  uint64_t p2pReceived[kMaxRanks][kMaxP2PChannels];
};
static_assert(offsetof(LocalState, failed) % 8 == 0 && offsetof(LocalState, closed) == offsetof(LocalState, failed) + 4,
              "failed and closed form one aligned 8-byte word");

// One slot's announcement (WindowLayout::p2pFlags), written by the sender after the slot's data:
// `shape` first (a plain store), then `ready` (st.release.sys), which the receiver observes.
struct P2PSlotFlag {
  uint64_t ready;  // the slot's number in its ring, plus one: the ring's slots are numbered from 0
                   // for the comm's life, slot g in place g % kP2PSlots
  uint64_t shape;  // (bytes of the sender's call << 4) | the data's skew within the slot
};

// ---- Host-mapped status (cudaHostAlloc, mapped) ---------------------------------------------------
// Written by the device, read by the host at every API call without synchronizing.
struct HostStatus {
  // The first failure wins `claim` (atomicCAS), writes the details, then publishes `failure` last,
  // so that a host that reads failure != 0 (then, after an acquire fence, the details) never sees
  // half of them.
  int failure;          // DeviceFailure; 0 until the details below are complete
  int claim;            // 0 until a failure claims the record
  int failurePhase;     // which wait (kPhase* of the algorithm)
  int failureBlock;     // blockIdx.x of the first failing block
  int abortRequested;   // set by yaliCommAbort on this rank; device waits poll it
  uint64_t failureEpoch;  // the host's launch count of the failing launch
  int failureOrigin;      // kFailRemote: the peer that failed first, as far as we know
  int failureRemoteCode;  // kFailRemote: that peer's own DeviceFailure
  // The last eager launch that has ended as the copy engines' watch saw it (copy_engine.cc:
  // advanceEagerDone; the kernels count their ended blocks in LocalState::eagerBlocksEnded), and
  // where the host's copy of that device word lands (eagerLaunchesEnded). In a cache line of their
  // own: the host reads `failure` (above) at every call.
  alignas(64) uint64_t eagerDone;
  uint64_t eagerBlocksEndedRead;
  // Sources of the host's stream-ordered writes into device memory (comm.cc: writeDeviceWords):
  // pinned, so a copy never waits for a staging buffer.
  int closedWords[2];     // {failed, closed} = {1, 1}: LocalState's gate after destroy or abort
  uint32_t remoteWord;    // what yaliCommAbort writes into each peer's WindowHeader::remoteFailure
  uint32_t regEpochWord;  // the next LocalState::regEpoch
  // Where the copy engines' watch copies our window's WindowHeader::remoteFailure while a call
  // waits (copy_engine.cc: peerFailed), one copy per poll: a peer's failure ends a waiting
  // copy-engine call as it ends a waiting kernel. In a cache line of its own, away from eagerDone
  // and failure, which the host reads at every call.
  alignas(64) uint32_t remoteSeen;
};

// ---- Kernel arguments (passed by value) -----------------------------------------------------------

// AlltoAllv (exchange/alltoallv.cuh), every form as one model: rank s sends C[s][d][e] rows of
// rowBytes bytes to local expert e of rank d (E = localExperts; the plain forms are E = 1, rows =
// elements). Each rank places its chunks by two tables (the kernel builds them in shared memory):
//   byRank    [d * E + e]: chunk (d, e) in the buffer ordered by destination (the dispatch's
//             sendbuff, the combine's recvbuff): at sdispls / the host's sdispls, else packed;
//   byExpert  [s * E + e]: chunk (s, e) in the buffer ordered by expert (the dispatch's recvbuff,
//             the combine's sendbuff): expert-major, each expert's segment at a multiple of
//             alignRows; the host form: at rdispls.
// Dispatch (every form but the combine) sends by byRank and receives by byExpert; the combine the
// other way round.
enum VarMode : uint32_t {
  kVarHostCounts = 0,    // yaliAlltoAllv: counts and displacements in hostCounts
  kVarDeviceCounts = 1,  // yaliAlltoAllvDeviceCounts: 1-D, outputs recvCounts and recvOffsets [n]
  kVarDispatch = 2,      // yaliExpertDispatch: outputs recvCounts [E][n], recvOffsets [E + 1]
  kVarCombine = 3,       // yaliExpertCombine
};

struct VarArgs {
  const int64_t* sendCounts;  // device, [n * E] rows (device forms); null for kVarHostCounts
  const int64_t* sendDispls;  // device, [n] rows, or null: packed (kVarDeviceCounts only)
  int64_t* recvCounts;        // device outputs, or null (see VarMode)
  int64_t* recvOffsets;
  uint64_t hostSendCounts[kMaxRanks];  // kVarHostCounts, in rows (= elements)
  uint64_t hostSendDispls[kMaxRanks];
  uint64_t hostRecvCounts[kMaxRanks];
  uint64_t hostRecvDispls[kMaxRanks];
  uint64_t rowBytes;
  uint64_t alignRows;
  uint64_t expertRows;  // rows the byExpert buffer holds (its capacity)
  uint64_t rankRows;    // rows the byRank buffer holds (its allocation from the pointer on)
  uint32_t localExperts;
  uint32_t mode;        // VarMode
};

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
  uint64_t eagerSeq;   // > 0: this eager launch's number (yaliComm::eagerIssued.lastSeq; a
                       // copy-engine call's: HostStatus::eagerDone); 0 in a graph. A kernel uses
                       // it only as != 0: its blocks then count into LocalState::eagerBlocksEnded
  size_t slotBytes;    // two-shot: bytes per (pipeline, sender) slot and per step;
                       // oneshot_pull: bytes of the message per block
  int teamsPerBlock;   // two-shot: pipelines per block (Team); 1 for every other kernel
  // Registered buffers (twoshot_direct, the direct exchanges: outputs; the pull exchange and the
  // copy engines: inputs): every rank's buffer of this call as mapped here ([rank] is ours; the
  // direct and pull exchanges: every rank's registration base), a digest of the call (collective,
  // count, type, op, root, registration and, where the offsets must agree, offset) that every
  // peer's must equal, and LocalState::regEpoch when the call was made.
  void* peerRecv[kMaxRanks];
  uint32_t callTag;
  uint32_t regEpoch;
  // The exchange kernels (exchange.cuh): this rank's part of the call as data. A piece is
  // pieceBytes bytes that one rank sends to one receiver; every piece starts at 0 or at a rank
  // times pieceBytes, so masks describe the whole pattern (core/pattern.cc fills them per collective):
  //   sendTo         bit d: we send a piece to rank d, read from our input at srcOffset(d):
  //                  d * pieceBytes when bit d of srcByRank is set, else 0;
  //   recvFrom       bit s: we receive a piece from rank s, stored in our output at dstOffset(s):
  //                  s * pieceBytes when bit s of dstByRank is set, else 0 (reducing exchanges:
  //                  every received piece is reduced, in rank order, into the output at 0);
  //   peerDstByRank  bit d: our piece lands at rank * pieceBytes of rank d's output, else at 0
  //                  (registered outputs: the direct exchange writes there itself).
  // A rank's own piece (bit `rank` of sendTo and recvFrom) moves locally; when it would be copied
  // onto itself (in place) both bits are clear. registeredOffset: the direct exchanges' output
  // offset (the pull exchange's input offset) within its registration, which every rank tells its
  // peers at entry (NCCL's in-place layouts put buffers at offsets that differ by rank, and so does
  // any allocator that is not symmetric). DeviceArgs::count is this rank's output in bytes
  // (what a launch on a failed comm poisons), and `arrive` says whether the launch exchanges
  // arrival flags (exchange.cuh: the launch covenant), the same on every rank.
  size_t pieceBytes;
  size_t registeredOffset;
  uint32_t arrive;
  uint32_t sendTo;
  uint32_t recvFrom;
  uint32_t srcByRank;
  uint32_t dstByRank;
  uint32_t peerDstByRank;
  // The algorithms that read peers' inputs (the copy engines, copy_engine.h; the pull exchange):
  // bit p: rank p's input holds one piece per receiver (ours at rank * pieceBytes), else one piece
  // at 0. peerRecv[p] then holds rank p's input as mapped here (the pull exchange: its registration
  // base), and callTag the digest every rank's handshake must match.
  uint32_t peerSrcByRank;
  VarArgs var;  // alltoallv only
  // The rooted two-shot shapes (broadcast_twoshot, reduce_twoshot; allreduce/twoshot.cuh): the
  // root. Last, so that the other fields keep their offsets in the kernels' parameter space.
  int root;
  // yaliCommWatchFailureWord's word (another library's, in device memory), or null: read by every
  // block's admission (device.cuh: enterLaunch), in stream order; nonzero refuses the launch as a
  // failure (kFailWatched) that the peers are told of.
  const uint64_t* failureWatch;
};

// ---- Point-to-point launches (collectives/p2p/p2p.cu) ---------------------------------------------
// A group's point-to-point calls on one comm, as one launch. Each call is an op; each block runs
// one lane: all the comm's sends to one peer on one channel (ring), all receives from one peer on
// one channel, or a share of the copies to self. Chunk i (slotBytes each) of a call to or from
// a peer travels on channel i % p2pChannels: both ranks derive it from the call's bytes alone.
enum P2PKind : uint32_t {
  kP2PSend = 0,
  kP2PRecv = 1,
  kP2PCopy = 2,  // a send to self with its receive: src -> dst
};

struct P2POp {
  const char* src;  // send, copy: the input
  char* dst;        // recv, copy: the output
  uint64_t bytes;
  int32_t peer;     // send: the receiver; recv: the sender; copy: our rank
  uint32_t kind;    // P2PKind
};

struct P2PLane {
  uint8_t peer;     // send: the receiver; recv: the sender; copy: unused
  uint8_t kind;     // P2PKind
  uint8_t channel;  // send, recv: the ring; copy: this lane's index among the copy lanes
  uint8_t pad;
};
// A launch's lanes: its rings to and from every peer, at most kMaxCtas (p2p.h: p2pRingsPerPair), and
// up to 16 copy lanes.
constexpr int kMaxP2PLanes = kMaxCtas + 16;

// The kernel's parameters: the frame (rank, windows, status, timeout), the ops in call order, the
// lanes (one per block). kCap: the ops it holds (two sizes, so that a small group's launch does not
// carry kMaxP2POps ops' worth of parameters).
template <int kCap>
struct P2PArgs {
  DeviceArgs frame;
  uint32_t nops;
  uint32_t channels;   // rings per pair the transfers use (<= layout.p2pChannels, the rings laid out)
  uint32_t copyLanes;
  P2PLane lanes[kMaxP2PLanes];
  P2POp ops[kCap];
};

}  // namespace yali
