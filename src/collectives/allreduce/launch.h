// Launches one AllReduce kernel as chosen by the selector. Host code, no CUDA C++ needed to use it.
#pragma once

#include <cuda_runtime.h>

#include "collectives/common/device_state.h"
#include "tuning/selector.h"

namespace yali {

// `op` is the yaliRedOp_t value (0..4); `args` is complete but for nothing the kernel fills.
cudaError_t launchAllReduce(const AlgoChoice& choice, DataType dtype, int op,
                            const DeviceArgs& args, cudaStream_t stream);

}  // namespace yali
