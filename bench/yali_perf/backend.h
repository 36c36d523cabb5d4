// The communication library under test behind one small interface, so that YALI and NCCL run
// through the same timing loops, on buffers of the same size and layout, in the same process
// (each on memory of the kind it registers: WantsOwnBuffers).
#ifndef YALI_PERF_BACKEND_H_
#define YALI_PERF_BACKEND_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "perf_args.h"

namespace yali_perf {

// The algorithm a library says it will run for one call (YALI only; NCCL does not tell).
struct AlgoChoice {
  bool known = false;
  std::string algorithm;
  int ctas = 0;
  int threads = 0;         // per block
  size_t chunk_bytes = 0;  // two-shot: the slot per block per step; 0 for LL
};

// One library call, with NCCL's arguments: `kind` is one of the eight library collectives (not
// kRsAg, which is two calls, nor kAlltoAllv, which is IssueVar's), or kSendRecv: one group of a
// send of `count` elements from `send` to `send_peer` and a receive of `count` into `recv` from
// `recv_peer` (nccl-tests' sendrecv: yaliGroupStart, yaliSend, yaliRecv, yaliGroupEnd, and NCCL's
// likewise). `op` is ignored by the collectives that only move data, `root` by those without
// one, the peers by all but kSendRecv.
struct LibraryCall {
  CollId kind = CollId::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat;
  RedOp op = RedOp::kSum;
  int root = 0;
  int send_peer = 0;
  int recv_peer = 0;
};

// One AlltoAllv call (-C alltoallv; yali.h, "AlltoAllv: uneven exchange") in one of its forms.
// Outputs are packed: the host form and NCCL's send/recv land the rows from each rank in rank
// order; inputs are packed in rank (and expert) order. Fields a form does not read are ignored.
struct VarCall {
  VarForm form = VarForm::kHostCounts;
  const void* send = nullptr;
  void* recv = nullptr;
  DType dtype = DType::kBfloat16;
  int nranks = 1;
  // kHostCounts: elements to and from each rank (host arrays of nranks), as after torch's
  // exchange of the split sizes.
  const size_t* send_counts = nullptr;
  const size_t* recv_counts = nullptr;
  // The device forms: int64 in device memory. kDeviceCounts: elements to each rank [nranks];
  // the expert forms: rows to each global expert [nranks * local_experts].
  const int64_t* device_send_counts = nullptr;
  // kDeviceCounts: recvbuff's capacity in elements; outputs recvcounts and rdispls [nranks].
  // kExpertDispatch: outputs recvCounts [local_experts * nranks] and expertOffsets
  // [local_experts + 1]. Either may be null.
  size_t recv_capacity = 0;
  int64_t* device_recv_counts = nullptr;
  int64_t* device_recv_offsets = nullptr;
  // The expert forms' layout (yaliExpertLayout_t).
  size_t row_bytes = 0;
  int local_experts = 1;
  size_t align_rows = 1;
  size_t capacity_rows = 0;
};

// One library's communicators for the GPUs this process drives ("local" index 0..n-1). Every
// failing call is fatal: it reports the call, the result code and the library's own detail; the
// one exception is a collective whose arguments the library refuses (Issue, Precheck).
class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* Name() const = 0;  // the table's impl column: "yali" or "nccl"
  virtual int VersionCode() const = 0;   // as the loaded library reports it
  virtual std::string VersionText() const = 0;

  // Single process: local comm i is rank i of devices.size(), on devices[i].
  virtual void InitAll(const std::vector<int>& devices) = 0;
  // One process per GPU: rank 0 creates the id, every rank passes the same bytes to InitRank.
  virtual std::string NewUniqueId() = 0;
  virtual void InitRank(const std::string& unique_id, int nranks, int rank, int device) = 0;

  // Bracket the calls that one thread issues on several local comms (NCCL needs it; YALI's
  // versions only check nesting).
  virtual void GroupStart() = 0;
  virtual void GroupEnd() = 0;

  // Issues `call` on local comm `local`. True when it was enqueued (or, inside a group, accepted);
  // false, with the library's message in *refusal, when the library refused the arguments
  // (invalid argument: nothing was enqueued on this rank). Any other failure is fatal.
  virtual bool Issue(int local, const LibraryCall& call, cudaStream_t stream,
                     std::string* refusal) = 0;

