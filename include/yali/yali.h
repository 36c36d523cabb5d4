/*
 * YALI: collective communication among the GPUs of one machine over NVLink.
 *
 * This is the only public header. Its shape mirrors NCCL's (nccl.h) so that a program can switch
 * by renaming calls: ncclAllReduce -> yaliAllReduce, ncclComm_t -> yaliComm_t, and so on. Enum
 * values that exist in both libraries have the same numbers.
 *
 * Threading: calls on one communicator from several threads take turns (the comm serializes them),
 * and yaliCommAbort may be called from any thread at any time. Collectives on one communicator must
 * be issued in the same order on every rank, exactly as NCCL requires. They run in that order
 * whatever streams they are on, as NCCL's do: a call on another stream than the comm's previous
 * call first waits for that call (an event; a comm that keeps to one stream records none until it
 * captures a call; cudaStreamPerThread counts as another stream in each thread, and a call on it
 * records one at once, since only its own thread can; stream 0 is the legacy default stream here
 * even in a program built with --default-stream per-thread: such a program passes
 * cudaStreamPerThread). Within one stream capture this ordering
 * becomes graph edges; between a graph's replays and other calls on the comm (eager, or another
 * graph's), the order is the host's: once a comm has captured a call, each of its launches waits
 * for the one issued before it in any context (a replay counts as issued at its cudaGraphLaunch), as
 * NCCL's graph mixing support does. That
 * costs an event record and a wait per eager call from the first capture on (which also gives up
 * the overlap of programmatic launch, YALI_PDL, between consecutive eager calls), and in a graph
 * one event record node behind the comm's last captured call (no later call waits for it:
 * consecutive captured calls keep their programmatic overlap) and a wait node before the capture's
 * first call of the comm (YALI_GRAPH_MIXING=0: none of it, the program orders contexts). A
 * cudaGraphLaunch made from another thread while a call of the comm is being issued is ordered by
 * the host's race between them: order such launches against the comm's calls on the host. Two
 * captures of one comm in progress at once are not ordered against each other (the comm follows one
 * capture at a time): capture a comm's calls in one graph at a time. A stream must not begin or
 * end a capture on another thread while a call of the comm is being issued on it (CUDA makes that
 * a race of the program): the call decides at its start whether it is captured, and a launch that
 * lands in a graph uncounted, or counted as eager, breaks the destroy's and deregister's wait for
 * the comm's eager launches. The first call
 * on a second stream orders itself after everything queued so far on the previous call's stream:
 * if that stream has been destroyed by then, the call fails (yaliUnhandledCudaError) rather than
 * run unordered.
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
#include <stdint.h>

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
  yaliTimeout = 8,            /* a wait for a peer (set-up, a collective on the device or a host
                               * watch, destroy, registration) ran past YALI_TIMEOUT_MS */
  yaliNumResults = 9
} yaliResult_t;

/* Element types: every NCCL type, with NCCL's values. Collectives that only move data (AllGather,
 * Broadcast, Gather, Scatter, AlltoAll) treat every type as bytes of its size. */
typedef enum {
  yaliInt8 = 0,
  yaliChar = 0,
  yaliUint8 = 1,
  yaliInt32 = 2,
  yaliInt = 2,
  yaliUint32 = 3,
  yaliInt64 = 4,
  yaliUint64 = 5,
  yaliFloat16 = 6,
  yaliHalf = 6,
  yaliFloat32 = 7,
  yaliFloat = 7,
  yaliFloat64 = 8,
  yaliDouble = 8,
  yaliBfloat16 = 9,
  yaliFloat8e4m3 = 10, /* OCP fp8 E4M3 (cuda_fp8.h __nv_fp8_e4m3) */
  yaliFloat8e5m2 = 11, /* OCP fp8 E5M2 (__nv_fp8_e5m2) */
  yaliNumTypes = 12
} yaliDataType_t;

/* Reduction operations. Values match ncclRedOp_t. Every op works on every type, but yaliAvg, which
 * is for the floating types only (fp16, bf16, fp32, fp64, fp8). Accumulation: fp16, bf16 and fp8
 * in fp32, fp32 in fp32, fp64 in fp64, integers in their own width with wrap-around (two's
 * complement) for sum and prod; the reduction runs in rank order 0..n-1 on every rank, so every
 * rank gets the same bits. fp8 results are rounded to nearest and saturate to the largest finite
 * value (CUDA's __NV_SATFINITE). */
