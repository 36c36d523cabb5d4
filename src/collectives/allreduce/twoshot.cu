// Every (type, op) instantiation of two-shot AllReduce gathering by NVLink reads (twoshot). One
// file per variant, so that a parallel build compiles them side by side.
#include "collectives/allreduce/twoshot.cuh"
#include "collectives/common/kernel_table.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct TwoshotKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return twoshotKernel<T, kOp, Gather::kByReads>; }
};
}  // namespace

KernelFn twoshotKernelFor(DataType t, RedOp op) { return lookupKernel<TwoshotKernels>(t, op); }

}  // namespace yali
