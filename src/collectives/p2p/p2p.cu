// Point-to-point transfers: the kernel and its host-side plan (p2p.h has the protocol).
#include "collectives/p2p/p2p.h"

#include <string.h>

#include "collectives/common/block_ops.cuh"
#include "collectives/common/device.cuh"
#include "collectives/common/ll_packets.cuh"
#include "collectives/registry.h"

namespace yali {
namespace {

constexpr uint64_t kNoFailure = 0;

// Where slot place k of ring (sender, channel) lies in `window` (the receiver's).
__device__ __forceinline__ char* slotOf(char* window, const WindowLayout& L, int sender, int channel, uint64_t k) {
  return window + L.p2pRing + ((static_cast<size_t>(sender) * L.p2pChannels + channel) * kP2PSlots + k) * L.p2pSlotStride;
}
__device__ __forceinline__ P2PSlotFlag* flagOf(char* window, const WindowLayout& L, int sender, int channel, uint64_t k) {
  return reinterpret_cast<P2PSlotFlag*>(window + L.p2pFlags) + (static_cast<size_t>(sender) * kMaxP2PChannels + channel) * kP2PSlots + k;
}
// LL slot place k of ring (sender, channel) in `window` (the receiver's): its header packet, then
// the chunk's packets (p2p.h: kP2PLLSlotBytes).
__device__ __forceinline__ uint4* llSlotOf(char* window, const WindowLayout& L, int sender, int channel, uint64_t k) {
  return reinterpret_cast<uint4*>(window + L.p2pLL +
                                  ((static_cast<size_t>(sender) * L.p2pChannels + channel) * kP2PSlots + k) * kP2PLLSlotBytes);
}
// The receiver's credit for place k of our ring `channel` into its window, in our window.
__device__ __forceinline__ uint64_t* creditOf(char* window, const WindowLayout& L, int receiver, int channel, uint64_t k) {
  return reinterpret_cast<uint64_t*>(window + L.p2pCredits) +
         (static_cast<size_t>(receiver) * kMaxP2PChannels + channel) * kP2PSlots + k;
}

// One lane's walk over the launch's calls of its kind and peer: every chunk on its channel, in
// order, numbered j = 0, 1, ... from the lane's slot counter *seqWord (its slot is *seqWord + j);
// the lane's team t takes the chunks with j % kP2PTeams == t. `step(op, off, len, seq)` moves one
// chunk and returns false when the lane must stop (a failed wait or check). The whole block calls
// it. The counter: every thread reads it before the first barrier; thread 0 advances it past the
// lane's chunks (every team's) after the last, only if no team stopped (a failed comm's counters
// are never used again).
template <int kCap, typename Step>
__device__ __forceinline__ void walkLane(const P2PArgs<kCap>& a, uint32_t kind, int peer, int channel, const Team& team,
                                         uint64_t* seqWord, Step step) {
  __shared__ int stopped;
  if (threadIdx.x == 0) stopped = 0;
  const uint64_t base = *seqWord;
  __syncthreads();
  const uint64_t slot = a.frame.layout.p2pSlotBytes;
  uint64_t j = 0;
  bool ok = true;
  for (uint32_t o = 0; o < a.nops && ok; ++o) {
    const P2POp& op = a.ops[o];
    if (op.kind != kind || op.peer != peer) continue;
    const uint64_t chunk = p2pChunkBytes(op.bytes, a.channels, slot, a.frame.layout.p2pLLBytes);
    const uint64_t chunks = (op.bytes + chunk - 1) / chunk;
    for (uint64_t i = channel; i < chunks && ok; i += a.channels, ++j) {
      if (j % kP2PTeams != static_cast<uint64_t>(team.index)) continue;
      const uint64_t off = i * chunk;
      ok = step(op, off, op.bytes - off < chunk ? op.bytes - off : chunk, base + j);
    }
  }
  if (!ok) stopped = 1;
  __syncthreads();
  if (threadIdx.x == 0 && !stopped) *seqWord = base + j;
}

// Every send of the launch to `peer`, chunks on `channel`, pushed into the peer's ring (p2p.h: the
// sender's three steps), by the block's teams in turn: while one team's thread 0 waits for its
// release to drain, the other team copies the next chunk.
template <int kCap>
__device__ __noinline__ void runSendLane(const P2PArgs<kCap>& a, int peer, int channel) {
  const DeviceArgs& args = a.frame;
  const WindowLayout& L = args.layout;
  const Team team = teamOf(kP2PTeams);
  __shared__ int stop[kP2PTeams];
  walkLane(a, kP2PSend, peer, channel, team, &args.local->p2pSent[peer][channel],
           [&](const P2POp& op, uint64_t off, uint64_t len, uint64_t seq) {
    const uint64_t k = seq % kP2PSlots;
    if (team.thread == 0) {
      // The place's previous slot (seq - kP2PSlots) consumed: its credit is seq - kP2PSlots + 1.
      stop[team.index] = seq >= kP2PSlots &&
                         !waitAtLeast(args, creditOf(args.window, L, peer, channel, k), seq - kP2PSlots + 1, kPhaseP2PCredit);
    }
    team.sync();
    if (stop[team.index]) return false;
    const char* src = op.src + off;
    if (p2pTravelsAsLL(op.bytes, L.p2pLLBytes)) {
      // LL: the packets and the header carry their own flag; no barrier, no release (p2p.h).
      uint4* lines = llSlotOf(args.peerWindows[peer], L, args.rank, channel, k);
      const uint32_t f = p2pLLFlag(seq);
      const uint64_t words = (len + 7) / 8;
      for (uint64_t i = team.thread; i < words; i += team.size) storeVolatile16(lines + 1 + i, makePacket(loadPayload8(reinterpret_cast<const uint8_t*>(src), i, len), f));
      if (team.thread == 0) {
        const uint64_t shape = op.bytes << 4;
        storeVolatile16(lines, makePacket(make_uint2(static_cast<uint32_t>(shape), static_cast<uint32_t>(shape >> 32)), f));
      }
      // Not for the stores (they need no drain): every thread of the team has read stop[] for this
      // slot before thread 0 writes it for the next.
      team.sync();
      return true;
    }
    const uint64_t skew = reinterpret_cast<uintptr_t>(src) & 15;
    copyBytes(team, slotOf(args.peerWindows[peer], L, args.rank, channel, k) + skew, src, len);
    team.sync();  // the team's stores before thread 0's release
    if (team.thread == 0) {
      P2PSlotFlag* flag = flagOf(args.peerWindows[peer], L, args.rank, channel, k);
      *reinterpret_cast<volatile uint64_t*>(&flag->shape) = op.bytes << 4 | skew;
      publish(&flag->ready, seq + 1);
    }
    return true;
  });
}

// Every receive of the launch from `peer`, chunks on `channel`, copied out of our ring and credited
// place by place (p2p.h: the receiver's steps), by the block's teams in turn.
template <int kCap>
__device__ __noinline__ void runRecvLane(const P2PArgs<kCap>& a, int peer, int channel) {
  const DeviceArgs& args = a.frame;
  const WindowLayout& L = args.layout;
  const Team team = teamOf(kP2PTeams);
  __shared__ int stop[kP2PTeams];
  __shared__ uint64_t skewOfSlot[kP2PTeams];
  __shared__ int llOfSlot[kP2PTeams];
  __shared__ int llFailed[kP2PTeams];
  walkLane(a, kP2PRecv, peer, channel, team, &args.local->p2pReceived[peer][channel],
           [&](const P2POp& op, uint64_t off, uint64_t len, uint64_t seq) {
    const uint64_t k = seq % kP2PSlots;
    uint4* lines = llSlotOf(args.window, L, peer, channel, k);
    const uint32_t f = p2pLLFlag(seq);
    if (team.thread == 0) {
      // Either announcement: the data slot's ready (acquire) or the LL slot's header, whichever
      // the sender chose (p2p.h); the other stays below this slot (ready only grows; the LL slot
      // holds no header with this slot's flag until its chunk is written: p2pLLFlag).
      P2PSlotFlag* flag = flagOf(args.window, L, peer, channel, k);
      WaitGuard guard(args);
      int s = 0;
      uint64_t shape = 0;
      int ll = 0;
      for (;;) {
        // Polled relaxed (an acquire at every spin would slow the LL route's polling too), then
        // read once more with acquire: the slot's data and shape after the sender's release.
        if (*reinterpret_cast<volatile uint64_t*>(&flag->ready) >= seq + 1 && observe(&flag->ready) >= seq + 1) {
          shape = *reinterpret_cast<volatile uint64_t*>(&flag->shape);
          break;
        }
        const uint4 h = loadVolatile16(lines);
        if (h.y == f && h.w == f) {
          shape = static_cast<uint64_t>(h.z) << 32 | h.x;
          ll = 1;
          break;
        }
        if (!guard.keepWaiting(kPhaseP2PSlot)) {
          s = 1;
          break;
        }
      }
      if (!s && shape >> 4 != op.bytes) {
        // The sender's call is not ours: nothing of it is copied; both ranks fail (the sender's
        // waits for our credit end when recordFailure tells it; origin: the sender, for the message).
        recordFailure(args, kFailP2PBytes, kPhaseP2PBytes, peer);
        s = 1;
      }
      skewOfSlot[team.index] = shape & 15;
      llOfSlot[team.index] = ll;
      llFailed[team.index] = 0;
      stop[team.index] = s;
    }
    team.sync();
    if (stop[team.index]) return false;
    uint64_t* credit = creditOf(args.peerWindows[peer], L, args.rank, channel, k);
    // Read once here: thread 0 rewrites llOfSlot for its next slot as soon as it has credited this one.
    const bool ll = llOfSlot[team.index] != 0;
    if (ll) {
      // Each packet polled until it carries this slot's flag, its payload stored; the packets stay
      // (p2pLLFlag: stale packets).
      WaitGuard guard(args);
      bool good = true;
      const uint64_t words = (len + 7) / 8;
      for (uint64_t i = team.thread; i < words && good; i += team.size) {
        uint2 payload;
        good = waitPacket(lines + 1 + i, f, guard, kPhaseP2PSlot, &payload);
        if (good) storePayload8(reinterpret_cast<uint8_t*>(op.dst + off), i, len, payload);
      }
      // llFailed, not stop: a thread of the team may not have read stop[] yet.
      if (!good) llFailed[team.index] = 1;
      // Every thread's packets read before any thread clears the slot (below) or thread 0 credits
      // it, and every thread sees whether one of them failed.
      team.sync();
      if (llFailed[team.index]) return false;
    } else {
      copyBytes(team, op.dst + off, slotOf(args.window, L, peer, channel, k) + skewOfSlot[team.index], len);
    }
    // The credit frees the place for the sender's next writes. It publishes nothing: the team
    // barrier orders every thread's reads of the slot (packets or data) before it, and a read whose
    // value has returned cannot see a later write, so a relaxed store suffices, without a release's
    // wait for this team's stores to dst to drain (p2p.h). Except at the place's periodic clearing
    // (p2pLLFlag), on either route: the team's clears must land before the sender's next packets,
    // so that credit is a release.
    const bool clears = p2pClearsLLSlot(seq);
    if (clears)
      for (uint64_t i = team.thread; i < kP2PLLSlotBytes / 16; i += team.size) storeVolatile16(lines + i, make_uint4(0, 0, 0, 0));
    if (clears || !ll) team.sync();  // the clears before the release; the data route's reads before the credit
    if (team.thread == 0) {
      if (clears) publish(credit, seq + 1);
      else postRelaxed(credit, seq + 1);
    }
    return true;
  });
}

// This lane's share of every copy to self: chunks lane, lane + lanes, ...
template <int kCap>
__device__ __noinline__ void runCopyLane(const P2PArgs<kCap>& a, int lane) {
  const WindowLayout& L = a.frame.layout;
  const Team block = wholeBlock();
  for (uint32_t o = 0; o < a.nops; ++o) {
    const P2POp& op = a.ops[o];
    if (op.kind != kP2PCopy) continue;
    const uint64_t chunk = L.p2pSlotBytes;
    const uint64_t chunks = (op.bytes + chunk - 1) / chunk;
    for (uint64_t i = lane; i < chunks; i += a.copyLanes) {
      const uint64_t off = i * chunk;
      const uint64_t len = op.bytes - off < chunk ? op.bytes - off : chunk;
      copyBytes(block, op.dst + off, op.src + off, len);
    }
  }
}

// A launch on a failed comm: every output of it all-ones (as poisonOutput does for a collective's),
// grid-wide.
template <int kCap>
__device__ void poisonOutputs(const P2PArgs<kCap>& a) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint32_t o = 0; o < a.nops; ++o) {
    const P2POp& op = a.ops[o];
    if (op.kind == kP2PSend) continue;
    for (size_t i = first; i < op.bytes; i += stride) op.dst[i] = static_cast<char>(0xFF);
  }
}