typedef enum {
  yaliSum = 0,
  yaliProd = 1,
  yaliMax = 2,
  yaliMin = 3,
  yaliAvg = 4, /* sum, then divided by the number of ranks */
  yaliNumOps = 5
} yaliRedOp_t;

/* The collectives, for yaliAlgoInfo (YALI extension). */
typedef enum {
  yaliCollAllReduce = 0,
  yaliCollReduceScatter = 1,
  yaliCollAllGather = 2,
  yaliCollBroadcast = 3,
  yaliCollReduce = 4,
  yaliCollGather = 5,
  yaliCollScatter = 6,
  yaliCollAlltoAll = 7,
  yaliCollAlltoAllv = 8, /* yaliAlltoAllv, yaliAlltoAllvDeviceCounts, yaliExpertDispatch/Combine */
  yaliNumCollectives = 9
} yaliCollective_t;

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
 * when devlist is NULL). One thread may then issue the calls on all of them in a loop, inside
 * yaliGroupStart/yaliGroupEnd ("Groups" below says why). */
YALI_API yaliResult_t yaliCommInitAll(yaliComm_t* comms, int ndev, const int* devlist);

/* Ends the comm after the calls made on it so far (not collective). Waits for this rank's calls
 * issued outside CUDA graphs to finish (bounded by YALI_TIMEOUT_MS; if they have not, it returns
 * yaliTimeout and they do nothing when they run, but for copy-engine calls, *_ce below, which
 * still copy into their own output: a queued copy cannot be withdrawn; the peers are then told, as
 * a timeout of this rank's, so their waits for it end and their later calls fail with yaliTimeout,
 * unless the comm had already failed), then closes the comm:
 * launches still queued and replays of graphs that captured its calls touch nothing from then on. Its memory is freed once
 * no graph holds it (a graph that captured a call keeps it until the graph is destroyed); destroy
 * waits for that at most until YALI_TIMEOUT_MS is used up, since freeing CUDA memory waits for
 * every kernel on the device, another library's too. The memory is released 2 ms after the
 * comm's calls outside graphs have ended (a margin for their last stores to land, since the
 * kernels do not fence them system-wide), so a destroy takes a few milliseconds. Peers keep the memory they mapped of ours until they end their comms. The handle is
 * invalid afterwards (calls return yaliInvalidUsage). */
YALI_API yaliResult_t yaliCommDestroy(yaliComm_t comm);

/* Ends the comm at once, from any thread, whatever runs on the GPU: its device waits in flight
 * give up, its peers learn of it (they report yaliRemoteError), a call blocked in another thread
 * on this comm returns within about 100 ms, and its launches still queued or replayed later touch
 * nothing (copy-engine calls in flight are released within a few ms and copy into their own output
 * only). Waits for no kernel; the memory is freed in the background as for yaliCommDestroy. */
YALI_API yaliResult_t yaliCommAbort(yaliComm_t comm);

/* *asyncError = yaliSuccess, or the error that a device-side operation hit (see "Failures" above:
 * yaliTimeout when a peer never arrived, on every survivor; yaliRemoteError when a peer aborted).
 * Does not synchronize. Once set, every later call on the comm returns it. */
YALI_API yaliResult_t yaliCommGetAsyncError(yaliComm_t comm, yaliResult_t* asyncError);

/* *deviceFlag = a device-readable pointer to a 32-bit word that is 0 until the comm has failed
 * asynchronously (the failure yaliCommGetAsyncError reports) and nonzero forever after (the code
 * that failed; no other meaning is promised). It is the host-mapped word that yaliCommGetAsyncError
 * reads, seen through its device alias: device work (a kernel, a cudaMemcpyAsync) ordered after the
 * comm's launches on a stream sees the value those launches left, since a kernel that fails writes
 * it before it ends. A copy-engine call (*_ce, below) has no kernel: a host thread writes the word
 * when such a call fails, at no particular point of the stream. For another library that runs its
 * own steps after YALI's in stream order and must tell whether YALI's data is valid (libyali-nccl
 * sends it to the other nodes of a hierarchical communicator). Valid until the comm is destroyed
 * or aborted (captured graphs that hold the comm keep it valid for their replays). Does not
 * synchronize. yaliInvalidArgument when comm or deviceFlag is NULL. */
