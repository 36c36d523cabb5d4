// Every (type, op) instantiation of one-shot LL AllReduce.
#include "collectives/allreduce/oneshot_ll.cuh"
#include "collectives/common/kernel_table.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct OneshotLLKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return oneshotLLKernel<T, kOp>; }
};
}  // namespace

KernelFn oneshotLLKernelFor(DataType t, RedOp op) { return lookupKernel<OneshotLLKernels>(t, op); }

}  // namespace yali
