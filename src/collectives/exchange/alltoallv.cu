// AlltoAllv, every form (yali.h: yaliAlltoAllv, yaliAlltoAllvDeviceCounts, yaliExpertDispatch,
// yaliExpertCombine) in one byte-wise kernel. The model (device_state.h: VarArgs): rank s sends
// C[s][d][e] rows of rowBytes bytes to local expert e of rank d; the piece from rank X to rank Y is
// its chunks e = 0..E-1 one after the other, taken from the sender's buffer and placed into the
// receiver's by the two chunk tables (byRank, byExpert). One launch:
//   1. counts  block 0 sends C[me][d][e] to every rank d (ourselves included) as one LL packet each,
//              into d's counts area [parity][me][e]; every block then waits for the packets of
//              every sender, so it knows its column C[*][me][*], and reads its own row C[me][*][*]
//              from the caller's array (or the host's, in the arguments). No separate barrier: the
//              packets carry the epoch.
//   2. tables  every block builds both chunk tables in shared memory from its row and column and
//              checks them (negative counts, capacities, extents, host recvcounts); every block
//              reaches the same verdict from the same numbers. On a failed check nothing moves:
//              block 0 records kFailCounts, which reaches every peer (recordFailure), whose waits
//              for us then end; the last block to leave writes -1 into the count outputs (as after
//              any failure of the launch: leaveLaunch's epilogue). A rank whose checks passed says
//              so to every peer and waits for every peer's word before any row moves, so that a
//              failure on one rank fails the call on every rank, also on those that exchange no
//              rows with it.
//   3. data    the staged exchange of exchange.cuh with a length per pair instead of one piece size:
//              sender X and receiver Y both know the piece X -> Y (its chunk counts are in X's row
//              and Y's column), hence its number of slots, and run the same push / consume /
//              credit protocol over it. Block b of P handles global slots b, b + P, ... of every
//              pair; its local step j is slot b + j * P; a pair takes part in local step j while
//              that slot lies within its piece. The progress argument of exchangeStaged holds step
//              by step: push(j) to d waits for d's credit of j - 2, given in d's consume(j - 2),
//              which d reaches (the pair is active there too) after its push(j - 1). The drain
//              waits for each receiver's credit of our last slot to it, so when the launch ends
//              every receiver has consumed everything we pushed (staging is free for the next
//              launch, of any algorithm). Our own piece is copied locally, slot by slot.
// The launch covenant (exchange.cuh) holds through step 1: every block waits for every rank's
// packets, which each rank sends when it starts. The counts area's parity is reused at launch
// e + 2 by the covenant's argument, like the LL areas.
#include "collectives/exchange/exchange.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {

// A count packet's payload (8 bytes): the count in its low kCountBits bits, kCountInvalid there
// for a count out of [0, kMaxCount] (which then fails every receiver's range check as it fails the
// sender's), and in its high 24 bits the sender's callShape. Counts reach at most 2^40 - 2 rows:
// rows are at least a byte, and no GPU holds a terabyte.
constexpr uint32_t kChecksPassed = 1;  // the step of the verdict flags (buildTables)
constexpr int kCountBits = 40;
constexpr uint64_t kCountInvalid = (uint64_t{1} << kCountBits) - 1;
constexpr int64_t kMaxCount = kMaxVarRows;  // rows; larger counts are refused (the host form at the call)
static_assert(kMaxCount == static_cast<int64_t>(kCountInvalid) - 1, "kMaxVarRows: the packet's 40-bit field");

struct ChunkTables {
  int64_t rankStart[kMaxExperts];    // byRank: first row of chunk (d, e), [d * E + e]
  int64_t rankLen[kMaxExperts];      //         its rows: C[me][d][e]; after the checks, the rows of
                                     //         the piece for d before it (toPiecePrefixes)
  int64_t expertStart[kMaxExperts];  // byExpert: first row of chunk (s, e), [s * E + e]
  int64_t expertLen[kMaxExperts];    //           its rows: C[s][me][e]; after the checks, the rows
                                     //           of the piece from s before it
  int64_t segment[kMaxLocalExperts + 1];  // expert forms: each local expert's first row; [E]: the end
  uint64_t outBytes[kMaxRanks];      // bytes of our piece for rank d
  uint64_t inBytes[kMaxRanks];       // bytes of rank s's piece for us
  int failedPhase;                   // 0, or the kPhaseCounts* of the first failed check
  int waitFailed;
};

