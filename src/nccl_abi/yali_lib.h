// libyali and the CUDA runtime, opened on the first call that needs them instead of when
// libyali-nccl is loaded.
//
// Why not link them: LD_PRELOAD loads libyali-nccl, and everything it needs, before the program has
// loaded anything. A libcudart.so.N needed then is whichever the loader finds first (the system's),
// and the program's own (torch's pip copy, found through its RPATH, often a newer release) would be
// shadowed by it, matched by soname; where the loader finds none (a pip-only environment), the
// preload is dropped altogether. Opened later (the first ncclGroupStart or communicator), libyali's
// libcudart.so.N resolves to the one the program has already loaded, and programs whose
// communicators never get YALI never load it.
//
// Where libyali is looked for: $YALI_LIBRARY (the Python package's variable, the same meaning);
// else its file name through libyali-nccl's RUNPATH ($ORIGIN, as installed and in the Python
// package; libyali's directory in the build tree).
#pragma once

#include <type_traits>

#include <cuda_runtime.h>

#include "yali/yali.h"

namespace yali::nccl_abi {

// The YALI functions libyali-nccl calls; their types come from yali.h. Every one is needed: a
// libyali that lacks one (an older one) gives no communicator YALI (yaliLib() is null), rather than
// a libyali-nccl that half works: without yaliGroupSimulateEnd, say, ncclGroupSimulateEnd could end
// YALI's part of the group only by launching it.
#define YALI_NCCL_YALI_FUNCTIONS(X)                                                                    \
  X(yaliGetLastError) X(yaliGetUniqueId) X(yaliCommInitRank) X(yaliCommInitAll) X(yaliCommDestroy)      \
  X(yaliCommAbort) X(yaliCommGetAsyncError) X(yaliCommRegister) X(yaliCommDeregister) X(yaliGroupStart) \
  X(yaliGroupEnd) X(yaliGroupSimulateEnd) X(yaliAllReduce) X(yaliReduceScatter) X(yaliAllGather)         \
  X(yaliBroadcast) X(yaliReduce) X(yaliGather) X(yaliScatter) X(yaliAlltoAll) X(yaliCommGetFailureFlag)  \
  X(yaliAlgoInfo) X(yaliCommWatchFailureWord) X(yaliSend) X(yaliRecv)

// The CUDA runtime's (the set-up's scratch memory and streams; the comm's scratch buffers, the
// copies into and out of them and the order of their users across streams; the staging memory of
// calls staged inside a group; the hierarchical path's cross-node status words), with their types written
// out: cuda_runtime.h overloads some of them (cudaMalloc) with templates, so decltype cannot name
// them. cudaStreamGetCaptureInfo changed its parameters between CUDA releases; decltype takes this
// build's, which is also the runtime libyali links (the two are built together).
#define YALI_NCCL_CUDA_FUNCTIONS(X)                                           \
  X(cudaGetDevice, cudaError_t(int*))                                         \
  X(cudaSetDevice, cudaError_t(int))                                          \
  X(cudaGetErrorString, const char*(cudaError_t))                             \
  X(cudaGetLastError, cudaError_t())                                          \
  X(cudaPeekAtLastError, cudaError_t())                                       \
  X(cudaStreamCreateWithFlags, cudaError_t(cudaStream_t*, unsigned int))      \
  X(cudaStreamSynchronize, cudaError_t(cudaStream_t))                         \
  X(cudaStreamQuery, cudaError_t(cudaStream_t))                               \
  X(cudaStreamDestroy, cudaError_t(cudaStream_t))                             \
  X(cudaDeviceGetAttribute, cudaError_t(int*, cudaDeviceAttr, int))           \
  X(cudaMallocAsync, cudaError_t(void**, size_t, cudaStream_t))               \
  X(cudaFreeAsync, cudaError_t(void*, cudaStream_t))                          \
  X(cudaMalloc, cudaError_t(void**, size_t))                                  \
  X(cudaFree, cudaError_t(void*))                                             \
  X(cudaHostAlloc, cudaError_t(void**, size_t, unsigned int))                 \
  X(cudaFreeHost, cudaError_t(void*))                                         \
  X(cudaMemcpyAsync, cudaError_t(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)) \
  X(cudaStreamIsCapturing, cudaError_t(cudaStream_t, cudaStreamCaptureStatus*))            \
  X(cudaStreamGetCaptureInfo, decltype(::cudaStreamGetCaptureInfo))                         \
  X(cudaEventCreateWithFlags, cudaError_t(cudaEvent_t*, unsigned int))                     \
  X(cudaEventRecord, cudaError_t(cudaEvent_t, cudaStream_t))                                \
  X(cudaEventRecordWithFlags, cudaError_t(cudaEvent_t, cudaStream_t, unsigned int))         \
  X(cudaEventDestroy, cudaError_t(cudaEvent_t))                                             \
  X(cudaEventSynchronize, cudaError_t(cudaEvent_t))                                         \
  X(cudaStreamWaitEvent, cudaError_t(cudaStream_t, cudaEvent_t, unsigned int))

struct YaliLib {
#define YALI_NCCL_YALI_MEMBER(name) decltype(&::name) name = nullptr;
#define YALI_NCCL_CUDA_MEMBER(name, type) std::add_pointer_t<type> name = nullptr;
  YALI_NCCL_YALI_FUNCTIONS(YALI_NCCL_YALI_MEMBER)
  YALI_NCCL_CUDA_FUNCTIONS(YALI_NCCL_CUDA_MEMBER)
#undef YALI_NCCL_YALI_MEMBER
#undef YALI_NCCL_CUDA_MEMBER
};

// Every function above, or null when libyali cannot be opened (or lacks one): then no communicator
// gets YALI. Opened once, on the first call; the outcome is logged (a failure always).
const YaliLib* yaliLib();
const char* yaliLibError();  // why yaliLib() is null

// The CUDA functions alone (the YALI ones may be null): yaliLib()'s where libyali loaded; else those
// of the libyali that was opened but lacks a YALI function (an older one), or of the CUDA runtime
// the program loaded (libcudart.so.<this build's major>), so that a rank without libyali still takes
// part in its peers' set-up rounds, saying "no" (comm.cc, answerNo). Null when none can be found:
// such a rank cannot take part, and its peers' rounds end at YALI_TIMEOUT_MS (comm.cc, realRound).
const YaliLib* cudaRuntime();

// yaliLib(), where it cannot be null: wherever a YALI comm exists (one was made through it).
inline const YaliLib& lib() { return *yaliLib(); }

}  // namespace yali::nccl_abi
