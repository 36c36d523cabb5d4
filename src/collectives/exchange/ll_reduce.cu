// The reducing LL exchange (ReduceScatter, Reduce): every (type, op) instantiation.
#include "collectives/common/kernel_table.cuh"
#include "collectives/exchange/exchange.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {
struct ExchangeLLReduceKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return exchangeLLKernel<T, kOp, true>; }
};
}  // namespace

KernelFn exchangeLLReduceKernelFor(DataType t, RedOp op) { return lookupKernel<ExchangeLLReduceKernels>(t, op); }

}  // namespace yali
