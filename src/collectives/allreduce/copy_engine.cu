// Copy-engine AllReduce ("ce") for large messages: every byte that crosses NVLink is moved by the
// GPUs' copy engines (cudaMemcpyAsync between windows), and the SMs only reduce, from local memory.
//
// Why: the copy engines move about 390 GB/s per direction with no SM at all, above what SM stores
// carry between two GPUs with both directions busy (343-358 GB/s per direction at 32-132 blocks,
// `yali-hw --blocks`, docs/PERF.md). As built it reached only 153-198 GB/s busBW (docs/PERF.md,
// "Copy engines"), so it is off by default: no staging unless YALI_CE_CHUNK_BYTES is set, and the
// tuning table's ce_min is 0.
//
// The message is cut into rounds of nranks * chunk elements (chunk: AlgoChoice::slotBytes, at most
// WindowLayout::ceChunkBytes); within round j, rank d owns shard d (the same split as two-shot's
// tiles). Round j uses slot s = j % kCeSlots of the staging areas. For each round, on rank r:
//   send    (side stream send[j & 1]) gate: wait until every peer d has reduced the slot's previous
//           use (so its ceRs[s] is free); copy our input's shard d into d's ceRs[s][r] for every
//           peer d; signal: publish arrived[s][r] on every peer.
//   reduce  (the caller's stream, one kernel for all rounds) wait for every peer's arrived[s] and,
//           before overwriting ceAg[s], every peer's freed[s] for the slot's previous use; reduce
//           our input's shard r and the n - 1 staged pieces in rank order 0..n-1 into our output
//           and our ceAg[s]; publish ready[s][r][block] on every peer.
//   read    (side stream read[j & 1]) gate: wait for every owner's ready[s]; copy each owner o's
//           ceAg[s] into our output's shard o; signal: publish freed[s][r] on every owner.
// Each rank reduces only its own shard, so all ranks hold the same bits.
//
// Flags carry slot use numbers (device_state.h, CeFlags), kept in LocalState::ceSlotUses and
// advanced by a one-thread kernel at the end of every launch, after the side streams have joined.
// The gates and signals are one-block kernels on the side streams: a stream's copies start only
// when its gate kernel has returned, and its signal kernel starts only when the copies before it
// have completed, so "copy completed" is what the flag publishes (stream order), and the
// st.release.sys of the flag orders nothing else.
//
// No hang, even if the side streams share one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1): the
// host issues the reduce kernel first and then, round by round, send's gate/copies/signal before
// read's, on every rank. Every wait then depends only on work issued before it (here or on the
// peers, which issue in the same order) or on the already running reduce kernel, so even a fully
// serialized queue makes progress. Every wait is bounded (WaitGuard) like every other kernel's.
//
// In place (recv == send) is safe: the reduce reads and writes only our own shard, element by
// element; a read copy overwrites our shard o of round j only after owner o's ready for round j,
// which needed our send copy of that shard to have completed.
#include "collectives/allreduce/launch.h"
#include "collectives/common/block_ops.cuh"
#include "collectives/common/device.cuh"
#include "collectives/common/tile_split.h"

