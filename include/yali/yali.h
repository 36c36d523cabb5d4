/*
 * YALI: collective communication among the GPUs of one machine over NVLink.
 *
 * This is the only public header. Its shape mirrors NCCL's (nccl.h) so that a program can switch
 * by renaming calls: ncclAllReduce -> yaliAllReduce, ncclComm_t -> yaliComm_t, and so on. Enum
 * values that exist in both libraries have the same numbers.
 *
 * Threading: a communicator may be used from one thread at a time. Calls on one communicator must
 * be issued in the same order on every rank, on streams that order them (the same stream, or
 * streams joined by events), exactly as NCCL requires.
 *
 * Every call returns a yaliResult_t. On failure, yaliGetLastError() returns a message that names
 * the call and the offending argument.
 */
#ifndef YALI_YALI_H_
#define YALI_YALI_H_

#include <cuda_runtime.h>
#include <stddef.h>

#define YALI_MAJOR 0
#define YALI_MINOR 1
#define YALI_PATCH 0
/* YALI_VERSION_CODE is what yaliGetVersion() reports: major*10000 + minor*100 + patch. */
#define YALI_VERSION_CODE (YALI_MAJOR * 10000 + YALI_MINOR * 100 + YALI_PATCH)

#if defined(__GNUC__)
#define YALI_API __attribute__((visibility("default")))
#else
#define YALI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handle to one rank's communicator (one GPU). */
typedef struct yaliComm* yaliComm_t;

/* Identifies one communicator while it is being created: produced once by yaliGetUniqueId() and
 * handed by the user to every rank (MPI_Bcast, torch.distributed, a file). Plain bytes, safe to
 * copy between processes of one machine. */
#define YALI_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[YALI_UNIQUE_ID_BYTES];
} yaliUniqueId;

/* Result codes. 0..7 match ncclResult_t. */
typedef enum {
  yaliSuccess = 0,
  yaliUnhandledCudaError = 1, /* a CUDA call failed */
  yaliSystemError = 2,        /* an operating-system call failed (sockets, memory) */
  yaliInternalError = 3,      /* a bug in YALI */
  yaliInvalidArgument = 4,    /* a bad value was passed (null pointer, unknown dtype, ...) */
  yaliInvalidUsage = 5,       /* a call that is not allowed now (destroyed or aborted comm, ...) */
  yaliRemoteError = 6,        /* a peer failed or left */
  yaliInProgress = 7,         /* reserved (NCCL's non-blocking mode); never returned today */
  yaliTimeout = 8,            /* a device-side wait for a peer ran past YALI_TIMEOUT_MS */
  yaliNumResults = 9
} yaliResult_t;

/* Element types. Values match ncclDataType_t for the same types. */
typedef enum {
  yaliFloat16 = 6,
  yaliHalf = 6,
  yaliFloat32 = 7,
  yaliFloat = 7,
  yaliBfloat16 = 9
} yaliDataType_t;

/* Reduction operations. Values match ncclRedOp_t. fp16 and bf16 accumulate in fp32. */
typedef enum {
  yaliSum = 0,
  yaliProd = 1,
  yaliMax = 2,
  yaliMin = 3,
  yaliAvg = 4, /* sum, then divided by the number of ranks */
  yaliNumOps = 5
} yaliRedOp_t;

/* ---- Errors and version ---------------------------------------------------------------------- */

/* A fixed description of a result code. Never NULL. */
YALI_API const char* yaliGetErrorString(yaliResult_t result);

/* The detail of the last failure: the call, the argument and the cause. With comm == NULL, the last
 * failure on the calling thread; with a comm, the last failure recorded on that communicator
 * (including asynchronous ones, such as a timeout seen on the device). Empty string if none. */
YALI_API const char* yaliGetLastError(yaliComm_t comm);

/* *version = YALI_VERSION_CODE of the library actually loaded. */
YALI_API yaliResult_t yaliGetVersion(int* version);

/* ---- Communicator life cycle ----------------------------------------------------------------- */

/* Creates a new id for yaliCommInitRank. Call on one rank, then give the same bytes to all. */
YALI_API yaliResult_t yaliGetUniqueId(yaliUniqueId* uniqueId);

/* One process (or thread) per GPU: creates rank `rank` of `nranks` on the current CUDA device.
 * Collective: blocks until all nranks ranks have called it with the same id (bounded by
 * YALI_TIMEOUT_MS). Peers' buffers are mapped through CUDA IPC. */
YALI_API yaliResult_t yaliCommInitRank(yaliComm_t* comm, int nranks, yaliUniqueId uniqueId,
                                       int rank);

/* One process driving several GPUs: creates comms[i] as rank i on device devlist[i] (or device i
 * when devlist is NULL). Calls on the comms may then be issued from one thread in a loop. */
YALI_API yaliResult_t yaliCommInitAll(yaliComm_t* comms, int ndev, const int* devlist);