YALI_API yaliResult_t yaliCommGetFailureFlag(yaliComm_t comm, const int** deviceFlag);

/* The other direction: makes the comm's launches depend on a 64-bit word in device memory that
 * another library writes in stream order. From this call on, every kernel the comm launches (its
 * calls made after this one, and the replays of graphs that capture them) reads *deviceWord when the
 * stream reaches it; when it is nonzero the launch touches nothing of the call but fills its output
 * with all-ones bytes, and the comm fails as if a peer had failed: yaliCommGetAsyncError says
 * yaliRemoteError, naming the watched word, and every peer's waits for this rank end at once with
 * yaliRemoteError too, in the same call (no YALI_TIMEOUT_MS passes). For a library whose own steps
 * feed YALI's, where data that another part of the job flagged must not be spread as if valid
 * (libyali-nccl's hierarchical AllReduce: a shard that another node flagged must not reach the node
 * through YALI's AllGather; docs/ARCHITECTURE.md, "Errors"). deviceWord: 8-byte aligned device memory
 * of the comm's GPU (or managed memory), valid while the comm's launches and the graphs that
 * captured them may run; NULL stops watching (for calls made from then on). Every rank of the comm
 * must watch a word (each its own) or none, from the same call on: the copy-engine algorithms (*_ce),
 * which launch no kernel to read the word, are not chosen on a comm that watches one, and every rank
 * must choose alike. Costs one 8-byte load per block's start. Does not synchronize.
 * yaliInvalidArgument (naming the argument) for a NULL comm or a word that is not such memory. */
YALI_API yaliResult_t yaliCommWatchFailureWord(yaliComm_t comm, const uint64_t* deviceWord);

YALI_API yaliResult_t yaliCommCount(const yaliComm_t comm, int* count);
YALI_API yaliResult_t yaliCommCuDevice(const yaliComm_t comm, int* device);
YALI_API yaliResult_t yaliCommUserRank(const yaliComm_t comm, int* rank);

/* ---- Registered buffers (zero-copy) ---------------------------------------------------------- */

/* Maps `size` bytes of device memory at `buff` (cudaMalloc'd, on this comm's GPU) into every peer,
 * so that collectives whose outputs lie inside registered memory skip YALI's staging copies: an
 * AllReduce output takes twoshot_direct (from 16 MB by default at 2 to 7 ranks, off at 8), whose owners store each reduced
 * shard straight into every rank's output; AllGather, Broadcast, Scatter and AlltoAll outputs take
 * their *_direct algorithm (from 1 MB per piece), which writes every piece straight into its
 * receiver's output. ReduceScatter inputs in registered memory may take reducescatter_pull, which
 * reduces every rank's block straight from every rank's input, and Reduce inputs reduce_pull, whose
 * root reduces the whole message straight from every rank's input (non-roots write nothing; their
 * recvbuff may be NULL). Both are off by default (YALI_REDUCESCATTER_PULL_MIN_BYTES,
 * YALI_REDUCE_PULL_MIN_BYTES or YALI_ALGO); inputs registered on every rank, each rank telling its
 * peers its offset; they run in CUDA graphs too. Collective: every rank calls it, in the same order
 * relative to its other registrations, with the same size (bounded by YALI_TIMEOUT_MS); in
 * single-process mode (yaliCommInitAll) call it on every comm before a collective uses the buffer.
 * *handle names the registration for yaliCommDeregister. The memory must stay allocated until then.
 * A call refused on one rank for its arguments (NULL, size 0, not device memory of this GPU)
 * registers nothing there: that rank's next call is its counterpart of the peers'.
 *
 * A call takes a zero-copy path only when its output lies in registered memory on every rank, in
 * the corresponding registration on every rank (the same call order makes registrations
 * correspond) and, for AllReduce, at the same byte offset within it (the other collectives tell
 * each other their offsets, so NCCL's in-place layouts work). Ranks that disagree (different
 * registrations or AllReduce offsets, counts, types, ops or roots) make
 * the call fail on the device without writing into any peer's buffer: yaliInvalidUsage from the
 * next call. If some ranks pass registered buffers and others do not, the call times out
 * (yaliTimeout): with reducescatter_pull or reduce_pull turned on, that is also what a rank whose
 * input is not registered (a copy into staging, say) makes of a ReduceScatter or Reduce the others
 * run on registered inputs. Memory freed without yaliCommDeregister is recognized (CUDA's buffer id): a call
 * on a new allocation at its address fails on every rank (yaliInvalidUsage) rather than let a
 * peer write into it. */