  // Issues an AlltoAllv form on local comm `local`, with Issue's conventions (inside the caller's
  // group). A library without the form refuses it, as the default does: NCCL has only
  // kHostCounts, as grouped ncclSend/ncclRecv.
  virtual bool IssueVar(int local, const VarCall& call, cudaStream_t stream, std::string* refusal) {
    *refusal = std::string(Name()) + " has no AlltoAllv form " + VarFormName(call.form);
    return false;
  }

  // Asks the library, without launching anything, whether it would refuse `call` (same
  // convention as Issue). The harness asks every rank before the first call of a case, so that
  // the ranks agree on a refusal before any of them launches: a call that some ranks launch and
  // others refuse could never complete. Libraries that cannot tell accept everything here.
  virtual bool Precheck(int local, const LibraryCall& call, std::string* refusal) { return true; }

  // What `call` on local comm `local` would run with its buffers (registered buffers can change
  // the choice); unknown when the library does not say.
  virtual AlgoChoice Describe(int local, const LibraryCall& call) { return AlgoChoice(); }

  // -R 1 and 2: registers `bytes` at each of buffers[local][k] with local comm `local`, for
  // zero-copy collectives; `mode` is -R's value (a library without a better registration treats
  // 2 as 1). buffers[local] lists that rank's buffers in the same order on every rank, and
  // `bytes` is equal on every rank (YALI's registration is collective and matches registrations
  // by call order and size). Each backend keeps its handles for DeregisterBuffers.
  virtual void RegisterBuffers(const std::vector<std::vector<void*>>& buffers, size_t bytes,
                               int mode) = 0;

  // True when the library runs on memory of its own under -R `mode`: memory of the kind its own
  // test suite gives it and its registration takes. NCCL's (captured buffers in graphs,
  // ncclCommRegister, symmetric windows) takes ncclMemAlloc's cuMem memory, which YALI's, CUDA
  // IPC, cannot share; so NCCL runs on its own in every mode, YALI on the shared cudaMalloc
  // buffers. Such a library runs on a second send and receive buffer per rank, made by
  // AllocateOwnBuffer (as large as the shared ones) and freed by FreeOwnBuffer after DestroyAll.
  virtual bool WantsOwnBuffers(int mode) const { return false; }
  virtual void* AllocateOwnBuffer(int local, size_t bytes) { return nullptr; }
  virtual void FreeOwnBuffer(int local, void* buffer) {}
  // Undoes RegisterBuffers (collective for YALI too); a no-op when nothing is registered. Called
  // before DestroyAll, with no collective in flight.
  virtual void DeregisterBuffers() = 0;

  // The relative rounding error that each reduction step may add, for the #wrong tolerance
  // (unused for the integer types, which are checked exactly). YALI accumulates fp16, bf16 and
  // fp8 in fp32 (yali.h), so fp32's epsilon, and fp64 in fp64; NCCL's ring stores partial results
  // in the element type between steps, so the element type's epsilon.
  virtual double AccumulationEpsilon(DType dtype) const = 0;

  // True, with *message, when local comm `local` recorded an asynchronous error (a peer left, a
  // device-side timeout). Does not synchronize.
  virtual bool HasAsyncError(int local, std::string* message) = 0;

  // Failure path: stop in-flight work without waiting for peers. Must not call Fatal.
  virtual void AbortAll() = 0;
  // Orderly end: frees every local comm.
  virtual void DestroyAll() = 0;
};

std::unique_ptr<Backend> MakeYaliBackend();

// How NCCL's comms are made.
struct NcclOptions {
  int cta_policy = -1;  // -x: ncclConfig_t.CTAPolicy; -1: not set (ncclCommInitAll/InitRank)
  bool own_memory = true;  // --nccl-memory own: NCCL on ncclMemAlloc buffers of its own
};

// nullptr when yali-perf was built without NCCL, or against an NCCL without what `options`
// asks; *reason then says why.
std::unique_ptr<Backend> MakeNcclBackend(const NcclOptions& options, std::string* reason);

}  // namespace yali_perf

#endif  // YALI_PERF_BACKEND_H_
