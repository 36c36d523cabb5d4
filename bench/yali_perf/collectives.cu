// Input generation and result checking kernels, and the AllReduce entry of the collective table.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "collectives.h"
#include "cuda_check.h"

namespace yali_perf {
namespace {

constexpr int kThreadsPerBlock = 256;
// Grid-stride loops: enough blocks to fill any current GPU, few enough to keep atomics cheap.
constexpr size_t kMaxBlocks = 4096;

unsigned BlocksFor(size_t items) {
  size_t blocks = (items + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(blocks, kMaxBlocks)));
}

// ---- Element types ------------------------------------------------------------------------------

template <typename T>
struct Element;

template <>
struct Element<float> {
  __device__ static float FromFloat(float v) { return v; }
  __device__ static double ToDouble(float v) { return v; }
  static constexpr double kEpsilon = 1.0 / (1 << 23);
  static constexpr double kSmallestSubnormal = 1.40129846e-45;
};

template <>
struct Element<__half> {
  __device__ static __half FromFloat(float v) { return __float2half_rn(v); }
  __device__ static double ToDouble(__half v) { return __half2float(v); }
  static constexpr double kEpsilon = 1.0 / (1 << 10);
  static constexpr double kSmallestSubnormal = 5.9604644775390625e-08;  // 2^-24
};

template <>
struct Element<__nv_bfloat16> {
  __device__ static __nv_bfloat16 FromFloat(float v) { return __float2bfloat16_rn(v); }
  __device__ static double ToDouble(__nv_bfloat16 v) { return __bfloat162float(v); }
  static constexpr double kEpsilon = 1.0 / (1 << 7);
  static constexpr double kSmallestSubnormal = 9.18354961579912e-41;  // 2^-133
};

// ---- Deterministic inputs -----------------------------------------------------------------------

// SplitMix64's finalizer: a bijective 64-bit mix, so distinct counters give independent-looking
// values.
__host__ __device__ inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Input element `index` of `rank`, before rounding to the element type. Sum, avg, max and min
// get uniform values in [-1, 1): signs cancel, so a wrong rank order or a missing rank shows.
// Prod gets magnitudes in [0.75, 1.25) with random signs, so that a product over 8 ranks stays
// within [0.1, 6] and fits fp16 without overflow or underflow.
__device__ inline double InputValue(uint64_t seed, int rank, size_t index, int op) {
  uint64_t h = Mix64(seed ^ Mix64((static_cast<uint64_t>(rank) << 48) ^ index));
  double unit = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  if (op == static_cast<int>(RedOp::kProd)) {
    double magnitude = 0.75 + 0.5 * unit;
    return (h & 1) ? -magnitude : magnitude;
  }
  return 2.0 * unit - 1.0;
}

// The value as stored in the buffer: rounded to the element type.
template <typename T>
__device__ inline T StoredInput(uint64_t seed, int rank, size_t index, int op) {
  return Element<T>::FromFloat(static_cast<float>(InputValue(seed, rank, index, op)));
}

template <typename T>
__global__ void FillInputKernel(T* input, size_t count, uint64_t seed, int rank, int op) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    input[i] = StoredInput<T>(seed, rank, i, op);
}

// ---- Checking -----------------------------------------------------------------------------------

// Adds each warp's total to *counter with one atomic.
__device__ inline void WarpAtomicAdd(unsigned long long* counter, unsigned long long value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  if ((threadIdx.x & 31) == 0 && value != 0) atomicAdd(counter, value);
}

// Expected AllReduce element, in float64 over every rank's regenerated input, and the tolerance
// for the output of a library that adds relative error `accumulation_eps` per reduction step:
//   sum, avg: |out - ref| <= (nranks * accumulation_eps + eps_out) * sum_r |x_r|  (/ nranks for avg)
//   prod:     |out - ref| <= (nranks * accumulation_eps + eps_out) * |prod_r x_r|
//   max, min: exact (no arithmetic happens).
// eps_out covers the final rounding of both the output and the reference (each at most half a
// unit in the last place). The smallest subnormal keeps the bound non-zero near 0.
template <typename T>
__global__ void CountWrongAllReduceKernel(const T* output, size_t count, uint64_t seed, int nranks,
                                          int op, double accumulation_eps,
                                          unsigned long long* wrong) {
  const double scale = nranks * accumulation_eps + Element<T>::kEpsilon;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned long long local_wrong = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    double result = 0.0;
    double magnitude = 0.0;
    if (op == static_cast<int>(RedOp::kProd)) result = 1.0;
    for (int r = 0; r < nranks; ++r) {
      double x = Element<T>::ToDouble(StoredInput<T>(seed, r, i, op));
      if (op == static_cast<int>(RedOp::kProd)) {
        result *= x;
      } else if (op == static_cast<int>(RedOp::kMax)) {
        result = r == 0 ? x : fmax(result, x);
      } else if (op == static_cast<int>(RedOp::kMin)) {
        result = r == 0 ? x : fmin(result, x);
      } else {
        result += x;
        magnitude += fabs(x);
      }
    }
    if (op == static_cast<int>(RedOp::kAvg)) {
      result /= nranks;
      magnitude /= nranks;
    }
    if (op == static_cast<int>(RedOp::kProd)) magnitude = fabs(result);
    // Rounded as the library must round its fp32 accumulator into the element type.
    double reference = Element<T>::ToDouble(Element<T>::FromFloat(static_cast<float>(result)));
    double got = Element<T>::ToDouble(output[i]);
    bool ok;
    if (op == static_cast<int>(RedOp::kMax) || op == static_cast<int>(RedOp::kMin)) {
      ok = got == reference;
    } else {
      // `got == reference` first: two equal infinities have a NaN difference.
      ok = got == reference ||
           fabs(got - reference) <= scale * magnitude + Element<T>::kSmallestSubnormal;
    }
    if (!ok) ++local_wrong;  // NaN compares false everywhere above, so it lands here
  }
  WarpAtomicAdd(wrong, local_wrong);
}