YALI_API yaliResult_t yaliCommRegister(const yaliComm_t comm, void* buff, size_t size, void** handle);

/* Registered inputs and no SM at all: AllGather, Broadcast, Gather, Scatter and AlltoAll also have a
 * copy-engine algorithm (*_ce: allgather_ce, ...) that runs no kernel: the copy engines pull every
 * peer's input into each rank's output and stream memory operations synchronize the ranks, so the
 * call takes no SM from compute it overlaps. Off by default (slower than the SM paths at most
 * sizes); YALI_<NAME>_MIN_BYTES (e.g. YALI_ALLGATHER_CE_MIN_BYTES=-1: every size) or YALI_ALGO
 * turn it on. A call takes it only when, on this rank, sendbuff lies in registered memory (recvbuff
 * need not), the stream is not capturing (graphs take the SM paths), the driver offers the memory
 * operations, and no two ranks of this comm share a GPU inside one process (yaliCommInitAll with a
 * devlist naming a GPU twice: their streams' waits could hold each other up in the GPU's hardware
 * queues); every rank must then pass its sendbuff at the same byte offset within the
 * corresponding registration (in-place AllGather: recvbuff at the same offset). Broadcast and
 * Scatter receivers read nothing of their own sendbuff but pass one laid out like the root's (the
 * same buffer as recvbuff in place does). Ranks that differ wait for each other until
 * YALI_TIMEOUT_MS: yaliTimeout on every rank. A host thread bounds the waits: a call that does not
 * complete within YALI_TIMEOUT_MS of its start fails the comm (yaliTimeout; a peer's kernels refuse
 * to run from then on), and its stream is released, leaving that call's output undefined; a
 * copy-engine call writes nothing but its own rank's output. yaliAlgoInfo reports 0 ctas and 0
 * threads for these (and, having no stream, cannot tell a capture from an eager call).
 * A rank whose call is released (destroy, abort, timeout or failure) first writes the failure into
 * its peers' windows, and is released only once the host has seen those writes complete; every
 * call checks that word as it ends. So a peer's call that read the rank's input after the released
 * call ended on its stream ends with that failure, not without an error. This relies on the GPUs
 * making a completed write visible before the released rank's later work, which CUDA does not
 * document; an input overwritten on another stream while the released call still ran is not
 * covered. Known
 * limit (a review, 2026-11-29; not yet fixed): that host thread releases a stuck call with a CUDA
 * call of its own, which another thread's cudaFree or cudaIpcCloseMemHandle, or one hardware queue
 * shared with the stuck stream (CUDA_DEVICE_MAX_CONNECTIONS=1), can hold up, so the bound can
 * fail. Hence off by default: turn them on where ranks are not destroyed or aborted with these
 * calls in flight. */

/* Undoes yaliCommRegister on this rank (not collective; peers keep their own registrations until
 * they deregister). Waits for this rank's calls issued outside CUDA graphs to finish (bounded by
 * YALI_TIMEOUT_MS), so that the memory may be freed afterwards. A CUDA graph that captured a call
 * on the buffer fails on every later replay (yaliInvalidUsage on every rank) instead of touching
 * it; synchronize the streams you replayed on before deregistering. Refused (yaliInvalidUsage,
 * nothing changed) while a call waiting in an open group (yaliGroupStart) uses the registration,
 * or, in single-process mode, another comm's part of it: such a call launches through it at
 * yaliGroupEnd. */
YALI_API yaliResult_t yaliCommDeregister(const yaliComm_t comm, void* handle);

