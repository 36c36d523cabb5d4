// Device-side building blocks shared by every collective kernel: memory-ordering primitives,
// bounded waits, 16-byte vectors and the reduction operators.
//
// Memory-ordering vocabulary used throughout (PTX memory model, scope .sys because the peer GPUs
// read and write our memory over NVLink):
//   * publish(flag, v)   - st.release.sys: every write this thread made (and, through the
//                          preceding __syncthreads(), every write its block made) is visible to
//                          any thread that later observes flag >= v with an acquire load.
//   * observe(flag)      - ld.acquire.sys: after it returns v, writes published before v are
//                          visible to this thread and, after a following __syncthreads(), to its
//                          block.
//   * Data written by another GPU is read with ld.global.cg (L2 only, never a stale L1 line): an
//     L1 line filled earlier in the same kernel could otherwise hold the previous round's bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "collectives/common/device_state.h"

namespace yali {

// ---- Ordering primitives ------------------------------------------------------------------------

__device__ __forceinline__ void publish(uint64_t* flag, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(value) : "memory");
}

__device__ __forceinline__ uint64_t observe(const uint64_t* flag) {
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(flag) : "memory");
  return value;
}

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Relaxed volatile 16-byte access, used for LL packets whose flags make them self-validating.
__device__ __forceinline__ void storeVolatile16(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ uint4 loadVolatile16(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// ---- Bounded waits ------------------------------------------------------------------------------

// Records that this launch failed (DeviceFailure `code`, in wait phase `phase`) where the host reads
// it, and marks the comm failed so that every later wait and launch gives up at once. The first
// failure wins; the host reads these words without synchronizing.
__device__ inline void recordFailure(const DeviceArgs& args, int code, int phase) {
  if (atomicCAS(&args.host->failure, 0, code) == 0) {
    args.host->failurePhase = phase;
    args.host->failureBlock = blockIdx.x;
    args.host->failureEpoch = args.epochHint;
  }
  atomicExch(&args.local->failed, 1);
  __threadfence_system();
}

// Every spin loop on the device goes through a WaitGuard: it turns "the peer never came" into an
// error the host can read instead of a hang. It checks, every kSpinsPerCheck iterations,
//   1. the deadline (DeviceArgs::timeoutNs from the wait's start),
//   2. the comm's local failure word (another block of ours or an earlier launch already failed),
//   3. our window's abortedByPeer word (a peer's yaliCommAbort),
// and every kChecksPerHostCheck checks also
//   4. the host-mapped abort word (yaliCommAbort on this rank). That read crosses PCIe; with
//      thousands of threads waiting at once it must stay rare (about every 16K spins).
// On failure it records the error (recordFailure) and every later check returns false.
struct WaitGuard {
  static constexpr int kSpinsPerCheck = 256;
  static constexpr int kChecksPerHostCheck = 64;
  const DeviceArgs& args;
  uint64_t deadline;
  int spins = 0;
  int checks = 0;

  __device__ explicit WaitGuard(const DeviceArgs& a) : args(a) {
    deadline = globalTimerNs() + a.timeoutNs;
  }

  // Returns false once the wait must be abandoned.
  __device__ __forceinline__ bool keepWaiting(int phase) {
    if (++spins < kSpinsPerCheck) return true;
    spins = 0;
    if (*reinterpret_cast<volatile int*>(&args.local->failed) != 0) return false;
    if (reinterpret_cast<volatile WindowHeader*>(args.window)->abortedByPeer != 0) {
      recordFailure(args, kFailRemoteAbort, phase);
      return false;
    }
    if (++checks % kChecksPerHostCheck == 0 &&
        *reinterpret_cast<volatile int*>(&args.host->abortRequested) != 0) {
      recordFailure(args, kFailAborted, phase);
      return false;
    }
    if (globalTimerNs() > deadline) {
      recordFailure(args, kFailTimeout, phase);
      return false;
    }
    return true;
  }
};

// True when this launch must not run (an earlier launch on this comm failed). Graph replays reach
// the device without passing through the host API, so kernels check this themselves.
__device__ __forceinline__ bool commFailed(const DeviceArgs& args) {
  return *reinterpret_cast<volatile int*>(&args.local->failed) != 0;
}

// ---- Programmatic dependent launch ---------------------------------------------------------------

// Our kernels are launched with programmatic stream serialization (launch.cu), so the next one on
// the stream can be scheduled while this one is still running; that hides most of the gap between
// back-to-back launches. Correctness stays with stream order: a kernel calls waitForPriorGrids()
// before touching anything, which returns only once every prior grid on the stream has completed
// and its memory is visible. allowNextGrid() lets our successor be scheduled early; it changes
// nothing about what that successor may see.
__device__ __forceinline__ void waitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allowNextGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- Launch epoch ---------------------------------------------------------------------------------

// Every launch on a comm gets the next epoch without the host passing it in (a captured graph
// replays the same arguments each time). Thread 0 of each block reads LocalState::epoch when the
// block starts (readEpoch; the block takes it from shared memory) and counts the block in
// `epochReaders` when its own work is done (retireEpoch); the last block of the grid to retire
// advances the epoch for the next launch. Each block's read precedes its retirement in thread 0's
// program order (fence between), and the advance follows the last retirement, so no block of this
// launch can read the advanced value; the next launch on the stream starts after this one ends.
// Retiring at the end keeps the atomic off the latency-critical start, and needs no barrier, so a
// thread that abandoned a failed wait cannot hold it up.
__device__ __forceinline__ uint64_t readEpoch(LocalState* local, uint64_t* sharedEpochSlot) {
  if (threadIdx.x == 0) *sharedEpochSlot = *reinterpret_cast<volatile uint64_t*>(&local->epoch);
  __syncthreads();
  return *sharedEpochSlot;
}

// The start of every single-kernel collective: waits for the previous grid on the stream, gives
// up when the comm has failed (false: the kernel returns at once), and reads this launch's epoch.
__device__ __forceinline__ bool startLaunch(const DeviceArgs& args, uint64_t* epoch) {
  __shared__ uint64_t epochSlot;
  waitForPriorGrids();
  if (commFailed(args)) return false;
  *epoch = readEpoch(args.local, &epochSlot);
  return true;
}

__device__ __forceinline__ void retireEpoch(LocalState* local, uint64_t epoch) {
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned retired = atomicAdd(&local->epochReaders, 1u);
    if (retired == gridDim.x - 1) {
      __threadfence();
      local->epochReaders = 0;
      *reinterpret_cast<volatile uint64_t*>(&local->epoch) = epoch + 1;
    }
  }
}

// ---- Element types and reduction ------------------------------------------------------------------

template <typename T>
struct ElemTraits;
template <>
struct ElemTraits<float> {
  __device__ static float toFloat(float v) { return v; }
  __device__ static float fromFloat(float v) { return v; }
};
template <>
struct ElemTraits<__half> {
  __device__ static float toFloat(__half v) { return __half2float(v); }
  __device__ static __half fromFloat(float v) { return __float2half_rn(v); }
};
template <>
struct ElemTraits<__nv_bfloat16> {
  __device__ static float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 fromFloat(float v) { return __float2bfloat16_rn(v); }
};

// Reduction operators act on fp32 accumulators (fp16/bf16 widen first). Avg sums, and the
// division by nranks happens once in finish().
enum class Op : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

template <Op kOp>
struct Reducer {
  __device__ static float combine(float a, float b) {
    if constexpr (kOp == Op::kSum || kOp == Op::kAvg) return a + b;
    if constexpr (kOp == Op::kProd) return a * b;
    if constexpr (kOp == Op::kMax) return fmaxf(a, b);
    if constexpr (kOp == Op::kMin) return fminf(a, b);
  }
  __device__ static float finish(float a, int nranks) {
    if constexpr (kOp == Op::kAvg) return a / static_cast<float>(nranks);
    return a;
  }
};

// Loads element i of up to kMaxRanks sources (only the first n are read) and reduces them in
// rank order 0..n-1 in fp32. Fully unrolled over kMaxRanks so that the n loads are all in flight
// before the first add, and the per-source arrays stay in registers.
template <typename T, Op kOp, typename Vec>
__device__ __forceinline__ Vec reduceSources(const Vec* const* src, size_t i, int n) {
  constexpr int kE = sizeof(Vec) / sizeof(T);
  Vec v[kMaxRanks];
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {
    if (r < n) v[r] = __ldcg(src[r] + i);  // L2 only: peers wrote some of these
  }
  float acc[kE];
  const T* x0 = reinterpret_cast<const T*>(&v[0]);
#pragma unroll
  for (int e = 0; e < kE; ++e) acc[e] = ElemTraits<T>::toFloat(x0[e]);
#pragma unroll
  for (int r = 1; r < kMaxRanks; ++r) {
    if (r < n) {
      const T* x = reinterpret_cast<const T*>(&v[r]);
#pragma unroll
      for (int e = 0; e < kE; ++e) acc[e] = Reducer<kOp>::combine(acc[e], ElemTraits<T>::toFloat(x[e]));
    }
  }
  Vec out;
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int e = 0; e < kE; ++e) o[e] = ElemTraits<T>::fromFloat(Reducer<kOp>::finish(acc[e], n));
  return out;
}

}  // namespace yali
