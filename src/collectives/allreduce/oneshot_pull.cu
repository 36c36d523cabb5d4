// Every (type, op) instantiation of one-shot pull AllReduce.
#include "collectives/allreduce/oneshot_pull.cuh"
#include "collectives/common/kernel_table.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct OneshotPullKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return oneshotPullKernel<T, kOp>; }
};
}  // namespace

KernelFn oneshotPullKernelFor(DataType t, RedOp op) { return lookupKernel<OneshotPullKernels>(t, op); }

}  // namespace yali