/* ---- Groups ---------------------------------------------------------------------------------- */

/* NCCL's meaning: between yaliGroupStart and yaliGroupEnd (which nest), collectives are checked
 * when called (argument errors are returned there) and launched at the outermost yaliGroupEnd, on
 * every GPU, before it returns: each comm's calls in call order, its point-to-point calls last, and
 * the comms in an order every rank of each comm shares (as NCCL orders a group's comms by their
 * hash), so that ranks may make a group's calls on several comms in different orders; a launch
 * error is returned by yaliGroupEnd. A group
 * whose calls on one comm use several streams is treated as NCCL treats one, as if it were posted
 * on every one of them: its work on that comm waits for what each of those streams held, and each
 * of them waits for that work (an event record and wait per extra stream, before and after; none
 * where a comm's calls keep to one stream, nor where its streams are not all in one capture or all
 * outside one). When a
 * call of the group fails its comm at its launch, the comm's later calls in the group are not to
 * be trusted: a copy-engine call is refused at its launch (yaliGroupEnd returns the first error),
 * and yaliCommGetAsyncError reports the failure.
 * A call refused inside a group queued nothing, and yaliGroupEnd launches the calls it accepted;
 * NCCL's ncclGroupEnd instead launches none of a group in which a call failed. A program that wants
 * NCCL's rule ends such a group with yaliGroupSimulateEnd (Python's yali.group does); libyali-nccl
 * relies on this one to run a call YALI refused another way inside the same group.
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
/* Ends the group like yaliGroupEnd, but launches nothing: the outermost end drops the calls queued
 * in the group (those of inner groups included), which leaves their comms as if they had never
 * been made; an inner end only closes its level (as NCCL's, only the outermost end decides). What
 * ncclGroupSimulateEnd is to NCCL, without the estimate: YALI estimates no time. For libyali-nccl,
 * which ends YALI's part of a group that the program simulates. */
YALI_API yaliResult_t yaliGroupSimulateEnd(void);

/* ---- Collectives ----------------------------------------------------------------------------- */

/* NCCL 2.28's shapes, counts in elements. Rules common to all of them:
 *  - Buffers: device memory of this comm's GPU that is allocated now, aligned to the element size,
 *    and (for cudaMalloc memory, where CUDA knows the allocation's extent) holding what the call
 *    reads or writes. A buffer a rank does not use (recvbuff of a non-root in yaliReduce and
 *    yaliGather, sendbuff of a non-root in yaliScatter) is not looked at and may be NULL.
 *  - In place exactly where NCCL allows it (named per call below); any other overlap of the bytes
 *    read and the bytes written is refused (yaliInvalidArgument) and nothing is touched.
 *  - Any count, 0 included (a call with nothing to move returns at once); a count whose byte size
 *    overflows is refused. root must be in [0, nranks).
 *  - Enqueued on `stream`; returns without synchronizing the host; may be captured into a CUDA
 *    graph; may be grouped (yaliGroupStart/End). Every rank must make the same call (collective,
 *    count, type, op, root) in the same order. */

/* Reduces `count` elements of `sendbuff` across all ranks into `recvbuff` on every rank. In place
 * when sendbuff == recvbuff. */
YALI_API yaliResult_t yaliAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    yaliDataType_t datatype, yaliRedOp_t op, yaliComm_t comm,
                                    cudaStream_t stream);

/* Rank i's recvbuff (recvcount elements) gets block i of the reduction of every rank's sendbuff
 * (nranks * recvcount elements). In place when recvbuff == sendbuff + rank * recvcount. */
YALI_API yaliResult_t yaliReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        yaliDataType_t datatype, yaliRedOp_t op, yaliComm_t comm,
                                        cudaStream_t stream);

/* recvbuff (nranks * sendcount elements) gets rank i's sendbuff at offset i * sendcount, on every
 * rank. In place when sendbuff == recvbuff + rank * sendcount. */
YALI_API yaliResult_t yaliAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    yaliDataType_t datatype, yaliComm_t comm, cudaStream_t stream);

/* Every rank's recvbuff gets root's sendbuff (count elements); sendbuff is read on root only. In
 * place when sendbuff == recvbuff. */
