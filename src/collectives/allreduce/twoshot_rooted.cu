// The two-shot kernel's rooted shapes (twoshot.cuh, "Rooted shapes"): broadcast_twoshot (a scatter
// from the root, then an all-gather: one byte-wise instantiation, as every data-moving algorithm)
// and reduce_twoshot (a reduce-scatter, then a gather to the root: every (type, op)).
#include "collectives/allreduce/twoshot.cuh"
#include "collectives/common/kernel_table.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct ReduceTwoshotKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return twoshotKernel<T, kOp, Gather::kByWrites, Shape::kReduce>; }
};
}  // namespace

// Bytes: one source reduced with kSum is a copy (uint8 widened to its accumulator and back), exact
// for every type's bits.
KernelFn broadcastTwoshotKernelFor(DataType, RedOp) {
  return twoshotKernel<uint8_t, RedOp::kSum, Gather::kByWrites, Shape::kBroadcast>;
}

KernelFn reduceTwoshotKernelFor(DataType t, RedOp op) { return lookupKernel<ReduceTwoshotKernels>(t, op); }

}  // namespace yali