__device__ __forceinline__ bool dispatchDirection(const VarArgs& v) { return v.mode != kVarCombine; }

// 24 bits that differ (but for a 2^-24 chance per pair of shapes) when two ranks disagree on what
// the call is: the row width (the datatype's size in the forms that take one), the experts per
// rank, the direction (dispatch or combine). Every rank's counts arrive with the sender's, so a
// receiver that reads them with another shape fails the call (kPhaseCountsShape) instead of moving
// rows it would misplace. Forms of the same direction may meet (host counts on one rank, device
// counts on another: yali.h allows it).
__device__ __forceinline__ uint32_t callShape(const VarArgs& v) {
  uint64_t x = v.rowBytes * 0x9E3779B97F4A7C15ull + (static_cast<uint64_t>(v.localExperts) << 1 | dispatchDirection(v));
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>((x ^ (x >> 31)) >> 40);
}

__device__ __forceinline__ uint64_t countPayload(int64_t count, uint32_t shape) {
  const uint64_t field = count < 0 || count > kMaxCount ? kCountInvalid : static_cast<uint64_t>(count);
  return static_cast<uint64_t>(shape) << kCountBits | field;
}

// Our count of rows for chunk g = d * E + e, from the caller's device array or the host's.
__device__ __forceinline__ int64_t ownCount(const VarArgs& v, int g) {
  return v.mode == kVarHostCounts ? static_cast<int64_t>(v.hostSendCounts[g]) : v.sendCounts[g];
}

// Exclusive prefix sum of a[0..count) in place, by the calling warp (32 at a time, with a carry).
__device__ void warpExclusiveScan(int64_t* a, int count) {
  const int lane = threadIdx.x & 31;
  int64_t carry = 0;
  for (int base = 0; base < count; base += 32) {
    const int i = base + lane;
    const int64_t own = i < count ? a[i] : 0;
    int64_t v = own;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t t = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += t;
    }
    if (i < count) a[i] = carry + v - own;
    carry += __shfl_sync(0xffffffffu, v, 31);
  }
}

__device__ __forceinline__ void failCheck(ChunkTables& t, int phase) { atomicCAS(&t.failedPhase, 0, phase); }

