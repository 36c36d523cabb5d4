// Point-to-point transfers: the kernel and its host-side plan (p2p.h has the protocol).
#include "collectives/p2p/p2p.h"

#include <string.h>

#include "collectives/common/block_ops.cuh"
#include "collectives/common/device.cuh"

namespace yali {
namespace {

constexpr uint64_t kNoFailure = 0;

// Chunks of a call of `bytes`, `slot` bytes each.
__host__ __device__ __forceinline__ uint64_t chunksOf(uint64_t bytes, uint64_t slot) { return (bytes + slot - 1) / slot; }

// Where slot place k of ring (sender, channel) lies in `window` (the receiver's).
__device__ __forceinline__ char* slotOf(char* window, const WindowLayout& L, int sender, int channel, uint64_t k) {
  return window + L.p2pRing + ((static_cast<size_t>(sender) * L.p2pChannels + channel) * kP2PSlots + k) * L.p2pSlotStride;
}
__device__ __forceinline__ P2PSlotFlag* flagOf(char* window, const WindowLayout& L, int sender, int channel, uint64_t k) {
  return reinterpret_cast<P2PSlotFlag*>(window + L.p2pFlags) + (static_cast<size_t>(sender) * kMaxP2PChannels + channel) * kP2PSlots + k;
}
__device__ __forceinline__ uint64_t* creditOf(char* window, const WindowLayout& L, int receiver, int channel) {
  return reinterpret_cast<uint64_t*>(window + L.p2pCredits) + static_cast<size_t>(receiver) * kMaxP2PChannels + channel;
}

// Every send of the launch to `peer`, chunks on `channel`, pushed into the peer's ring (p2p.h: the
// sender's three steps). Returns with the ring's slot count advanced; stops at a failed wait.
template <int kCap>
__device__ __noinline__ void runSendLane(const P2PArgs<kCap>& a, int peer, int channel) {
  const DeviceArgs& args = a.frame;
  const WindowLayout& L = args.layout;
  const Team block = wholeBlock();
  __shared__ int stop;
  uint64_t* seqWord = &args.local->p2pSent[peer][channel];
  uint64_t seq = *seqWord;  // every thread reads it; thread 0 writes it back after the last barrier
  const uint64_t* credit = creditOf(args.window, L, peer, channel);
  bool failed = false;
  for (uint32_t o = 0; o < a.nops && !failed; ++o) {
    const P2POp& op = a.ops[o];
    if (op.kind != kP2PSend || op.peer != peer) continue;
    const uint64_t chunks = chunksOf(op.bytes, L.p2pSlotBytes);
    for (uint64_t i = channel; i < chunks; i += a.channels, ++seq) {
      const uint64_t k = seq % kP2PSlots;
      if (threadIdx.x == 0) {
        // The place's previous slot (seq - kP2PSlots) consumed: its credit is seq - kP2PSlots + 1.
        stop = seq >= kP2PSlots && !waitAtLeast(args, credit, seq - kP2PSlots + 1, kPhaseP2PCredit);
      }
      __syncthreads();
      if (stop) {
        failed = true;
        break;
      }
      const uint64_t off = i * L.p2pSlotBytes;
      const uint64_t len = op.bytes - off < L.p2pSlotBytes ? op.bytes - off : L.p2pSlotBytes;
      const char* src = op.src + off;
      const uint64_t skew = reinterpret_cast<uintptr_t>(src) & 15;
      copyBytes(block, slotOf(args.peerWindows[peer], L, args.rank, channel, k) + skew, src, len);
      __syncthreads();  // the block's stores before thread 0's release
      if (threadIdx.x == 0) {
        P2PSlotFlag* flag = flagOf(args.peerWindows[peer], L, args.rank, channel, k);
        *reinterpret_cast<volatile uint64_t*>(&flag->shape) = op.bytes << 4 | skew;
        publish(&flag->ready, seq + 1);
      }
    }
  }
  __syncthreads();  // every thread read *seqWord before it changes
  if (threadIdx.x == 0 && !failed) *seqWord = seq;
}

// Every receive of the launch from `peer`, chunks on `channel`, copied out of our ring and credited
// (p2p.h: the receiver's steps).
template <int kCap>
__device__ __noinline__ void runRecvLane(const P2PArgs<kCap>& a, int peer, int channel) {
  const DeviceArgs& args = a.frame;
  const WindowLayout& L = args.layout;
  const Team block = wholeBlock();
  __shared__ int stop;
  __shared__ uint64_t skewOfSlot;
  uint64_t* seqWord = &args.local->p2pReceived[peer][channel];
  uint64_t seq = *seqWord;
  uint64_t* credit = creditOf(args.peerWindows[peer], L, args.rank, channel);
  bool failed = false;
  for (uint32_t o = 0; o < a.nops && !failed; ++o) {
    const P2POp& op = a.ops[o];
    if (op.kind != kP2PRecv || op.peer != peer) continue;
    const uint64_t chunks = chunksOf(op.bytes, L.p2pSlotBytes);
    for (uint64_t i = channel; i < chunks; i += a.channels, ++seq) {
      const uint64_t k = seq % kP2PSlots;
      if (threadIdx.x == 0) {
        P2PSlotFlag* flag = flagOf(args.window, L, peer, channel, k);
        stop = !waitAtLeast(args, &flag->ready, seq + 1, kPhaseP2PSlot);
        if (!stop) {
          const uint64_t shape = *reinterpret_cast<volatile uint64_t*>(&flag->shape);
          if (shape >> 4 != op.bytes) {
            // The sender's call is not ours: nothing of it is copied; both ranks fail (the sender's
            // waits for our credit end when recordFailure tells it).
            recordFailure(args, kFailP2PBytes, kPhaseP2PBytes, peer);  // origin: the sender, for the message
            stop = 1;
          }
          skewOfSlot = shape & 15;
        }
      }
      __syncthreads();
      if (stop) {
        failed = true;
        break;
      }
      const uint64_t off = i * L.p2pSlotBytes;
      const uint64_t len = op.bytes - off < L.p2pSlotBytes ? op.bytes - off : L.p2pSlotBytes;
      copyBytes(block, op.dst + off, slotOf(args.window, L, peer, channel, k) + skewOfSlot, len);
      __syncthreads();  // the block's loads of the slot before the credit frees it
      if (threadIdx.x == 0) publish(credit, seq + 1);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && !failed) *seqWord = seq;
}

// This lane's share of every copy to self: chunks lane, lane + lanes, ...
template <int kCap>
__device__ __noinline__ void runCopyLane(const P2PArgs<kCap>& a, int lane) {
  const WindowLayout& L = a.frame.layout;
  const Team block = wholeBlock();
  for (uint32_t o = 0; o < a.nops; ++o) {
    const P2POp& op = a.ops[o];
    if (op.kind != kP2PCopy) continue;
    const uint64_t chunks = chunksOf(op.bytes, L.p2pSlotBytes);
    for (uint64_t i = lane; i < chunks; i += a.copyLanes) {
      const uint64_t off = i * L.p2pSlotBytes;
      const uint64_t len = op.bytes - off < L.p2pSlotBytes ? op.bytes - off : L.p2pSlotBytes;
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
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(nlanes);
  config.blockDim = dim3(kP2PThreads);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(&p2pKernel<kCap>), params);
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
    const uint64_t chunks = chunksOf(op.bytes, L.p2pSlotBytes);
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