// Sum over 16-bit words of Mix64(index, word): addition commutes, so block order and atomics do
// not change the result, while any changed bit or moved word changes it.
__global__ void ChecksumKernel(const uint16_t* words, size_t nwords, unsigned long long* checksum) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned long long local_sum = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nwords;
       i += stride)
    local_sum += Mix64((static_cast<uint64_t>(i) << 16) | words[i]);
  WarpAtomicAdd(checksum, local_sum);
}

// ---- Type dispatch ------------------------------------------------------------------------------

template <typename T>
void FillInputTyped(void* input, const DataSpec& spec, cudaStream_t stream) {
  FillInputKernel<T><<<BlocksFor(spec.count), kThreadsPerBlock, 0, stream>>>(
      static_cast<T*>(input), spec.count, spec.seed, spec.rank, static_cast<int>(spec.op));
  YALI_PERF_CUDA(cudaGetLastError());
}

template <typename T>
void CountWrongAllReduceTyped(const void* output, const DataSpec& spec,
                              unsigned long long* wrong, cudaStream_t stream) {
  CountWrongAllReduceKernel<T><<<BlocksFor(spec.count), kThreadsPerBlock, 0, stream>>>(
      static_cast<const T*>(output), spec.count, spec.seed, spec.nranks,
      static_cast<int>(spec.op), spec.accumulation_eps, wrong);
  YALI_PERF_CUDA(cudaGetLastError());
}

void FillInputAnyType(void* input, const DataSpec& spec, cudaStream_t stream) {
  if (spec.count == 0) return;
  switch (spec.dtype) {
    case DType::kFloat: return FillInputTyped<float>(input, spec, stream);
    case DType::kHalf: return FillInputTyped<__half>(input, spec, stream);
    case DType::kBfloat16: return FillInputTyped<__nv_bfloat16>(input, spec, stream);
  }
}

// ---- AllReduce ----------------------------------------------------------------------------------

size_t AllReduceBufferBytes(size_t count, size_t element_bytes, int nranks) {
  return count * element_bytes;
}

// Each rank sends and receives 2(n-1)/n of the data in a bandwidth-optimal AllReduce.
double AllReduceBusFactor(int nranks) { return 2.0 * (nranks - 1) / nranks; }

void AllReduceCountWrong(const void* output, const DataSpec& spec, unsigned long long* wrong,
                         cudaStream_t stream) {
  if (spec.count == 0) return;
  switch (spec.dtype) {
    case DType::kFloat: return CountWrongAllReduceTyped<float>(output, spec, wrong, stream);
    case DType::kHalf: return CountWrongAllReduceTyped<__half>(output, spec, wrong, stream);
    case DType::kBfloat16:
      return CountWrongAllReduceTyped<__nv_bfloat16>(output, spec, wrong, stream);
  }
}

void AllReduceRun(Backend& backend, int local, const void* send, void* recv, size_t count,
                  DType dtype, RedOp op, cudaStream_t stream) {
  backend.AllReduce(local, send, recv, count, dtype, op, stream);
}

}  // namespace

const Collective kAllReduce = {
    "allreduce",         "2(n-1)/n",          AllReduceBufferBytes, AllReduceBufferBytes,
    AllReduceBusFactor,  FillInputAnyType,    AllReduceCountWrong,  AllReduceRun,
};

void PoisonBuffer(void* buffer, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  YALI_PERF_CUDA(cudaMemsetAsync(buffer, 0xff, bytes, stream));
}

void LaunchChecksum(const void* buffer, size_t bytes, unsigned long long* checksum,
                    cudaStream_t stream) {
  size_t nwords = bytes / 2;
  if (nwords == 0) return;
  ChecksumKernel<<<BlocksFor(nwords), kThreadsPerBlock, 0, stream>>>(
      static_cast<const uint16_t*>(buffer), nwords, checksum);
  YALI_PERF_CUDA(cudaGetLastError());
}

}  // namespace yali_perf