namespace yali {
namespace {

constexpr int kPhaseCeArrived = 5;  // reduce: waiting for peers' copies into our ceRs
constexpr int kPhaseCeFreed = 6;    // reduce: waiting for peers to finish reading our ceAg
constexpr int kPhaseCeSendGate = 7; // send gate: waiting for a peer to free its ceRs slot
constexpr int kPhaseCeReadGate = 8; // read gate: waiting for peers' reduced shards

constexpr int kGateThreads = 256;

// Round j's geometry in elements, the same on host (copies) and device (reduce): tile j of
// nranks * chunk elements.
YALI_HOST_DEVICE inline TileSplit ceRound(size_t j, size_t count, size_t chunkElems, int n,
                                          size_t elemSize) {
  return tileSplit(j, chunkElems * n, count, n, elemSize);
}

__device__ __forceinline__ CeFlags* ceFlagsOf(char* window, const WindowLayout& L) {
  return reinterpret_cast<CeFlags*>(window + L.ceFlags);
}

// The use number of round j (see CeFlags). ceSlotUses does not change during a launch.
__device__ __forceinline__ uint64_t ceUse(const LocalState* local, size_t j) {
  return *reinterpret_cast<const volatile uint64_t*>(&local->ceSlotUses[j % kCeSlots]) + j / kCeSlots;
}

// One kernel for every round of the launch: block b reduces its part of our shard of each round.
template <typename T, Op kOp>
__global__ void ceReduceKernel(DeviceArgs args) {
  if (commFailed(args)) return;
  __shared__ int failed;
  constexpr size_t kE = 16 / sizeof(T);
  const int n = args.nranks;
  const int me = args.rank;
  const WindowLayout& L = args.layout;
  const size_t chunkElems = args.slotBytes / sizeof(T);
  const size_t rounds = (args.count + chunkElems * n - 1) / (chunkElems * n);
  CeFlags* mine = ceFlagsOf(args.window, L);
  const T* send = static_cast<const T*>(args.send);
  T* recv = static_cast<T*>(args.recv);
  for (size_t j = 0; j < rounds; ++j) {
    const int slot = static_cast<int>(j % kCeSlots);
    const uint64_t use = ceUse(args.local, j);
    const TileSplit rd = ceRound(j, args.count, chunkElems, n, sizeof(T));
    // This block's part of our shard: a 16-byte multiple, so every part starts aligned.
    const size_t shardLen = rd.length(me);
    const size_t part = ((shardLen + gridDim.x - 1) / gridDim.x + kE - 1) / kE * kE;
    const size_t off = min(static_cast<size_t>(blockIdx.x) * part, shardLen);
    const size_t len = min(off + part, shardLen) - off;

    // Warp 0: every sender's copy of this round is in; warp 1: every reader is done with the
    // slot's previous use of our ceAg (use 0 has none).
    if (threadIdx.x == 0) failed = 0;
    __syncthreads();
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    if (lane < n && lane != me) {
      bool ok = true;
      if (warp == 0) ok = waitAtLeast(args, &mine->arrived[slot][lane], use + 1, kPhaseCeArrived);
      else if (warp == 1 && use > 0) ok = waitAtLeast(args, &mine->freed[slot][lane], use, kPhaseCeFreed);
      if (!ok) failed = 1;
    }
    __syncthreads();
    if (failed) return;

    const T* src[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) {
      src[s] = s == me ? send + rd.start + rd.begin(me) + off
                       : reinterpret_cast<const T*>(args.window + L.ceRs +
                                                    (static_cast<size_t>(slot) * n + s) * L.ceChunkBytes) + off;
    }
    T* dst[kMaxRanks] = {};
    dst[0] = recv + rd.start + rd.begin(me) + off;
    dst[1] = reinterpret_cast<T*>(args.window + L.ceAg + static_cast<size_t>(slot) * L.ceChunkBytes) + off;
    reduceElems<T, kOp>(wholeBlock(), dst, 2, src, n, len);

    // Publish after the whole block's writes (and reads of ceRs): bar.sync, then st.release.sys
    // from the publishing thread (cumulative over what the block did; device.cuh).
    __syncthreads();
    const int peer = threadIdx.x;
    if (peer < n && peer != me)
      publish(&ceFlagsOf(args.peerWindows[peer], L)->ready[slot][me][blockIdx.x], use + 1);
  }
}

enum CeGateKind : int { kCeSend = 0, kCeRead = 1 };

struct CeGate {
  int kind;          // CeGateKind: which stream this gate or signal belongs to
  int reduceCtas;    // blocks of every rank's reduce kernel (the same on every rank)
  long long round;   // the round (index within the launch) to wait for or to signal
  int signal;        // 1: publish that `round`'s copies completed; 0: wait before its copies
};

// Gate (signal == 0): send waits until every peer has reduced the slot's previous use (all of the
// peer's blocks: ready >= use); read waits for every owner's reduced shard of the round (ready >=
// use + 1). Signal (signal == 1): the copies before this kernel on its stream have completed;
// publish arrived (send) or freed (read) = use + 1 on every peer.
__global__ void ceGateKernel(DeviceArgs args, CeGate gate) {
  if (commFailed(args)) return;
  const int n = args.nranks;
  const int me = args.rank;
  const int slot = static_cast<int>(gate.round % kCeSlots);
  const uint64_t use = ceUse(args.local, static_cast<size_t>(gate.round));
  if (gate.signal) {
    const int peer = threadIdx.x;
    if (peer < n && peer != me) {
      CeFlags* theirs = ceFlagsOf(args.peerWindows[peer], args.layout);
      publish(gate.kind == kCeSend ? &theirs->arrived[slot][me] : &theirs->freed[slot][me], use + 1);
    }
    return;
  }
  const uint64_t value = gate.kind == kCeSend ? use : use + 1;
  if (value == 0) return;  // the slot's first use: nothing to wait for
  const CeFlags* mine = ceFlagsOf(args.window, args.layout);
  const int flags = n * gate.reduceCtas;
  for (int i = threadIdx.x; i < flags; i += blockDim.x) {
    const int owner = i / gate.reduceCtas;
    if (owner == me) continue;
    if (!waitAtLeast(args, &mine->ready[slot][owner][i % gate.reduceCtas], value,
                     gate.kind == kCeSend ? kPhaseCeSendGate : kPhaseCeReadGate))
      return;
  }
}

// After the side streams have joined: the next launch's rounds continue every slot's use count.
__global__ void ceAdvanceKernel(LocalState* local, unsigned long long rounds) {
  for (int s = 0; s < kCeSlots; ++s)
    local->ceSlotUses[s] += (rounds + kCeSlots - 1 - s) / kCeSlots;  // rounds j < `rounds` with j % K == s
}

#define YALI_CE_ROW(T) \
  { ceReduceKernel<T, Op::kSum>, ceReduceKernel<T, Op::kProd>, ceReduceKernel<T, Op::kMax>, \
    ceReduceKernel<T, Op::kMin>, ceReduceKernel<T, Op::kAvg> }
// Rows: fp16, fp32, bf16 (DataType order); columns: Op order.
const KernelFn kCeReduce[3][5] = {YALI_CE_ROW(__half), YALI_CE_ROW(float), YALI_CE_ROW(__nv_bfloat16)};
#undef YALI_CE_ROW

}  // namespace

int maxCopyEngineThreads() { return maxThreadsOfTable(kCeReduce); }

cudaError_t createCopyEngineStreams(CopyEngineStreams* ce) {
  // Load the gate and advance kernels now. With lazy loading (CUDA_MODULE_LOADING=LAZY, the
  // default), their first launch would load them then, and loading waits for the device's running
  // kernels: our reduce kernel, which waits for the gates. The first launch on every comm timed out
  // that way (2026-11-22). cudaFuncGetAttributes loads a kernel; maxCopyEngineThreads() does the
  // same for the reduce kernels, at comm set-up.
  for (const void* fn : {reinterpret_cast<const void*>(ceGateKernel),
                         reinterpret_cast<const void*>(ceAdvanceKernel)}) {
    cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, fn);
    if (e != cudaSuccess) return e;
  }
  for (cudaStream_t* s : {&ce->send[0], &ce->send[1], &ce->read[0], &ce->read[1]}) {
    cudaError_t e = cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return e;
  }
  for (cudaEvent_t* ev : {&ce->fork, &ce->join[0], &ce->join[1], &ce->join[2], &ce->join[3]}) {
    cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

void destroyCopyEngineStreams(CopyEngineStreams* ce) {
  for (cudaStream_t s : {ce->send[0], ce->send[1], ce->read[0], ce->read[1]})
    if (s) cudaStreamDestroy(s);
  for (cudaEvent_t ev : {ce->fork, ce->join[0], ce->join[1], ce->join[2], ce->join[3]})
    if (ev) cudaEventDestroy(ev);
  *ce = CopyEngineStreams{};
}

cudaError_t launchAllReduceCopyEngine(const AlgoChoice& choice, DataType dtype, int op,
                                      const DeviceArgs& args, const CopyEngineStreams& ce,
                                      cudaStream_t stream) {
#define YALI_CE_TRY(call)              \
  do {                                 \
    cudaError_t e_ = (call);           \
    if (e_ != cudaSuccess) return e_;  \
  } while (0)
  const int n = args.nranks;
  const int me = args.rank;
  const size_t elemSize = dataTypeSize(dtype);
  const size_t chunkElems = choice.slotBytes / elemSize;
  const size_t rounds = (args.count + chunkElems * n - 1) / (chunkElems * n);
  const WindowLayout& L = args.layout;
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  cudaStream_t sides[4] = {ce.send[0], ce.send[1], ce.read[0], ce.read[1]};

  // Fork: the side streams start after everything already on the caller's stream (the input).
  YALI_CE_TRY(cudaEventRecord(ce.fork, stream));
  for (cudaStream_t s : sides) YALI_CE_TRY(cudaStreamWaitEvent(s, ce.fork, 0));

  // The reduce kernel first (see the header: issue order is what rules out a hang).
  DeviceArgs a = args;
  void* reduceParams[] = {&a};
  YALI_CE_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(kCeReduce[static_cast<int>(dtype)][op]),
                               dim3(choice.ctas), dim3(choice.threads), reduceParams, 0, stream));