// Steps 1 and 2. False when the launch must stop (a failed wait or check, both recorded).
__device__ bool buildTables(const DeviceArgs& args, uint64_t epoch, ChunkTables& t) {
  const VarArgs& v = args.var;
  const int n = args.nranks, me = args.rank;
  const int E = static_cast<int>(v.localExperts);
  const int groups = n * E;
  const uint32_t flag = static_cast<uint32_t>(epoch);
  const size_t parity = epoch & 1;
  const uint32_t shape = callShape(v);
  if (threadIdx.x == 0) {
    t.failedPhase = 0;
    t.waitFailed = 0;
  }
  __syncthreads();  // before any thread may set them
  // Our row, and its packets to every rank (block 0 only).
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const int64_t c = ownCount(v, g);
    t.rankLen[g] = c;
    if (blockIdx.x == 0) {
      const int d = g / E, e = g % E;
      const uint64_t word = countPayload(c, shape);
      uint2 payload;
      memcpy(&payload, &word, 8);
      uint4* slot = reinterpret_cast<uint4*>(args.peerWindows[d] + args.layout.counts) +
                    (parity * kMaxRanks + me) * kMaxLocalExperts + e;
      storeVolatile16(slot, makePacket(payload, flag));
    }
  }
  // Our column: every sender's packets.
  {
    WaitGuard guard(args);
    const uint4* area = reinterpret_cast<const uint4*>(args.window + args.layout.counts) + parity * kMaxRanks * kMaxLocalExperts;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      const int s = g / E, e = g % E;
      uint2 payload;
      if (!waitPacket(area + s * kMaxLocalExperts + e, flag, guard, kPhaseCountsExchange, &payload)) {
        t.waitFailed = 1;
        break;
      }
      uint64_t word;
      memcpy(&word, &payload, 8);
      if (static_cast<uint32_t>(word >> kCountBits) != shape) failCheck(t, kPhaseCountsShape);
      t.expertLen[g] = static_cast<int64_t>(word & kCountInvalid);  // kCountInvalid fails the range check
    }
  }
  __syncthreads();
  if (t.waitFailed) return false;

  // Range checks before any sum.
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    if (t.rankLen[g] < 0 || t.rankLen[g] > kMaxCount || t.expertLen[g] < 0 || t.expertLen[g] > kMaxCount)
      failCheck(t, kPhaseCountsNegative);
    if (v.mode == kVarHostCounts && static_cast<uint64_t>(t.expertLen[g]) != v.hostRecvCounts[g])
      failCheck(t, kPhaseCountsMismatch);
    if (v.mode == kVarDeviceCounts && v.sendDispls != nullptr && (v.sendDispls[g] < 0 || v.sendDispls[g] > kMaxCount))
      failCheck(t, kPhaseCountsNegative);
  }
  __syncthreads();
  if (t.failedPhase == 0) {
    // byRank starts: given displacements, else packed (a prefix sum of our row).
    if (v.mode == kVarHostCounts) {
      for (int g = threadIdx.x; g < groups; g += blockDim.x) t.rankStart[g] = static_cast<int64_t>(v.hostSendDispls[g]);
    } else if (v.mode == kVarDeviceCounts && v.sendDispls != nullptr) {
      for (int g = threadIdx.x; g < groups; g += blockDim.x) t.rankStart[g] = v.sendDispls[g];
    } else {
      for (int g = threadIdx.x; g < groups; g += blockDim.x) t.rankStart[g] = t.rankLen[g];
      __syncthreads();
      if (threadIdx.x < 32) warpExclusiveScan(t.rankStart, groups);
    }
    // byExpert starts: the host's rdispls, else expert-major: expert e's segment at the sum of the
    // earlier experts' padded totals (each segment starts aligned, so padding the totals pads the
    // starts), rank s's chunk after ranks 0..s-1's.
    if (v.mode == kVarHostCounts) {
      for (int g = threadIdx.x; g < groups; g += blockDim.x) t.expertStart[g] = static_cast<int64_t>(v.hostRecvDispls[g]);
    } else {
      const int64_t align = static_cast<int64_t>(v.alignRows);
      for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int64_t total = 0;
        for (int s = 0; s < n; ++s) total += t.expertLen[s * E + e];
        t.segment[e] = (total + align - 1) / align * align;
      }
      __syncthreads();
      if (threadIdx.x < 32) warpExclusiveScan(t.segment, E);
      __syncthreads();
      for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int64_t at = t.segment[e];
        for (int s = 0; s < n; ++s) {
          t.expertStart[s * E + e] = at;
          at += t.expertLen[s * E + e];
        }
        if (e == E - 1) t.segment[E] = at;  // the end of the last expert's rows (unpadded)
      }
    }
  }
  __syncthreads();
  // Extents: the byRank buffer holds rankRows rows, the byExpert buffer expertRows.
  if (t.failedPhase == 0) {
    const bool dispatch = dispatchDirection(v);
    // Empty chunks move nothing: their starts (a padded segment start, a displacement past the
    // end) bound nothing. The end of the expert-major rows (expertOffsets[E]) is within the
    // capacity when every non-empty chunk is.
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      if (t.rankLen[g] > 0 && static_cast<uint64_t>(t.rankStart[g] + t.rankLen[g]) > v.rankRows)
        failCheck(t, dispatch ? kPhaseCountsSendExtent : kPhaseCountsRecvExtent);
      if (t.expertLen[g] > 0 && static_cast<uint64_t>(t.expertStart[g] + t.expertLen[g]) > v.expertRows)
        failCheck(t, dispatch ? kPhaseCountsCapacity : kPhaseCountsSendExtent);
    }
  }
  __syncthreads();
  if (t.failedPhase != 0) {
    // The -1 in the count outputs comes from leaveLaunch's epilogue (markCountsFailed), which runs
    // for every failed launch once all its blocks have left.
    if (blockIdx.x == 0 && threadIdx.x == 0) recordFailure(args, kFailCounts, t.failedPhase);
    return false;
  }
  // The verdicts. Only the failing rank knows its checks failed (its capacity, its sendbuff's
  // extent), and a rank that exchanges no rows with it would never wait for it again in this
  // launch: it would end the call with success while the failing rank fails it. So no row moves
  // before every rank has said that its checks passed: block 0 publishes arriveFlags[me] =
  // flagValue(epoch, kChecksPassed) on every peer, every block waits for every peer's. A failing
  // rank never publishes; its recordFailure ends our waits (kFailRemote, with its check).
  // arriveFlags is the launch covenant's (exchange.cuh), which AlltoAllv does not use (its count
  // round keeps the covenant); values grow with the epoch, so a later launch's flagValue(e', 0)
  // never satisfies this wait, nor this value a later launch's.
  if (blockIdx.x == 0 && threadIdx.x < n && threadIdx.x != me)
    publish(reinterpret_cast<uint64_t*>(args.peerWindows[threadIdx.x] + args.layout.arriveFlags) + me,
            flagValue(epoch, kChecksPassed));
  if (threadIdx.x < n && threadIdx.x != me &&
      !waitAtLeast(args, reinterpret_cast<const uint64_t*>(args.window + args.layout.arriveFlags) + threadIdx.x,
                   flagValue(epoch, kChecksPassed), kPhaseCountsVerdict))
    t.waitFailed = 1;
  __syncthreads();
  if (t.waitFailed) return false;
  // The count outputs (block 0), for the caller's next kernel.
  if (blockIdx.x == 0) {
    if (v.mode == kVarDeviceCounts) {
      for (int s = threadIdx.x; s < n; s += blockDim.x) {
        if (v.recvCounts != nullptr) v.recvCounts[s] = t.expertLen[s];
        if (v.recvOffsets != nullptr) v.recvOffsets[s] = t.expertStart[s];
      }
    } else if (v.mode == kVarDispatch) {
      for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        const int s = g / E, e = g % E;  // table order [s][e]; output order [e][s]
        if (v.recvCounts != nullptr) v.recvCounts[e * n + s] = t.expertLen[g];
      }
      for (int e = threadIdx.x; e <= E; e += blockDim.x)
        if (v.recvOffsets != nullptr) v.recvOffsets[e] = t.segment[e];
    }
  }
  // Piece sizes, per peer.
  const uint64_t rowBytes = v.rowBytes;
  for (int p = threadIdx.x; p < n; p += blockDim.x) {
    uint64_t byRank = 0, byExpert = 0;
    for (int e = 0; e < E; ++e) {
      byRank += static_cast<uint64_t>(t.rankLen[p * E + e]);
      byExpert += static_cast<uint64_t>(t.expertLen[p * E + e]);
    }
    t.outBytes[p] = (dispatchDirection(v) ? byRank : byExpert) * rowBytes;
    t.inBytes[p] = (dispatchDirection(v) ? byExpert : byRank) * rowBytes;
  }
  __syncthreads();
  // Each peer's chunk lengths become offsets within its piece (a prefix per peer, one warp per
  // peer), so that a slot finds its first chunk by a binary search (forChunks) instead of a walk
  // over every earlier chunk: with hundreds of experts the walk cost more than the copies.
  for (int p = threadIdx.x / 32; p < n; p += blockDim.x / 32) {
    warpExclusiveScan(t.rankLen + p * E, E);
    warpExclusiveScan(t.expertLen + p * E, E);
  }
  __syncthreads();
  return true;
}