YALI_API yaliResult_t yaliBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    yaliDataType_t datatype, int root, yaliComm_t comm,
                                    cudaStream_t stream);

/* yaliBroadcast in place (NCCL's deprecated ncclBcast). */
YALI_API yaliResult_t yaliBcast(void* buff, size_t count, yaliDataType_t datatype, int root,
                                yaliComm_t comm, cudaStream_t stream);

/* Root's recvbuff gets the reduction of every rank's sendbuff (count elements); recvbuff is used
 * on root only. In place when sendbuff == recvbuff. */
YALI_API yaliResult_t yaliReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 yaliDataType_t datatype, yaliRedOp_t op, int root, yaliComm_t comm,
                                 cudaStream_t stream);

/* Root's recvbuff (nranks * count elements) gets rank i's sendbuff (count elements) at offset
 * i * count; recvbuff is used on root only. In place when, on root, sendbuff == recvbuff +
 * root * count. */
YALI_API yaliResult_t yaliGather(const void* sendbuff, void* recvbuff, size_t count,
                                 yaliDataType_t datatype, int root, yaliComm_t comm,
                                 cudaStream_t stream);

/* Rank i's recvbuff (count elements) gets root's sendbuff at offset i * count; sendbuff is read on
 * root only. In place when, on root, recvbuff == sendbuff + root * count. */
YALI_API yaliResult_t yaliScatter(const void* sendbuff, void* recvbuff, size_t count,
                                  yaliDataType_t datatype, int root, yaliComm_t comm,
                                  cudaStream_t stream);

/* Rank i sends sendbuff + j * count (count elements) to rank j, which places it at recvbuff +
 * i * count. Never in place: the buffers must not overlap. */
YALI_API yaliResult_t yaliAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                   yaliDataType_t datatype, yaliComm_t comm, cudaStream_t stream);

/* ---- AlltoAllv: uneven exchange (YALI extension; NCCL has none) ------------------------------
 *
 * Four forms of one collective, for Mixture-of-Experts layers and any other uneven exchange. All of
 * them follow the common rules above (device buffers of this comm's GPU, stream order, graphs,
 * groups, every rank makes the same call), never run in place (the buffers must not overlap) and
 * move rows as bytes (any type, any row width). Every rank tells every peer its send counts on
 * the device, inside the call, so each rank checks what it receives before it writes anything:
 *  - a count check that fails (a capacity exceeded, a negative count or one above 2^40 - 2 rows,
 *    host recvcounts that differ from the peers' sendcounts, rows past the end of sendbuff's
 *    allocation where CUDA knows it, i.e. cudaMalloc memory; empty chunks bound nothing; ranks
 *    that disagree on the row width (the datatype's size), the experts per rank or the direction,
 *    dispatch or combine: the counts carry a 24-bit digest of them) on any rank moves no row on
 *    any rank (every rank waits for every rank's verdict before rows move), writes -1 into every
 *    count output of every rank (the flag a later kernel on the stream can test; any other
 *    failure of the call leaves -1 there too), and fails the call and the comm on every rank
 *    with yaliInvalidUsage
 *    (yaliCommGetAsyncError; the message names the rank and the check), as any device-side failure
 *    does: later calls on the comm are refused and later launches poison their outputs;
 *  - a peer that never makes the call gives yaliTimeout after YALI_TIMEOUT_MS, never a hang.
 * Limits: localExperts <= YALI_MAX_LOCAL_EXPERTS and nranks * localExperts <= YALI_MAX_EXPERTS. */
#define YALI_MAX_LOCAL_EXPERTS 512
#define YALI_MAX_EXPERTS 1024

/* Host counts, with MPI's and torch's semantics: rank i sends sendcounts[j] elements from sendbuff +
 * sdispls[j] to rank j, which places them at recvbuff + rdispls[i] and must have recvcounts[i] ==
 * sendcounts[j] of rank i (checked on the device: see above). Arrays of nranks entries, in
 * elements, read on the host during the call (a captured graph keeps the values of its capture);
 * sdispls or rdispls NULL: packed (the prefix sums of the counts). A count, or the displacement of
 * a non-empty entry, above 2^40 - 2 is refused at the call (yaliInvalidArgument, naming the array
 * and the index), not on the device. */
