// Launches one AllReduce kernel as chosen by the selector. Host code, no CUDA C++ needed to use it.
#pragma once

#include <cuda_runtime.h>

#include "collectives/common/device_state.h"
#include "tuning/selector.h"

namespace yali {

// The most threads per block every instantiation of `algo` can launch with (register-bound), on
// the current device. Querying a kernel also loads its module: comm set-up queries every table, so
// that no launch of ours ever loads a module later. Under lazy loading (CUDA_MODULE_LOADING=LAZY,
// CUDA's default) a first launch waits for the device to drain, which is a deadlock when the
// device runs our kernel waiting for a peer whose kernel this thread has yet to launch.
int maxLaunchableThreads(Algo algo);

// `op` is the yaliRedOp_t value (0..4). `programmatic`: launch with programmatic stream
// serialization (compute capability 9.0+), so the kernel may start while the previous one on the
// stream finishes; the kernels wait for it themselves before touching memory.
cudaError_t launchAllReduce(const AlgoChoice& choice, DataType dtype, int op,
                            const DeviceArgs& args, bool programmatic, cudaStream_t stream);

}  // namespace yali
