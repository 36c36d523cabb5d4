// Launches one AllReduce kernel as chosen by the selector. Host code, no CUDA C++ needed to use it.
#pragma once

#include <cuda_runtime.h>

#include "collectives/common/device_state.h"
#include "tuning/selector.h"

namespace yali {

// The most threads per block every instantiation of `algo` can launch with (register-bound), on
// the current device. Querying a kernel also loads it (see createCopyEngineStreams).
int maxLaunchableThreads(Algo algo);

// A kernel table, rows by data type (fp16, fp32, bf16), columns by op; and the most threads per
// block all of its kernels can launch with, on the current device.
using KernelFn = void (*)(DeviceArgs);
int maxThreadsOfTable(const KernelFn (*table)[5]);

// `op` is the yaliRedOp_t value (0..4). `programmatic`: launch with programmatic stream
// serialization (compute capability 9.0+), so the kernel may start while the previous one on the
// stream finishes; the kernels wait for it themselves before touching memory.
cudaError_t launchAllReduce(const AlgoChoice& choice, DataType dtype, int op,
                            const DeviceArgs& args, bool programmatic, cudaStream_t stream);

// ---- Copy-engine AllReduce (copy_engine.cu) ----------------------------------------------------

// The side streams and events a comm keeps for the copy-engine algorithm: two streams that send
// (alternate rounds), two that read, the fork event on the caller's stream and one join event per
// side stream.
struct CopyEngineStreams {
  cudaStream_t send[2] = {};
  cudaStream_t read[2] = {};
  cudaEvent_t fork = nullptr;
  cudaEvent_t join[4] = {};
};

cudaError_t createCopyEngineStreams(CopyEngineStreams* ce);  // on the current device
void destroyCopyEngineStreams(CopyEngineStreams* ce);

// The most threads per block its reduce kernel can launch with, on the current device.
int maxCopyEngineThreads();

// Enqueues one copy-engine AllReduce (choice.algo == Algo::kCopyEngine): a fork onto the comm's
// side streams, the reduce kernel on `stream`, per round a gate kernel, the copies and a signal
// kernel on the side streams, the join back onto `stream`. Works under stream capture.
cudaError_t launchAllReduceCopyEngine(const AlgoChoice& choice, DataType dtype, int op,
                                      const DeviceArgs& args, const CopyEngineStreams& ce,
                                      cudaStream_t stream);

}  // namespace yali