// The launch: admission as every kernel's (device.cuh: admissionOf), then this block's lane. No
// epoch: a point-to-point launch is not a collective (the comm's other ranks make no launch), so
// it neither reads nor advances LocalState::epoch, and the rebase never meets it. Its eager blocks
// count out as every kernel's (countEagerWarpEnded).
template <int kCap>
__global__ void __launch_bounds__(kP2PThreads, kP2PBlocksPerSM) p2pKernel(const __grid_constant__ P2PArgs<kCap> a) {
  const DeviceArgs& args = a.frame;
  __shared__ int admission;
  waitForPriorGrids();
  if (threadIdx.x == 0) {
    const uint64_t gate = *reinterpret_cast<const volatile unsigned long long*>(&args.local->failed);
    const uint32_t remote = *reinterpret_cast<volatile uint32_t*>(&headerOf(args.window)->remoteFailure);
    const uint64_t watched =
        args.failureWatch != nullptr ? *reinterpret_cast<const volatile uint64_t*>(args.failureWatch) : kNoFailure;
    admission = admissionOf(args, gate, remote, watched);
    warpsLeftOfBlock() = 0;
  }
  __syncthreads();
  // Our successor on the stream may be scheduled now (it still waits for this grid's end before it
  // touches anything: device.cuh, waitForPriorGrids): every block of this launch is resident by
  // here, so the successor's blocks only take what is left. Without it the next launch was
  // scheduled only at this one's end (the collectives' kernels call it as early).
  allowNextGrid();
  if (admission == kAdmitted) {
    const P2PLane lane = a.lanes[blockIdx.x];
    if (lane.kind == kP2PSend) runSendLane(a, lane.peer, lane.channel);
    else if (lane.kind == kP2PRecv) runRecvLane(a, lane.peer, lane.channel);
    else runCopyLane(a, lane.channel);
  } else if (admission == kRefusedFailed) {
    poisonOutputs(a);
  }
  countEagerWarpEnded(args);
}