  auto gateKernel = [&](cudaStream_t s, int kind, size_t j, int signal) {
    CeGate g{kind, choice.ctas, static_cast<long long>(j), signal};
    void* params[] = {&a, &g};
    return cudaLaunchKernel(reinterpret_cast<const void*>(ceGateKernel), dim3(1), dim3(kGateThreads),
                            params, 0, s);
  };
  for (size_t j = 0; j < rounds; ++j) {
    const TileSplit rd = ceRound(j, args.count, chunkElems, n, elemSize);
    const size_t slot = j % kCeSlots;
    cudaStream_t sendStream = ce.send[j & 1];
    cudaStream_t readStream = ce.read[j & 1];
    YALI_CE_TRY(gateKernel(sendStream, kCeSend, j, 0));
    for (int i = 1; i < n; ++i) {
      const int d = (me + i) % n;  // start with the next rank: spreads the load over peers
      const size_t bytes = rd.length(d) * elemSize;
      if (bytes == 0) continue;
      char* to = args.peerWindows[d] + L.ceRs + (slot * n + me) * L.ceChunkBytes;
      YALI_CE_TRY(cudaMemcpyAsync(to, send + (rd.start + rd.begin(d)) * elemSize, bytes,
                                  cudaMemcpyDefault, sendStream));
    }
    YALI_CE_TRY(gateKernel(sendStream, kCeSend, j, 1));
    YALI_CE_TRY(gateKernel(readStream, kCeRead, j, 0));
    for (int i = 1; i < n; ++i) {
      const int o = (me + n - i) % n;  // the previous rank first: it is the one that sent to us first
      const size_t bytes = rd.length(o) * elemSize;
      if (bytes == 0) continue;
      const char* from = args.peerWindows[o] + L.ceAg + slot * L.ceChunkBytes;
      YALI_CE_TRY(cudaMemcpyAsync(recv + (rd.start + rd.begin(o)) * elemSize, from, bytes,
                                  cudaMemcpyDefault, readStream));
    }
    YALI_CE_TRY(gateKernel(readStream, kCeRead, j, 1));
  }

  // Join, then advance the slot use counts for the next launch.
  for (int i = 0; i < 4; ++i) {
    YALI_CE_TRY(cudaEventRecord(ce.join[i], sides[i]));
    YALI_CE_TRY(cudaStreamWaitEvent(stream, ce.join[i], 0));
  }
  LocalState* local = args.local;
  unsigned long long advance = rounds;
  void* advanceParams[] = {&local, &advance};
  return cudaLaunchKernel(reinterpret_cast<const void*>(ceAdvanceKernel), dim3(1), dim3(1),
                          advanceParams, 0, stream);
#undef YALI_CE_TRY
}

}  // namespace yali
