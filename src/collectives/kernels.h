// The kernel lookups that the registry's rows (registry.cc) point at, one per kernel file. Each
// returns its instantiation for (type, op), or null where the pair is not supported; the
// data-moving ones ignore both and return their one byte-wise kernel.
#pragma once

#include "collectives/registry.h"

namespace yali {

KernelFn oneshotLLKernelFor(DataType t, RedOp op);       // allreduce/oneshot_ll.cu
KernelFn oneshotPullKernelFor(DataType t, RedOp op);     // allreduce/oneshot_pull.cu
KernelFn twoshotKernelFor(DataType t, RedOp op);         // allreduce/twoshot.cu (by reads)
KernelFn twoshotPushKernelFor(DataType t, RedOp op);     // allreduce/twoshot_push.cu
KernelFn twoshotDirectKernelFor(DataType t, RedOp op);   // allreduce/twoshot_direct.cu
KernelFn broadcastTwoshotKernelFor(DataType t, RedOp op);  // allreduce/twoshot_rooted.cu (byte-wise)
KernelFn reduceTwoshotKernelFor(DataType t, RedOp op);     // allreduce/twoshot_rooted.cu
KernelFn exchangeLLReduceKernelFor(DataType t, RedOp op);      // exchange/ll_reduce.cu
KernelFn exchangeLLCopyKernelFor(DataType t, RedOp op);        // exchange/copy.cu
KernelFn exchangeStagedReduceKernelFor(DataType t, RedOp op);  // exchange/staged_reduce.cu
KernelFn exchangeStagedCopyKernelFor(DataType t, RedOp op);    // exchange/copy.cu
KernelFn exchangeDirectCopyKernelFor(DataType t, RedOp op);    // exchange/copy.cu
KernelFn exchangePullReduceKernelFor(DataType t, RedOp op);    // exchange/pull_reduce.cu
KernelFn alltoallvKernelFor(DataType t, RedOp op);             // exchange/alltoallv.cu

}  // namespace yali