template <int kCap>
cudaError_t launchWith(const DeviceArgs& frame, const std::vector<P2POp>& ops, int channels, const P2PLane* lanes,
                       int nlanes, uint32_t copyLanes, bool programmatic, cudaStream_t stream) {
  static_assert(sizeof(P2PArgs<kCap>) <= 32764, "kernel parameters beyond CUDA's limit");
  P2PArgs<kCap> a;
  memset(&a, 0, sizeof(a));
  a.frame = frame;
  a.nops = static_cast<uint32_t>(ops.size());
  a.channels = static_cast<uint32_t>(channels);
  a.copyLanes = copyLanes;
  memcpy(a.lanes, lanes, sizeof(P2PLane) * nlanes);
  memcpy(a.ops, ops.data(), sizeof(P2POp) * ops.size());
  void* params[] = {&a};
  return launchKernel(reinterpret_cast<const void*>(&p2pKernel<kCap>), params, nlanes, kP2PThreads, programmatic,
                      stream);
}

// The two parameter sizes (P2PArgs: kCap): a group of up to 32 calls, the common case (torch's
// all_to_all at 8 ranks is 16), and the most a group may hold.
constexpr int kSmallCap = 32;

}  // namespace

int planP2PLanes(const std::vector<P2POp>& ops, int channels, const WindowLayout& L, P2PLane* lanes,
                 uint32_t* copyLanes) {
  uint64_t most[2][kMaxRanks] = {};  // [send, recv][peer]: the most chunks of one call
  uint64_t copyChunks = 0;
  for (const P2POp& op : ops) {
    const uint64_t chunk = op.kind == kP2PCopy ? L.p2pSlotBytes : p2pChunkBytes(op.bytes, channels, L.p2pSlotBytes, L.p2pLLBytes);
    const uint64_t chunks = (op.bytes + chunk - 1) / chunk;
    if (op.kind == kP2PCopy) copyChunks += chunks;
    else if (chunks > most[op.kind][op.peer]) most[op.kind][op.peer] = chunks;
  }
  int n = 0;
  for (int kind = kP2PSend; kind <= kP2PRecv; ++kind)
    for (int p = 0; p < kMaxRanks; ++p) {
      const uint64_t used = most[kind][p] < static_cast<uint64_t>(channels) ? most[kind][p] : channels;
      for (uint64_t c = 0; c < used; ++c)
        lanes[n++] = P2PLane{static_cast<uint8_t>(p), static_cast<uint8_t>(kind), static_cast<uint8_t>(c), 0};
    }
  // Copies to self: a lane per 16 chunks, up to 16 lanes (local HBM copies; the lanes to peers
  // carry the NVLink traffic).
  const uint64_t copies = copyChunks == 0 ? 0 : (copyChunks + 15) / 16 < 16 ? (copyChunks + 15) / 16 : 16;
  for (uint64_t c = 0; c < copies; ++c) lanes[n++] = P2PLane{0, static_cast<uint8_t>(kP2PCopy), static_cast<uint8_t>(c), 0};
  *copyLanes = static_cast<uint32_t>(copies);
  return n;
}

cudaError_t launchP2P(const DeviceArgs& frame, const std::vector<P2POp>& ops, int channels, const P2PLane* lanes,
                      int nlanes, uint32_t copyLanes, bool programmatic, cudaStream_t stream) {
  if (nlanes <= 0 || nlanes > kMaxP2PLanes || ops.size() > static_cast<size_t>(kMaxP2POps) || channels < 1 ||
      static_cast<size_t>(channels) > frame.layout.p2pChannels)
    return cudaErrorInvalidValue;
  if (ops.size() <= static_cast<size_t>(kSmallCap))
    return launchWith<kSmallCap>(frame, ops, channels, lanes, nlanes, copyLanes, programmatic, stream);
  return launchWith<kMaxP2POps>(frame, ops, channels, lanes, nlanes, copyLanes, programmatic, stream);
}

cudaError_t loadP2PKernels() {
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&p2pKernel<kSmallCap>));
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&p2pKernel<kMaxP2POps>));
  if (e == cudaSuccess && attr.maxThreadsPerBlock < kP2PThreads) e = cudaErrorInvalidConfiguration;
  return e;
}

}  // namespace yali
