// The communication library under test behind one small interface, so that YALI and NCCL run
// through the same timing loops, on the same buffers, in the same process.
#ifndef YALI_PERF_BACKEND_H_
#define YALI_PERF_BACKEND_H_

#include <cuda_runtime.h>

#include <cstddef>
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

// One library's communicators for the GPUs this process drives ("local" index 0..n-1). Every
// failing call is fatal: it reports the call, the result code and the library's own detail.
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

  virtual void AllReduce(int local, const void* send, void* recv, size_t count, DType dtype,
                         RedOp op, cudaStream_t stream) = 0;

  // What AllReduce on local comm `local` would run with these buffers (the ones the case passes:
  // recv for both in place), since registered buffers can change the choice.
  virtual AlgoChoice DescribeAllReduce(int local, const void* send, const void* recv, size_t count,
                                       DType dtype, RedOp op) {
    return AlgoChoice();
  }

  // -R 1: registers `bytes` at each of buffers[local][k] with local comm `local`, for zero-copy
  // collectives. buffers[local] lists that rank's buffers in the same order on every rank, and
  // `bytes` is equal on every rank (YALI's registration is collective and matches registrations
  // by call order and size). Each backend keeps its handles for DeregisterBuffers.
  virtual void RegisterBuffers(const std::vector<std::vector<void*>>& buffers, size_t bytes) = 0;
  // Undoes RegisterBuffers (collective for YALI too); a no-op when nothing is registered. Called
  // before DestroyAll, with no collective in flight.
  virtual void DeregisterBuffers() = 0;

  // The relative rounding error that each reduction step may add, for the #wrong tolerance.
  // YALI accumulates fp16/bf16 in fp32 (yali.h), so fp32's epsilon; NCCL's ring stores partial
  // results in the element type between steps, so the element type's epsilon.
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

// nullptr when yali-perf was built without NCCL; *reason then says why.
std::unique_ptr<Backend> MakeNcclBackend(std::string* reason);

}  // namespace yali_perf

#endif  // YALI_PERF_BACKEND_H_
