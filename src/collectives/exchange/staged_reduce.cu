// The reducing Staged exchange (ReduceScatter, Reduce): every (type, op) instantiation.
#include "collectives/common/kernel_table.cuh"
#include "collectives/exchange/exchange.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct ExchangeStagedReduceKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return exchangeStagedKernel<T, kOp, true>; }
};
}  // namespace

KernelFn exchangeStagedReduceKernelFor(DataType t, RedOp op) { return lookupKernel<ExchangeStagedReduceKernels>(t, op); }

}  // namespace yali