// Calls f(e, from, to) for each chunk e of peer p's piece that overlaps bytes [off, end) of it
// (from, to: the chunk's bytes within the piece; before: the per-peer prefixes in rows, pieceBytes
// the piece's size). The first one by binary search: the last chunk that starts at or before off,
// which is not empty (the next one starts after off).
template <typename F>
__device__ __forceinline__ void forChunks(const int64_t* before, int p, int E, uint64_t rowBytes, uint64_t pieceBytes,
                                          uint64_t off, uint64_t end, F&& f) {
  const int64_t* at = before + p * E;
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (static_cast<uint64_t>(at[mid]) * rowBytes <= off) lo = mid;
    else hi = mid - 1;
  }
  for (int e = lo; e < E; ++e) {
    const uint64_t from = static_cast<uint64_t>(at[e]) * rowBytes;
    if (from >= end) break;
    const uint64_t to = e + 1 < E ? static_cast<uint64_t>(at[e + 1]) * rowBytes : pieceBytes;
    if (to > from) f(e, from, to);
  }
}

// Copies bytes [off, off + len) of a piece between a buffer placed by a chunk table (start in
// rows, chunks e = 0..E-1 of peer p) and a flat run (a staging slot). toTable: flat -> table.
__device__ __forceinline__ void moveChunks(const Team& block, const int64_t* start, const int64_t* before, int p,
                                           int E, uint64_t rowBytes, uint64_t pieceBytes, char* table, char* flat,
                                           uint64_t off, uint64_t len, bool toTable) {
  const uint64_t end = off + len;
  forChunks(before, p, E, rowBytes, pieceBytes, off, end, [&](int e, uint64_t from, uint64_t to) {
    const uint64_t a = max(off, from), b = min(end, to);
    char* t = table + static_cast<uint64_t>(start[p * E + e]) * rowBytes + (a - from);
    char* f = flat + (a - off);
    if (toTable) copyBytes(block, t, f, b - a);
    else copyBytes(block, f, t, b - a);
  });
}

