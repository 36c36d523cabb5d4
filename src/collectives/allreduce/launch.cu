// Host-side dispatch of the AllReduce kernels: one table of instantiations per algorithm,
// indexed by data type and reduction op (3 x 5 each, nothing else is templated).
#include "collectives/allreduce/launch.h"

#include "collectives/allreduce/direct.cuh"
#include "collectives/allreduce/oneshot_ll.cuh"
#include "collectives/allreduce/oneshot_pull.cuh"
#include "collectives/allreduce/twoshot.cuh"

namespace yali {
namespace {

using KernelFn = void (*)(DeviceArgs);

// Rows: fp16, fp32, bf16 (DataType order); columns: Op order.
#define YALI_KERNEL_ROW(KERNEL, T)                                                             \
  {                                                                                            \
    KERNEL<T, Op::kSum>, KERNEL<T, Op::kProd>, KERNEL<T, Op::kMax>, KERNEL<T, Op::kMin>,      \
        KERNEL<T, Op::kAvg>                                                                    \
  }

const KernelFn kOneshotLL[3][5] = {YALI_KERNEL_ROW(oneshotLLKernel, __half),
                                   YALI_KERNEL_ROW(oneshotLLKernel, float),
                                   YALI_KERNEL_ROW(oneshotLLKernel, __nv_bfloat16)};
const KernelFn kOneshotPull[3][5] = {YALI_KERNEL_ROW(oneshotPullKernel, __half),
                                     YALI_KERNEL_ROW(oneshotPullKernel, float),
                                     YALI_KERNEL_ROW(oneshotPullKernel, __nv_bfloat16)};
template <typename T, Op kOp>
constexpr KernelFn twoshotPull = twoshotKernel<T, kOp, Gather::kByReads>;
template <typename T, Op kOp>
constexpr KernelFn twoshotPush = twoshotKernel<T, kOp, Gather::kByWrites>;
template <typename T, Op kOp>
constexpr KernelFn twoshotDirect = twoshotKernel<T, kOp, Gather::kIntoOutputs>;
const KernelFn kTwoshot[3][5] = {YALI_KERNEL_ROW(twoshotPull, __half),
                                 YALI_KERNEL_ROW(twoshotPull, float),
                                 YALI_KERNEL_ROW(twoshotPull, __nv_bfloat16)};
const KernelFn kTwoshotPush[3][5] = {YALI_KERNEL_ROW(twoshotPush, __half),
                                     YALI_KERNEL_ROW(twoshotPush, float),
                                     YALI_KERNEL_ROW(twoshotPush, __nv_bfloat16)};
const KernelFn kTwoshotDirect[3][5] = {YALI_KERNEL_ROW(twoshotDirect, __half),
                                       YALI_KERNEL_ROW(twoshotDirect, float),
                                       YALI_KERNEL_ROW(twoshotDirect, __nv_bfloat16)};
const KernelFn kDirect[3][5] = {YALI_KERNEL_ROW(directKernel, __half),
                                YALI_KERNEL_ROW(directKernel, float),
                                YALI_KERNEL_ROW(directKernel, __nv_bfloat16)};
#undef YALI_KERNEL_ROW

const KernelFn (*kernelTable(Algo algo))[5] {
  switch (algo) {
    case Algo::kOneshotLL: return kOneshotLL;
    case Algo::kTwoshot: return kTwoshot;
    case Algo::kTwoshotPush: return kTwoshotPush;
    case Algo::kOneshotPull: return kOneshotPull;
    case Algo::kDirect: return kDirect;
    case Algo::kTwoshotDirect: return kTwoshotDirect;
  }
  return nullptr;
}

// The most threads per block all of a table's kernels can launch with, on the current device.
int maxThreadsOfTable(const KernelFn (*table)[5]) {
  int limit = 1024;
  for (int row = 0; row < 3; ++row) {
    for (int op = 0; op < 5; ++op) {
      cudaFuncAttributes attr;
      if (cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(table[row][op])) == cudaSuccess)
        limit = attr.maxThreadsPerBlock < limit ? attr.maxThreadsPerBlock : limit;
    }
  }
  cudaGetLastError();
  return limit / 32 * 32;
}

}  // namespace

int maxLaunchableThreads(Algo algo) { return maxThreadsOfTable(kernelTable(algo)); }

cudaError_t launchAllReduce(const AlgoChoice& choice, DataType dtype, int op,
                            const DeviceArgs& args, bool programmatic, cudaStream_t stream) {
  const int row = static_cast<int>(dtype);
  const KernelFn(*table)[5] = kernelTable(choice.algo);
  if (table == nullptr) return cudaErrorInvalidValue;
  const KernelFn fn = table[row][op];
  DeviceArgs a = args;
  void* params[] = {&a};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(choice.ctas);
  config.blockDim = dim3(choice.threads);
  config.stream = stream;
  // Programmatic stream serialization (Hopper and newer): see waitForPriorGrids() in device.cuh.
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(fn), params);
}

}  // namespace yali