YALI_API yaliResult_t yaliAlltoAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                                    void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                                    yaliDataType_t datatype, yaliComm_t comm, cudaStream_t stream);

/* Device counts: sendcounts (int64[nranks], elements) and sdispls (int64[nranks], or NULL: packed)
 * live in device memory, written by an earlier kernel on `stream` (a router); no host round trip,
 * so a captured graph replays with whatever counts each step writes. Rank i's rows for rank j go
 * to rank j, which packs what it receives contiguously in source-rank order into recvbuff, at most
 * recvCapacity elements, and writes recvcounts[i] (elements from rank i) and rdispls[i] (where
 * they start) into device memory (int64[nranks] each; either may be NULL) for its next kernel. */
YALI_API yaliResult_t yaliAlltoAllvDeviceCounts(const void* sendbuff, const int64_t* sendcounts,
                                                const int64_t* sdispls, void* recvbuff, size_t recvCapacity,
                                                int64_t* recvcounts, int64_t* rdispls,
                                                yaliDataType_t datatype, yaliComm_t comm, cudaStream_t stream);

/* The 2-D form for experts. E = localExperts experts live on each rank; global expert g = d * E + e
 * is local expert e of rank d. Counts are in rows of rowBytes bytes (hidden size x element size:
 * any width). */
typedef struct {
  size_t rowBytes;     /* bytes per row, >= 1 */
  int localExperts;    /* E, experts per rank, 1..YALI_MAX_LOCAL_EXPERTS */
  size_t alignRows;    /* each expert's segment starts at a multiple of this many rows (1..2^20; e.g.
                        * the tile of a grouped GEMM); the padding rows are not written */
  size_t capacityRows; /* rows the expert-major buffer holds (the dispatch's recvbuff, the combine's
                        * sendbuff) */
  size_t tokenRows;    /* rows the token-ordered buffer holds (the dispatch's sendbuff, the combine's
                        * recvbuff): counts that reach past them fail the call's check. 0: not
                        * given (then up to the end of its cudaMalloc allocation, which may hold
                        * other tensors of a caching allocator; other memory: unchecked) */
} yaliExpertLayout_t;

/* Dispatch. sendCounts: device int64[nranks * E], [g]: rows this rank sends to global expert g;
 * sendbuff: those rows sorted by global expert (expert 0's rows, then expert 1's, ..., packed).
 * recvbuff gets, expert-major, every rank's rows for this rank's experts: local expert 0's segment
 * (rank 0's rows, then rank 1's, ...), then local expert 1's at the next multiple of alignRows,
 * and so on. Outputs in device memory, either may be NULL: recvCounts int64[E * nranks],
 * [e * nranks + s]: rows of local expert e from rank s; expertOffsets int64[E + 1]: the first row
 * of each expert's segment, and [E] the end of the last one (the rows used). */
YALI_API yaliResult_t yaliExpertDispatch(const void* sendbuff, const int64_t* sendCounts, void* recvbuff,
                                         int64_t* recvCounts, int64_t* expertOffsets,
                                         const yaliExpertLayout_t* layout, yaliComm_t comm,
                                         cudaStream_t stream);

/* Combine, the dispatch's inverse: every row of sendbuff (in the dispatch's recvbuff layout, e.g.
 * the experts' outputs) goes back to the rank and the row it came from, so recvbuff ends up in the
 * dispatch's sendbuff layout. sendCounts: the dispatch's array, unchanged; layout: the dispatch's. */
YALI_API yaliResult_t yaliExpertCombine(const void* sendbuff, const int64_t* sendCounts, void* recvbuff,
                                        const yaliExpertLayout_t* layout, yaliComm_t comm,
                                        cudaStream_t stream);

