// The timing loops: one case (collective, dtype, op, root, size, placement; or one column of a
// -C alltoallv line: CaseCalls) on one backend, timed the same way for every library and
// collective, checked, and reduced over ranks.
#ifndef YALI_PERF_HARNESS_H_
#define YALI_PERF_HARNESS_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.h"
#include "coll_shape.h"
#include "collectives.h"
#include "host_exchange.h"
#include "perf_args.h"

namespace yali_perf {

// One GPU that this process drives.
struct RankSlot {
  int rank = 0;    // global rank
  int device = 0;  // CUDA device index in this process
  cudaStream_t stream = nullptr;
  void* send = nullptr;  // World::buffer_bytes each, shared by every case and backend
  void* recv = nullptr;
  unsigned long long* counters = nullptr;  // device: [0] wrong elements, [1] output checksum
  std::vector<cudaEvent_t> events;         // grown on demand, reused across cases
};

struct World {
  int nranks = 1;
  bool multi_process = false;
  HostExchange* exchange = nullptr;  // multi-process only
  std::vector<RankSlot> local;       // single process: all ranks; multi-process: one
  size_t buffer_bytes = 0;           // per buffer per rank, equal on all ranks
  double timeout_s = 120.0;          // bound on every wait for the GPUs and for peers
};

struct TimingOptions {
  TimingMode mode = TimingMode::kEvents;
  int iters = 20;
  int warmup = 5;
  int graph_launches = 1;
  RankAggregate average = RankAggregate::kMean;
  bool check = true;
  // --max-case-time: > 0 shrinks iters and warmup per case to fit (CallCountsWithinTimeLimit).
  double max_case_seconds = 0;
};

// The options as the command line gives them (-n, -w, -G, -a, -c, --timing, --max-case-time).
TimingOptions TimingOptionsFor(const PerfArgs& args);

struct CaseSpec {
  const Collective* collective = nullptr;
  DType dtype = DType::kFloat;
  RedOp op = RedOp::kSum;  // kSum for the collectives that only move data
  int root = 0;            // 0 for the collectives without a root
  CollShape shape;         // ShapeFor(collective, size, element size, nranks)
  bool in_place = false;
  uint64_t seed = 0;
};

struct CaseResult {
  // The library refused the case on every rank (its Precheck, or its first call, returned
  // invalid argument): nothing ran and nothing below is measured.
  bool skipped = false;
  std::string skip_reason;
  // Per call, in microseconds: each rank's time, then min/mean/max over ranks (-a).
  double time_us = 0;
  // One per timed iteration (per graph launch in graph mode, one for throughput mode), per call:
  // the slowest rank's time for that iteration.
  std::vector<double> samples_us;
  // Per call, the host time the slowest process took to issue the first timed calls (every local
  // rank's call of an iteration; harness.cc says how many): events timing only, 0 otherwise.
  double host_issue_us = 0;
  bool checked = false;
  // Out-of-tolerance elements summed over ranks, plus one per rank whose output is not bitwise
  // identical to rank 0's.
  uint64_t wrong = 0;
  std::vector<int> ranks_differing_from_rank0;
  // The timed iterations and warmup calls this case made: TimingOptions' iters and warmup, or
  // fewer under a time limit. The same on every rank.
  CallCounts counts;
};

// One case as the timing loops drive it: the calls it makes on every local rank, the buffers it
// fills before them and the check after its first call. RunCase(CaseSpec) wraps the nccl-tests
// collectives (collectives.h) into one; -C alltoallv brings its own (alltoallv.cc), so that every
// collective is warmed up, timed, checked and reduced over ranks by the same loops.
class CaseCalls {
 public:
  virtual ~CaseCalls() = default;

  // What failure messages call the case: "allreduce", "alltoallv dispatch".
  virtual std::string Name() const = 0;
  // Backend::Precheck of every call local rank `local` would make: false, with *refusal, when the
  // library says it would refuse one. Launches nothing.
  virtual bool Precheck(World& world, Backend& backend, int local, std::string* refusal) = 0;
  // One call of the case on every local rank, each library call grouped across the local comms
  // (IssueGrouped). False, with *refusal, when every local rank's call was refused and nothing
  // launched is left waiting for a peer; a refusal that would leave launched calls waiting is
  // fatal here.
  virtual bool TryIssueAll(World& world, Backend& backend, std::string* refusal) = 0;
  // Enqueues on local rank `local`'s stream (its device is current): with `poison`, all-ones bytes
  // over everything the case's call writes, so that what it fails to write counts as wrong; then
  // the inputs.
  virtual void Prepare(World& world, Backend& backend, int local, bool poison) = 0;
  // Enqueues on the same stream, after the checked call: the number of local rank `local`'s wrong
  // output elements added to counters[0] and, where every rank's output must be the same bits, a
  // checksum of its output added to counters[1] (device memory, both zeroed before).
  virtual void Check(World& world, Backend& backend, int local, unsigned long long* counters) = 0;
};

// Calls issue(local, &message) for every local rank between backend.GroupStart() and GroupEnd(),
// as one thread driving several GPUs must. Returns how many local ranks refused; *refusal is the
// first refusal's message.
size_t IssueGrouped(World& world, Backend& backend,
                    const std::function<bool(int local, std::string* refusal)>& issue,
                    std::string* refusal);

// Creates `backend`'s comms for `world`: all at once in a single process, or rank by rank with an
// id that rank 0 creates and the exchange hands to every process (so everything rank 0 did before
// the call, such as writing a file the library reads at creation, is done before any peer starts).
void InitComms(World& world, Backend& backend);

// -R 1 and 2 (`mode`): registers every local rank's send and receive buffers (the slots' own,
// world.buffer_bytes each) with `backend`'s comms, in the same order on every rank. Call after
// InitComms and the buffers' allocation, before the first case; undo with
// backend.DeregisterBuffers() before DestroyAll.
void RegisterBuffers(World& world, Backend& backend, int mode);

// Runs one case on every rank of `world`. All ranks of a multi-process job call it in step; under
// a time limit they agree on the case's call counts through world.exchange before the timed
// calls, so that every rank makes the same number of collective calls. Before the first call
// they agree on whether the library refuses the case (Backend::Precheck on every rank), and on
// whether it refused the first call itself: a refusal on every rank is a skipped result; a call
// refused on some ranks and launched on others can never complete and is fatal.
CaseResult RunCase(World& world, Backend& backend, CaseCalls& calls, const TimingOptions& options);
// RunCase of one of the nccl-tests collectives.
CaseResult RunCase(World& world, Backend& backend, const CaseSpec& spec,
                   const TimingOptions& options);

// What local rank `local` passes for `spec`: its buffers with the placement's offsets applied.
RankCall CaseRankCall(const World& world, const CaseSpec& spec, int local);

// Waits for every local stream, bounded by world.timeout_s; checks `backend`'s asynchronous
// errors (when not null) and peers' aborts while waiting. Fatal on any failure.
void WaitForStreams(World& world, Backend* backend, const char* what);

// Host barrier among the processes of a multi-process job (a no-op in a single process).
void HostBarrier(World& world, const char* what);

}  // namespace yali_perf

#endif  // YALI_PERF_HARNESS_H_