/* Waits for this comm's work to finish, then frees it. Collective: peers' memory stays mapped until
 * every rank has called it (bounded by YALI_TIMEOUT_MS). */
YALI_API yaliResult_t yaliCommDestroy(yaliComm_t comm);

/* Stops this comm's in-flight device waits and frees it without waiting for peers. */
YALI_API yaliResult_t yaliCommAbort(yaliComm_t comm);

/* *asyncError = yaliSuccess, or the error that a device-side operation hit (yaliTimeout when a
 * peer never arrived). Does not synchronize. Once set, every later call on the comm returns it. */
YALI_API yaliResult_t yaliCommGetAsyncError(yaliComm_t comm, yaliResult_t* asyncError);

YALI_API yaliResult_t yaliCommCount(const yaliComm_t comm, int* count);
YALI_API yaliResult_t yaliCommCuDevice(const yaliComm_t comm, int* device);
YALI_API yaliResult_t yaliCommUserRank(const yaliComm_t comm, int* rank);

/* ---- Registered buffers (zero-copy) ---------------------------------------------------------- */

/* Maps `size` bytes of device memory at `buff` (cudaMalloc'd, on this comm's GPU) into every peer,
 * so that collectives on buffers inside registered memory skip YALI's staging copies: with a
 * registered output, twoshot_direct (from 16 MB by default) stores each reduced shard straight into
 * every rank's output; with both buffers registered, direct (off by default, YALI_DIRECT_MIN_BYTES)
 * also reads the peers' inputs over NVLink. Collective: every rank calls it, in the same order
 * relative to its other registrations, with the same size (bounded by YALI_TIMEOUT_MS); in
 * single-process mode (yaliCommInitAll) call it on every comm before a collective uses the buffer.
 * *handle names the registration for yaliCommDeregister. The memory must stay allocated until then.
 * A call refused on one rank for its arguments (NULL, size 0, not device memory of this GPU)
 * registers nothing there: that rank's next call is its counterpart of the peers'.
 *
 * A call takes a zero-copy path only when its buffers lie in registered memory on every rank, at
 * the same byte offset within the same registration on every rank (the same call order makes
 * registrations correspond). Ranks that disagree (different offsets, counts, types or ops) make
 * the call fail on the device without writing anything: yaliInvalidUsage from the next call. If
 * some ranks pass registered buffers and others do not, the call times out (yaliTimeout). */
YALI_API yaliResult_t yaliCommRegister(const yaliComm_t comm, void* buff, size_t size, void** handle);

/* Undoes yaliCommRegister. Collective, like it; waits for the comm's work on this GPU to finish. */
YALI_API yaliResult_t yaliCommDeregister(const yaliComm_t comm, void* handle);

/* ---- Groups (for NCCL source compatibility) -------------------------------------------------- */

/* YALI's launches never block the host, so one thread may issue a collective on several comms in a
 * loop without grouping. These exist so that code written for NCCL compiles unchanged; they only
 * check nesting. */
YALI_API yaliResult_t yaliGroupStart(void);
YALI_API yaliResult_t yaliGroupEnd(void);

/* ---- Collectives ----------------------------------------------------------------------------- */

/* Sums (or prod/max/min/avg) `count` elements of `sendbuff` across all ranks into `recvbuff` on
 * every rank. In place when sendbuff == recvbuff. Buffers: device memory of this comm's GPU,
 * aligned to the element size; any count, including 0. Enqueued on `stream`; returns without
 * synchronizing the host; may be captured into a CUDA graph. Every rank gets bitwise-identical
 * results (the reduction runs in rank order 0..n-1 everywhere). */
YALI_API yaliResult_t yaliAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    yaliDataType_t datatype, yaliRedOp_t op, yaliComm_t comm,
                                    cudaStream_t stream);

/* ---- Introspection (YALI extension, no NCCL equivalent) ------------------------------------ */

/* What yaliAllReduce would run for this call on this comm, as chosen by the selector (tuning
 * table, YALI_* thresholds, YALI_ALGO, and whether both buffers are registered: yaliCommRegister).
 * sendbuff and recvbuff may be NULL: the choice for unregistered buffers. For benchmarks and
 * reports; launches nothing. */
typedef struct {
  char algorithm[32]; /* e.g. "oneshot_ll", "twoshot_push", "direct" */
  int ctas;           /* thread blocks per GPU */
  int threads;        /* threads per block */
  size_t chunkBytes;  /* chunk per pipeline (a block, or a team of one) per step, 0 if none */
} yaliAlgoInfo_t;

YALI_API yaliResult_t yaliAllReduceAlgoInfo(yaliComm_t comm, const void* sendbuff,
                                            const void* recvbuff, size_t count,
                                            yaliDataType_t datatype, yaliRedOp_t op,
                                            yaliAlgoInfo_t* info);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* YALI_YALI_H_ */