// Step 3 (the header comment).
__device__ void moveRows(const DeviceArgs& args, uint64_t epoch, const ChunkTables& t) {
  const VarArgs& v = args.var;
  const int n = args.nranks, me = args.rank;
  const int E = static_cast<int>(v.localExperts);
  const WindowLayout& L = args.layout;
  const Team block = wholeBlock();
  const uint64_t slot = args.slotBytes;
  const uint64_t P = gridDim.x, b = blockIdx.x;
  const bool dispatch = dispatchDirection(v);
  // The tables of the sending side and of the receiving side.
  const int64_t* outStart = dispatch ? t.rankStart : t.expertStart;
  const int64_t* outBefore = dispatch ? t.rankLen : t.expertLen;  // per-peer prefixes (buildTables)
  const int64_t* inStart = dispatch ? t.expertStart : t.rankStart;
  const int64_t* inBefore = dispatch ? t.expertLen : t.rankLen;
  char* send = const_cast<char*>(static_cast<const char*>(args.send));
  char* recv = static_cast<char*>(args.recv);
  // Local steps of this block for a piece of `bytes`.
  auto stepsOf = [&](uint64_t bytes) -> uint32_t {
    const uint64_t slots = (bytes + slot - 1) / slot;
    return b < slots ? static_cast<uint32_t>((slots - b + P - 1) / P) : 0;
  };
  uint32_t last = 0;  // local steps of the busiest pair
  for (int p = 0; p < n; ++p) last = max(last, max(stepsOf(t.outBytes[p]), stepsOf(t.inBytes[p])));
  auto active = [&](const uint64_t* bytes, uint32_t j) {  // the peers (not us) whose piece has local step j
    uint32_t mask = 0;
    for (int p = 0; p < n; ++p)
      if (p != me && j < stepsOf(bytes[p])) mask |= 1u << p;
    return mask;
  };
  auto offsetOf = [&](uint32_t j) { return (b + static_cast<uint64_t>(j) * P) * slot; };
  auto staging = [&](char* window, uint32_t j, int sender) {
    return window + L.staging + (static_cast<size_t>(j & 1) * n + sender) * L.stagingBytes + b * slot;
  };
  auto push = [&](uint32_t j) {
    const uint32_t receivers = active(t.outBytes, j);
    if (receivers == 0) return true;
    if (j >= 2 && !waitPeers(block, args, L.resultFlags, flagValue(epoch, j - 2), kPhaseExchangeCredit, receivers))
      return false;
    const uint64_t off = offsetOf(j);
    for (int i = 1; i < n; ++i) {
      const int d = (me + i) % n;
      if (hasBit(receivers, d))
        moveChunks(block, outStart, outBefore, d, E, v.rowBytes, t.outBytes[d], send,
                   staging(args.peerWindows[d], j, me), off, min(slot, t.outBytes[d] - off), false);
    }
    signalPeers(block, args, L.pushFlags, flagValue(epoch, j), receivers);
    return true;
  };
  auto consume = [&](uint32_t j) {
    const uint32_t senders = active(t.inBytes, j);
    if (senders != 0 && !waitPeers(block, args, L.pushFlags, flagValue(epoch, j), kPhaseExchangePieces, senders))
      return false;
    const uint64_t off = offsetOf(j);
    for (int s = 0; s < n; ++s) {
      if (!hasBit(senders, s)) continue;
      moveChunks(block, inStart, inBefore, s, E, v.rowBytes, t.inBytes[s], recv, staging(args.window, j, s), off,
                 min(slot, t.inBytes[s] - off), true);
    }
    // Our own piece: chunk by chunk from the input straight to the output (both sides have the
    // same chunk sizes: our row's entry for us is our column's).
    if (j < stepsOf(t.outBytes[me])) {
      const uint64_t end = min(off + slot, t.outBytes[me]);
      forChunks(outBefore, me, E, v.rowBytes, t.outBytes[me], off, end, [&](int e, uint64_t from, uint64_t to) {
        const uint64_t a = max(off, from), z = min(end, to);
        copyBytes(block, recv + static_cast<uint64_t>(inStart[me * E + e]) * v.rowBytes + (a - from),
                  send + static_cast<uint64_t>(outStart[me * E + e]) * v.rowBytes + (a - from), z - a);
      });
    }
    if (senders != 0) signalPeers(block, args, L.resultFlags, flagValue(epoch, j), senders);
    return true;
  };

  bool ok = last == 0 || push(0);
  for (uint32_t j = 1; ok && j < last; ++j) ok = push(j) && consume(j - 1);
  if (ok && last > 0) ok = consume(last - 1);
  // The drain: each receiver's credit of our last slot to it (one thread per receiver; a failed
  // wait is recorded, and there is nothing left to stop).
  const int d = threadIdx.x;
  if (ok && d < n && d != me) {
    const uint32_t steps = stepsOf(t.outBytes[d]);
    if (steps > 0)
      waitAtLeast(args, reinterpret_cast<const uint64_t*>(args.window + L.resultFlags) + b * kMaxRanks + d,
                  flagValue(epoch, steps - 1), kPhaseExchangeCredit);
  }
  allowNextGrid();  // the frame's exit (exitLaunch) is the block barrier after every drain wait
}

