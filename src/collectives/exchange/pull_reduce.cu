// The pull exchange (ReduceScatter and Reduce on registered inputs: reducescatter_pull, reduce_pull,
// one kernel for both): every (type, op) instantiation.
#include "collectives/common/kernel_table.cuh"
#include "collectives/exchange/exchange.cuh"
#include "collectives/kernels.h"

namespace yali {
namespace {

template <typename T, RedOp kOp>
__global__ void __launch_bounds__(512) exchangePullKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<1>(args, [&](const LaunchInfo& info) { exchangePull<T, kOp>(args, info); });
}

struct ExchangePullReduceKernels {
  template <typename T, RedOp kOp>
  static constexpr KernelFn get() { return exchangePullKernel<T, kOp>; }
};

}  // namespace

KernelFn exchangePullReduceKernelFor(DataType t, RedOp op) { return lookupKernel<ExchangePullReduceKernels>(t, op); }

}  // namespace yali
