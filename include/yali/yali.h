/*
 * YALI: collective communication among the GPUs of one machine over NVLink.
 *
 * This is the only public header. Its shape mirrors NCCL's (nccl.h) so that a program can switch
 * by renaming calls: ncclAllReduce -> yaliAllReduce, ncclComm_t -> yaliComm_t, and so on. Enum
 * values that exist in both libraries have the same numbers.
 *
 * Threading: calls on one communicator from several threads take turns (the comm serializes them),
 * and yaliCommAbort may be called from any thread at any time. Collectives on one communicator must
 * be issued in the same order on every rank, on streams that order them (the same stream, or
 * streams joined by events), exactly as NCCL requires.
 *
 * Every call returns a yaliResult_t. On failure, yaliGetLastError() returns a message that names
 * the call and the offending argument; a refused call has touched nothing.
 *
 * Failures (the contract every rank can rely on):
 *  - Every wait for a peer, on the device and on the host, is bounded by YALI_TIMEOUT_MS. A wait
 *    that runs out records the error and tells every peer, whose waits then end at once: when a
 *    rank dies or hangs, every survivor reports an error within about one YALI_TIMEOUT_MS, and all
 *    of them report the same code, yaliTimeout. A rank's yaliCommAbort makes its peers report
 *    yaliRemoteError; ranks whose registered-buffer calls differ all report yaliInvalidUsage.
 *  - A comm that failed stays failed: yaliCommGetAsyncError (no synchronization, a read of host
 *    memory) and every later call return the error, and the comm must be aborted. A launch that
 *    still runs on it (a CUDA graph replay never passes through the host API) fills its output
 *    with all-ones bytes (NaN for floating types) instead of leaving stale data; the output of the
 *    launch that failed is unspecified. Check yaliCommGetAsyncError after replaying a graph.
 *  - Results are never silently wrong: launch counters wrap safely (epochs start again at 1 after
 *    2^32 - 1 launches, on every rank together), and every setting the library accepts is safe.
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
 * copy between processes of one machine. It carries a random secret: only processes that hold the
 * id, run as the same user (checked by the kernel, SO_PEERCRED) and prove the secret can join the
 * communicator, so keep it as private as the job itself (another user can see the socket's name,
 * never the secret). */
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
 * YALI_TIMEOUT_MS). All ranks run as one user, in one pid namespace. Each rank's window is a
 * cuMem allocation that the others map from a file descriptor passed over the bootstrap socket. */
YALI_API yaliResult_t yaliCommInitRank(yaliComm_t* comm, int nranks, yaliUniqueId uniqueId,
                                       int rank);

/* One process driving several GPUs: creates comms[i] as rank i on device devlist[i] (or device i
 * when devlist is NULL). Calls on the comms may then be issued from one thread in a loop. */
YALI_API yaliResult_t yaliCommInitAll(yaliComm_t* comms, int ndev, const int* devlist);

/* Ends the comm after the calls made on it so far (not collective). Waits for this rank's calls
 * issued outside CUDA graphs to finish (bounded by YALI_TIMEOUT_MS; if they have not, it returns
 * yaliTimeout and they do nothing when they run), then closes the comm: launches still queued and
 * replays of graphs that captured its calls touch nothing from then on. Its memory is freed once
 * no graph holds it (a graph that captured a call keeps it until the graph is destroyed); destroy
 * waits for that at most until YALI_TIMEOUT_MS is used up, since freeing CUDA memory waits for
 * every kernel on the device, another library's too. Peers keep the memory they mapped of ours
 * until they end their comms. The handle is invalid afterwards (calls return yaliInvalidUsage). */
YALI_API yaliResult_t yaliCommDestroy(yaliComm_t comm);

/* Ends the comm at once, from any thread, whatever runs on the GPU: its device waits in flight
 * give up, its peers learn of it (they report yaliRemoteError), a call blocked in another thread
 * on this comm returns within about 100 ms, and its launches still queued or replayed later touch
 * nothing. Waits for no kernel; the memory is freed in the background as for yaliCommDestroy. */
YALI_API yaliResult_t yaliCommAbort(yaliComm_t comm);

/* *asyncError = yaliSuccess, or the error that a device-side operation hit (see "Failures" above:
 * yaliTimeout when a peer never arrived, on every survivor; yaliRemoteError when a peer aborted).
 * Does not synchronize. Once set, every later call on the comm returns it. */
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
 * the call fail on the device without writing into any peer's buffer: yaliInvalidUsage from the
 * next call. If some ranks pass registered buffers and others do not, the call times out
 * (yaliTimeout). Memory freed without yaliCommDeregister is recognized (CUDA's buffer id): a call
 * on a new allocation at its address fails on every rank (yaliInvalidUsage) rather than let a
 * peer write into it. */
YALI_API yaliResult_t yaliCommRegister(const yaliComm_t comm, void* buff, size_t size, void** handle);

/* Undoes yaliCommRegister on this rank (not collective; peers keep their own registrations until
 * they deregister). Waits for this rank's calls issued outside CUDA graphs to finish (bounded by
 * YALI_TIMEOUT_MS), so that the memory may be freed afterwards. A CUDA graph that captured a call
 * on the buffer fails on every later replay (yaliInvalidUsage on every rank) instead of touching
 * it; synchronize the streams you replayed on before deregistering. */
YALI_API yaliResult_t yaliCommDeregister(const yaliComm_t comm, void* handle);

/* ---- Groups ---------------------------------------------------------------------------------- */

/* NCCL's meaning: between yaliGroupStart and yaliGroupEnd (which nest), collectives are checked
 * when called (argument errors are returned there) and launched at the outermost yaliGroupEnd, in
 * call order, on every GPU, before it returns; a launch error is returned by yaliGroupEnd.
 * One thread driving several GPUs must group the per-GPU calls of one collective:
 *   yaliGroupStart(); for (g...) yaliAllReduce(..., comms[g], streams[g]); yaliGroupEnd();
 * Without the group, a kernel of its own that the thread launches between them can, on its first
 * launch under lazy module loading (CUDA's default), wait for the device to drain while YALI's
 * kernel there waits for a GPU whose kernel the thread has not launched yet: that call then fails
 * with yaliTimeout after YALI_TIMEOUT_MS. YALI's own kernels are all loaded when a comm is made.
 * yaliCommDestroy refuses a comm with calls pending in the calling thread's open group;
 * yaliCommAbort drops them. */
YALI_API yaliResult_t yaliGroupStart(void);
YALI_API yaliResult_t yaliGroupEnd(void);

/* ---- Collectives ----------------------------------------------------------------------------- */

/* Sums (or prod/max/min/avg) `count` elements of `sendbuff` across all ranks into `recvbuff` on
 * every rank. In place when sendbuff == recvbuff. Buffers: device memory of this comm's GPU that is
 * allocated now, aligned to the element size, and (for cudaMalloc memory, where CUDA knows the
 * allocation's extent) holding `count` elements; any count, including 0. Enqueued on `stream`;
 * returns without synchronizing the host; may be captured into a CUDA graph. Every rank gets
 * bitwise-identical results (the reduction runs in rank order 0..n-1 everywhere). */
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
