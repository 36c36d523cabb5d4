// Every (type, op) instantiation of two-shot AllReduce gathering into registered outputs
// (twoshot_direct). One file per variant, so that a parallel build compiles them side by side.
#include "collectives/allreduce/twoshot.cuh"
#include "collectives/common/kernel_table.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct TwoshotDirectKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return twoshotKernel<T, kOp, Gather::kIntoOutputs>; }
};
}  // namespace

KernelFn twoshotDirectKernelFor(DataType t, RedOp op) { return lookupKernel<TwoshotDirectKernels>(t, op); }

}  // namespace yali
