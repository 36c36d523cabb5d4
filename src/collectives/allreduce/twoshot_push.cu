// Every (type, op) instantiation of two-shot AllReduce gathering by NVLink writes (twoshot_push).
// One file per variant, so that a parallel build compiles them side by side.
#include "collectives/allreduce/twoshot.cuh"
#include "collectives/common/kernel_table.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct TwoshotPushKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return twoshotKernel<T, kOp, Gather::kByWrites>; }
};
}  // namespace

KernelFn twoshotPushKernelFor(DataType t, RedOp op) { return lookupKernel<TwoshotPushKernels>(t, op); }

}  // namespace yali
