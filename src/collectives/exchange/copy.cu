// The data-moving exchanges (AllGather, Broadcast, Gather, Scatter, AlltoAll): one byte-wise kernel
// each, whatever the element type (every piece is whole elements, so offsets stay aligned to the
// type; 16-byte vectors wherever both ends allow them).
#include "collectives/exchange/exchange.cuh"
#include "collectives/kernels.h"

namespace yali {

__global__ void __launch_bounds__(512) exchangeDirectKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<1>(args, [&](const LaunchInfo& info) { exchangeDirect(args, info); });
}

KernelFn exchangeLLCopyKernelFor(DataType, RedOp) { return exchangeLLKernel<uint8_t, RedOp::kSum, false>; }
KernelFn exchangeStagedCopyKernelFor(DataType, RedOp) { return exchangeStagedKernel<uint8_t, RedOp::kSum, false>; }
KernelFn exchangeDirectCopyKernelFor(DataType, RedOp) { return exchangeDirectKernel; }

}  // namespace yali