/* ---- Point-to-point: NCCL's ncclSend and ncclRecv -------------------------------------------
 *
 * NCCL's semantics: the k-th yaliSend from rank a to rank b on a comm is matched with the k-th
 * yaliRecv on rank b from rank a, and both must move the same number of bytes (count times the
 * type's size; the types may differ). Only the two ranks take part: the comm's other ranks need not
 * make any call, and collectives of the comm in between are unaffected (point-to-point calls have
 * their own sequence per pair, outside the collectives' launch count).
 *  - A rank's sends and receives that must progress together (a ring shift, an all-to-all: each
 *    rank sends and receives at once) go into one group: inside yaliGroupStart/End, every
 *    point-to-point call of a comm runs in one launch, after the group's collectives on that comm,
 *    with every transfer progressing at once. Outside a group each call is a launch of its own: a
 *    send of more than the pair's rings (YALI_P2P_CHANNELS rings, at most 64 / (2 x (nranks - 1)),
 *    of 4 slots of YALI_P2P_SLOT_BYTES) waits for the matching receive to run.
 *  - peer == rank: the send and its receive must be in the same group (the k-th send to self with
 *    the k-th receive from self; a local copy), with the same bytes; anything else is refused
 *    (yaliInvalidUsage, at the call outside a group, at yaliGroupEnd inside one).
 *  - A send ends once its data is in the receiver's ring (eager, as NCCL's small sends): one that
 *    fits in the ring can end before the receive runs.
 *  - Checked on the device: the bytes of matched calls. The receiver checks; a difference fails
 *    the comm on both ranks (yaliInvalidUsage through yaliCommGetAsyncError, naming the other rank),
 *    as any device-side failure does: on the receiver at once, on the sender at once if its call
 *    still waits for the receiver, else at its next launch (refused before it touches anything).
 *    A peer that never makes its call gives yaliTimeout after YALI_TIMEOUT_MS (point-to-point
 *    calls are bounded like collectives: a pipeline stage that waits longer for its input than
 *    that needs a larger YALI_TIMEOUT_MS).
 *  - Buffers: device memory of this comm's GPU (common rules above); count 0 moves nothing and
 *    matches nothing. At most YALI_MAX_P2P_OPS point-to-point calls per comm in one group.
 *  - Disabled (yaliInvalidUsage) where YALI_P2P_CHANNELS=0 (then the window holds no rings). */
#define YALI_MAX_P2P_OPS 960
YALI_API yaliResult_t yaliSend(const void* sendbuff, size_t count, yaliDataType_t datatype, int peer,
                               yaliComm_t comm, cudaStream_t stream);
YALI_API yaliResult_t yaliRecv(void* recvbuff, size_t count, yaliDataType_t datatype, int peer,
                               yaliComm_t comm, cudaStream_t stream);

/* ---- Introspection (YALI extension, no NCCL equivalent) ------------------------------------ */

/* What a call would run on this comm, as chosen by the selector (tuning table, YALI_* thresholds,
 * YALI_ALGO, and whether the buffers are registered: yaliCommRegister). sendbuff and recvbuff may
 * be NULL: the choice for unregistered buffers. For benchmarks and reports; launches nothing. */
typedef struct {
  char algorithm[32]; /* e.g. "oneshot_ll", "twoshot_push", "allgather_staged"; "none" for count 0 */
  int ctas;           /* thread blocks per GPU */
  int threads;        /* threads per block */
  size_t chunkBytes;  /* chunk per pipeline (a block, or a team of one) per step, 0 if none */
} yaliAlgoInfo_t;

/* `count`, `op` and `root` as the collective's own call takes them (op is ignored by collectives
 * that do not reduce, root by those without one). */
YALI_API yaliResult_t yaliAlgoInfo(yaliComm_t comm, yaliCollective_t collective, const void* sendbuff,
                                   const void* recvbuff, size_t count, yaliDataType_t datatype,
                                   yaliRedOp_t op, int root, yaliAlgoInfo_t* info);

/* yaliAlgoInfo for yaliAllReduce. */
YALI_API yaliResult_t yaliAllReduceAlgoInfo(yaliComm_t comm, const void* sendbuff,
                                            const void* recvbuff, size_t count,
                                            yaliDataType_t datatype, yaliRedOp_t op,
                                            yaliAlgoInfo_t* info);

/* The name of a collective ("allreduce", "reducescatter", "allgather", "broadcast", "reduce",
 * "gather", "scatter", "alltoall", "alltoallv"), or "unknown". Never NULL. */
YALI_API const char* yaliCollectiveName(yaliCollective_t collective);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* YALI_YALI_H_ */