// -1 in every entry of the count outputs (VarMode says which and how long), by the threads
// first, first + stride, ...
__device__ void fillCountsFailed(const DeviceArgs& args, int first, int stride) {
  const VarArgs& v = args.var;
  const int n = args.nranks, E = static_cast<int>(v.localExperts);
  const int outputs = v.mode == kVarDispatch ? n * E : v.mode == kVarDeviceCounts ? n : 0;
  const int offsets = v.mode == kVarDispatch ? E + 1 : v.mode == kVarDeviceCounts ? n : 0;
  for (int i = first; v.recvCounts != nullptr && i < outputs; i += stride) v.recvCounts[i] = -1;
  for (int i = first; v.recvOffsets != nullptr && i < offsets; i += stride) v.recvOffsets[i] = -1;
}

// The count outputs say the launch failed (thread 0 of the last block, after every block has left:
// leaveLaunch's epilogue). Covers a failed check and a failed wait alike; a peer's death during
// the rows would otherwise leave this rank's counts, written early by block 0, valid-looking.
__device__ void markCountsFailed(const DeviceArgs& args) { fillCountsFailed(args, 0, 1); }

// A launch refused on a failed comm: the outputs say so (poisonOutput's bytes, and -1 in every
// count output, by block 0), rather than holding the previous step's values.
__device__ void poisonVar(const DeviceArgs& args) {
  poisonOutput(args, 1);
  if (blockIdx.x == 0) fillCountsFailed(args, threadIdx.x, blockDim.x);
}

}  // namespace

// runLaunch's frame, with poisonVar for a refused launch.
__global__ void __launch_bounds__(512) alltoallvKernel(const __grid_constant__ DeviceArgs args) {
  __shared__ ChunkTables tables;
  LaunchInfo info;
  const Admission admission = enterLaunch(args, &info);
  if (admission == kAdmitted) {
    if (buildTables(args, info.epoch, tables)) moveRows(args, info.epoch, tables);
    else allowNextGrid();
  } else if (admission == kRefusedFailed) {
    poisonVar(args);
  }
  exitLaunch(args, info, admission, [&]() { markCountsFailed(args); });
}

KernelFn alltoallvKernelFor(DataType, RedOp) { return alltoallvKernel; }

}  // namespace yali
