#include "harness.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "coll_shape.h"
#include "cuda_check.h"
#include "perf_error.h"

namespace yali_perf {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosecondsBetween(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

// What one rank measured for one case, before the reduction over ranks.
struct RankMeasurement {
  int rank = 0;
  double time_us = 0;               // per call
  std::vector<double> samples_us;   // per call, one per iteration / launch
  double host_issue_us = 0;         // per call, this process's host time issuing it (events timing; 0: not measured)
  uint64_t wrong = 0;
  uint64_t checksum = 0;
  uint64_t checksum_after = 0;      // of the call checked after the timed ones (CheckAfterTiming)
};

void EnsureEvents(RankSlot& slot, size_t needed) {
  if (slot.events.size() >= needed) return;
  YALI_PERF_CUDA(cudaSetDevice(slot.device));
  while (slot.events.size() < needed) {
    cudaEvent_t event;
    YALI_PERF_CUDA(cudaEventCreate(&event));
    slot.events.push_back(event);
  }
}

double EventMicroseconds(cudaEvent_t start, cudaEvent_t end) {
  float milliseconds = 0;
  YALI_PERF_CUDA(cudaEventElapsedTime(&milliseconds, start, end));
  return 1000.0 * static_cast<double>(milliseconds);
}

// A call after the case's first: the library accepted the same call before.
void IssueAll(World& world, Backend& backend, CaseCalls& calls) {
  std::string refusal;
  if (!calls.TryIssueAll(world, backend, &refusal))
    Fatal(std::string(backend.Name()) + " refused a call it accepted before: " + refusal);
}

// Every process's view of a refusal: true when some rank refused; *reason is the lowest such
// rank's message. *everywhere says whether every rank refused. In a single process, this
// process's view is the whole job's.
bool AnyRankRefused(World& world, bool refused_here, std::string* reason, bool* everywhere,
                    const char* what) {
  *everywhere = refused_here;
  if (!world.multi_process) return refused_here;
  std::vector<std::string> all;
  std::string error;
  const std::string mine = refused_here ? "1" + *reason : "0";
  if (!world.exchange->AllGather(mine, &all, &error))
    Fatal(std::string("agreeing on ") + what + ": " + error);
  bool any = false;
  bool every = true;
  for (const std::string& verdict : all) {
    const bool refused = !verdict.empty() && verdict[0] == '1';
    if (refused && !any) *reason = verdict.substr(1);
    any = any || refused;
    every = every && refused;
  }
  *everywhere = every;
  return any;
}

// The library's dry run on every rank before anything is launched: a refusal anywhere skips the
// case everywhere.
bool PrecheckEverywhere(World& world, Backend& backend, CaseCalls& calls, std::string* refusal) {
  bool refused = false;
  for (size_t local = 0; local < world.local.size() && !refused; ++local) {
    YALI_PERF_CUDA(cudaSetDevice(world.local[local].device));
    refused = !calls.Precheck(world, backend, static_cast<int>(local), refusal);
  }
  bool everywhere = false;
  return !AnyRankRefused(world, refused, refusal, &everywhere, "the library's precheck");
}

// The case's first call: the library may still refuse it (a refusal its precheck did not
// foresee). Refused on every rank: nothing ran, the case is skipped. Refused on some ranks only:
// the others' calls can never complete, so this is fatal on every rank.
bool FirstIssueAll(World& world, Backend& backend, CaseCalls& calls, std::string* refusal) {
  const bool refused = !calls.TryIssueAll(world, backend, refusal);
  bool everywhere = false;
  if (!AnyRankRefused(world, refused, refusal, &everywhere, "the first call's refusal"))
    return true;
  if (!everywhere)
    Fatal(std::string(backend.Name()) + " refused " + calls.Name() +
          " on some ranks and launched it on others: " + *refusal);
  return false;
}

void RecordOnAll(World& world, size_t event_index) {
  for (RankSlot& slot : world.local)
    YALI_PERF_CUDA(cudaEventRecord(slot.events[event_index], slot.stream));
}

// Every local rank's buffers, each on its own stream (CaseCalls::Prepare).
void PrepareBuffers(World& world, Backend& backend, CaseCalls& calls, bool poison) {
  for (size_t local = 0; local < world.local.size(); ++local) {
    YALI_PERF_CUDA(cudaSetDevice(world.local[local].device));
    calls.Prepare(world, backend, static_cast<int>(local), poison);
  }
}

// Each local rank's wrong elements and output checksum of the call just made, as
// host_counters[2 * local] and [2 * local + 1].
std::vector<unsigned long long> CountWrong(World& world, Backend& backend, CaseCalls& calls) {
  std::vector<unsigned long long> host_counters(2 * world.local.size(), 0);
  for (size_t local = 0; local < world.local.size(); ++local) {
    RankSlot& slot = world.local[local];
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    YALI_PERF_CUDA(cudaMemsetAsync(slot.counters, 0, 2 * sizeof(unsigned long long), slot.stream));
    calls.Check(world, backend, static_cast<int>(local), slot.counters);
    YALI_PERF_CUDA(cudaMemcpyAsync(&host_counters[2 * local], slot.counters,
                                   2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                   slot.stream));
  }
  WaitForStreams(world, nullptr, "checking the results");
  return host_counters;
}

// One untimed call on freshly filled buffers (the case's first: the library may refuse it), then
// each rank counts its wrong elements and hashes its output. False, with *refusal, when the call
// was refused on every rank.
bool CheckedRun(World& world, Backend& backend, CaseCalls& calls,
                std::vector<RankMeasurement>* measurements, std::string* refusal) {
  PrepareBuffers(world, backend, calls, /*poison=*/true);
  WaitForStreams(world, nullptr, "filling the inputs");
  HostBarrier(world, "before the checked run");
  if (!FirstIssueAll(world, backend, calls, refusal)) return false;
  WaitForStreams(world, &backend, "the checked run");
  const std::vector<unsigned long long> host_counters = CountWrong(world, backend, calls);
  for (size_t local = 0; local < world.local.size(); ++local) {
    (*measurements)[local].wrong = host_counters[2 * local];
    (*measurements)[local].checksum = host_counters[2 * local + 1];
  }
  return true;
}

// `calls_per_rank` calls of the case on every local rank's stream, captured into one CUDA graph
// per rank (relaxed capture mode: see TimeWithGraph), instantiated.
std::vector<cudaGraphExec_t> CaptureCalls(World& world, Backend& backend, CaseCalls& calls, int calls_per_rank) {
  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    YALI_PERF_CUDA(cudaStreamBeginCapture(slot.stream, cudaStreamCaptureModeRelaxed));
  }
  for (int i = 0; i < calls_per_rank; ++i) IssueAll(world, backend, calls);
  std::vector<cudaGraphExec_t> executables(world.local.size(), nullptr);
  for (size_t local = 0; local < world.local.size(); ++local) {
    RankSlot& slot = world.local[local];
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    cudaGraph_t graph = nullptr;
    YALI_PERF_CUDA(cudaStreamEndCapture(slot.stream, &graph));
    YALI_PERF_CUDA(cudaGraphInstantiate(&executables[local], graph, 0));
    YALI_PERF_CUDA(cudaGraphDestroy(graph));
  }
  return executables;
}

// nccl-tests' check, after the timed calls: fresh inputs and poisoned outputs, then one more call
// of the case, made as the timed ones were (in graph mode launched from a graph that captured it),
// on the state the timed calls left behind (a library's epochs, flags, sequence numbers, caches),
// and checked like the first. Its wrong elements add to the case's #wrong and its checksum must
// agree across ranks too, so that a library fast and wrong after many back-to-back calls or graph
// replays cannot show 0 wrong on the strength of its first call alone.
void CheckAfterTiming(World& world, Backend& backend, CaseCalls& calls, TimingMode mode,
                      std::vector<RankMeasurement>* measurements) {
  PrepareBuffers(world, backend, calls, /*poison=*/true);
  WaitForStreams(world, nullptr, "filling the inputs for the check after the timed calls");
  HostBarrier(world, "before the check after the timed calls");
  if (mode == TimingMode::kGraph) {
    const std::vector<cudaGraphExec_t> executables = CaptureCalls(world, backend, calls, 1);
    for (size_t local = 0; local < world.local.size(); ++local) {
      YALI_PERF_CUDA(cudaSetDevice(world.local[local].device));
      YALI_PERF_CUDA(cudaGraphLaunch(executables[local], world.local[local].stream));
    }
    WaitForStreams(world, &backend, "the graph-launched call checked after the timed calls");
    for (size_t local = 0; local < world.local.size(); ++local) {
      YALI_PERF_CUDA(cudaSetDevice(world.local[local].device));
      YALI_PERF_CUDA(cudaGraphExecDestroy(executables[local]));
    }
  } else {
    IssueAll(world, backend, calls);
    WaitForStreams(world, &backend, "the call checked after the timed calls");
  }
  const std::vector<unsigned long long> host_counters = CountWrong(world, backend, calls);
  for (size_t local = 0; local < world.local.size(); ++local) {
    (*measurements)[local].wrong += host_counters[2 * local];
    (*measurements)[local].checksum_after = host_counters[2 * local + 1];
  }
}

void Warmup(World& world, Backend& backend, CaseCalls& calls, int iterations) {
  for (int i = 0; i < iterations; ++i) IssueAll(world, backend, calls);
  WaitForStreams(world, &backend, "the warmup iterations");
}

// The time per call that every rank uses to size a case under --max-case-time: the smallest of
// the ranks' estimates. Each rank's clock also counts the time it waited for peers that started
// the call later (the settling call before brings the ranks close, but a process that is
// descheduled for a moment lags), and that skew could make a small size look slow enough to be
// cut; the last rank to start waited for nobody, so its figure is the collective's own time,
// which is common to all ranks. Every rank reduces the same gathered values, so all get the same
// estimate and hence the same counts.
double AgreedSecondsPerCall(World& world, double mine) {
  if (!world.multi_process) return mine;
  std::string blob(reinterpret_cast<const char*>(&mine), sizeof(mine));
  std::vector<std::string> all;
  std::string error;
  if (!world.exchange->AllGather(blob, &all, &error))
    Fatal("agreeing on the time per call: " + error);
  double agreed = mine;
  for (size_t r = 0; r < all.size(); ++r) {
    double theirs = 0;
    if (all[r].size() != sizeof(theirs))
      Fatal("malformed time per call from rank " + std::to_string(r));
    std::memcpy(&theirs, all[r].data(), sizeof(theirs));
    agreed = std::min(agreed, theirs);
  }
  return agreed;
}

// The untimed calls before a case's timed ones, and the case's call counts. Without a time limit,
// -w calls and -n iterations. With one, the first kTimeLimitProbeCalls warmup calls estimate the
// time per call (all but the last settle the case's first-call set-up; the last is timed alone,
// on the host clock, GPUs idle before and after), the ranks agree on the estimate, and the rest
// of the warmup and the timed iterations are sized from it.
CallCounts WarmUpAndDecideCounts(World& world, Backend& backend, CaseCalls& calls,
                                  const TimingOptions& options) {
  static_assert(kTimeLimitProbeCalls >= 2, "one settling call, then one timed call");
  HostBarrier(world, "before the warmup");
  if (!(options.max_case_seconds > 0)) {
    Warmup(world, backend, calls, options.warmup);
    return CallCounts{options.iters, options.warmup};
  }
  Warmup(world, backend, calls, kTimeLimitProbeCalls - 1);
  Clock::time_point start = Clock::now();
  IssueAll(world, backend, calls);
  WaitForStreams(world, &backend, "the call that times the case");
  double mine = std::chrono::duration<double>(Clock::now() - start).count();
  CallCounts counts = CallCountsWithinTimeLimit(
      options.iters, options.warmup, options.max_case_seconds, AgreedSecondsPerCall(world, mine),
      CallsPerIteration(options.mode, options.graph_launches));
  Warmup(world, backend, calls, counts.warmup - kTimeLimitProbeCalls);
  return counts;
}

// Events recorded between iterations: one per iteration up to this many iterations; beyond, one
// per group of consecutive iterations (the sample is then the group's time per call), so that
// -n 1000000 does not create a million events.
constexpr int kMaxTimingEvents = 10000;

int IterationsPerSample(int iterations) {
  return (iterations + kMaxTimingEvents - 1) / kMaxTimingEvents;
}

// Per-call samples from events recorded after every `group` iterations (the last group may be
// shorter) out of `iterations`, each divided by `calls_per_iteration`.
std::vector<double> GroupSamples(const RankSlot& slot, int iterations, int group,
                                 double calls_per_iteration) {
  std::vector<double> samples;
  int event = 0;
  for (int start = 0; start < iterations; start += group, ++event) {
    int size = std::min(group, iterations - start);
    samples.push_back(EventMicroseconds(slot.events[event], slot.events[event + 1]) /
                      (size * calls_per_iteration));
  }
  return samples;
}

// nccl-tests' block of -n back-to-back calls, with nothing else enqueued between them, after a host
// barrier; nccl-tests times it on the host clock up to its completion, yali-perf with CUDA events
// around it on each rank's stream (the GPU's time, without the host's final synchronization).
// That block gives the reported time. A second block of -n calls with
// an event between consecutive calls gives the per-iteration distribution (its extra event
// records cost host time per call, so it never feeds the headline figure).
void TimeWithEvents(World& world, Backend& backend, CaseCalls& calls,
                    const TimingOptions& options, std::vector<RankMeasurement>* measurements) {
  const int group = IterationsPerSample(options.iters);
  const int nevents = std::max(2, (options.iters + group - 1) / group + 1);
  for (RankSlot& slot : world.local) EnsureEvents(slot, nevents);

  HostBarrier(world, "before the timed calls");  // as nccl-tests, and as the graph mode below
  RecordOnAll(world, 0);
  // The host's side of the same calls: how long this process took to issue them (every local
  // rank's), per call, over the first kHostIssueCalls only: fewer launches than CUDA's launch
  // queue holds, so that issuing never waits there for the GPU. Near time_us, the run is bound by
  // the host, not the GPUs.
  constexpr int kHostIssueCalls = 100;
  const int probe = std::min(options.iters, kHostIssueCalls);
  double host_issue_us = 0;
  const Clock::time_point issue_start = Clock::now();
  for (int i = 0; i < options.iters; ++i) {
    IssueAll(world, backend, calls);
    if (i + 1 == probe) host_issue_us = MicrosecondsBetween(issue_start, Clock::now()) / probe;
  }
  RecordOnAll(world, 1);
  WaitForStreams(world, &backend, "the timed iterations");
  for (size_t local = 0; local < world.local.size(); ++local) {
    RankSlot& slot = world.local[local];
    (*measurements)[local].time_us = EventMicroseconds(slot.events[0], slot.events[1]) / options.iters;
    (*measurements)[local].host_issue_us = host_issue_us;
  }

  RecordOnAll(world, 0);
  int recorded = 1;
  for (int i = 0; i < options.iters; ++i) {
    IssueAll(world, backend, calls);
    if ((i + 1) % group == 0 || i + 1 == options.iters) RecordOnAll(world, recorded++);
  }
  WaitForStreams(world, &backend, "the per-iteration samples");
  for (size_t local = 0; local < world.local.size(); ++local)
    (*measurements)[local].samples_us = GroupSamples(world.local[local], options.iters, group, 1.0);
}

// The -n calls of each rank captured into one CUDA graph, launched -G times between events.
void TimeWithGraph(World& world, Backend& backend, CaseCalls& calls,
                   const TimingOptions& options, std::vector<RankMeasurement>* measurements) {
  const int launches = std::max(1, options.graph_launches);
  const int group = IterationsPerSample(launches);
  const int nevents = (launches + group - 1) / group + 1;
  for (RankSlot& slot : world.local) EnsureEvents(slot, nevents);

  // Relaxed capture mode: a call that is unsafe during a capture (a cudaMalloc, a pointer query
  // on a buffer not seen before) is allowed and simply not recorded, instead of invalidating the
  // capture; the plain warmup calls before (RunCase) have already made such calls, so the graph
  // holds only the launches.
  const std::vector<cudaGraphExec_t> executables = CaptureCalls(world, backend, calls, options.iters);

  auto launch_all = [&]() {
    for (size_t local = 0; local < world.local.size(); ++local)
      YALI_PERF_CUDA(cudaGraphLaunch(executables[local], world.local[local].stream));
  };
  launch_all();  // the first launch uploads the graph; keep it out of the timing
  WaitForStreams(world, &backend, "the warmup graph launch");
  HostBarrier(world, "before the timed graph launches");
  RecordOnAll(world, 0);
  int recorded = 1;
  for (int g = 0; g < launches; ++g) {
    launch_all();
    if ((g + 1) % group == 0 || g + 1 == launches) RecordOnAll(world, recorded++);
  }
  WaitForStreams(world, &backend, "the timed graph launches");

  const double timed_calls = static_cast<double>(options.iters) * launches;
  for (size_t local = 0; local < world.local.size(); ++local) {
    RankSlot& slot = world.local[local];
    RankMeasurement& m = (*measurements)[local];
    m.time_us = EventMicroseconds(slot.events[0], slot.events[nevents - 1]) / timed_calls;
    m.samples_us = GroupSamples(slot, launches, group, options.iters);
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    YALI_PERF_CUDA(cudaGraphExecDestroy(executables[local]));
  }
}

// Host clock around -n back-to-back calls, all local GPUs idle before and after.
void TimeWithHostThroughput(World& world, Backend& backend, CaseCalls& calls,
                            const TimingOptions& options,
                            std::vector<RankMeasurement>* measurements) {
  Clock::time_point start = Clock::now();
  for (int i = 0; i < options.iters; ++i) IssueAll(world, backend, calls);
  WaitForStreams(world, &backend, "the timed iterations");
  double per_call = MicrosecondsBetween(start, Clock::now()) / options.iters;
  for (RankMeasurement& m : *measurements) {
    m.time_us = per_call;
    m.samples_us.assign(1, per_call);
  }
}

// Host clock around each call, waiting for it to finish before issuing the next: the latency an
// application sees when it needs the result right away.
void TimeWithHostLatency(World& world, Backend& backend, CaseCalls& calls,
                         const TimingOptions& options, std::vector<RankMeasurement>* measurements) {
  std::vector<double> samples(options.iters);
  double total = 0;
  for (int i = 0; i < options.iters; ++i) {
    Clock::time_point start = Clock::now();
    IssueAll(world, backend, calls);
    WaitForStreams(world, &backend, "a timed call");
    samples[i] = MicrosecondsBetween(start, Clock::now());
    total += samples[i];
  }
  for (RankMeasurement& m : *measurements) {
    m.time_us = total / options.iters;
    m.samples_us = samples;
  }
}

// ---- Reduction over ranks -----------------------------------------------------------------------

template <typename T>
void AppendRaw(std::string* blob, const T& value) {
  blob->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
bool ReadRaw(const std::string& blob, size_t* offset, T* value) {
  if (*offset + sizeof(T) > blob.size()) return false;
  std::memcpy(value, blob.data() + *offset, sizeof(T));
  *offset += sizeof(T);
  return true;
}

std::string Serialize(const RankMeasurement& m) {
  std::string blob;
  AppendRaw(&blob, m.rank);
  AppendRaw(&blob, m.time_us);
  AppendRaw(&blob, m.host_issue_us);
  AppendRaw(&blob, m.wrong);
  AppendRaw(&blob, m.checksum);
  AppendRaw(&blob, m.checksum_after);
  AppendRaw(&blob, static_cast<uint64_t>(m.samples_us.size()));
  for (double sample : m.samples_us) AppendRaw(&blob, sample);
  return blob;
}

bool Deserialize(const std::string& blob, RankMeasurement* m) {
  size_t offset = 0;
  uint64_t nsamples = 0;
  if (!ReadRaw(blob, &offset, &m->rank) || !ReadRaw(blob, &offset, &m->time_us) ||
      !ReadRaw(blob, &offset, &m->host_issue_us) || !ReadRaw(blob, &offset, &m->wrong) || !ReadRaw(blob, &offset, &m->checksum) ||
      !ReadRaw(blob, &offset, &m->checksum_after) || !ReadRaw(blob, &offset, &nsamples))
    return false;
  m->samples_us.resize(nsamples);
  for (uint64_t i = 0; i < nsamples; ++i)
    if (!ReadRaw(blob, &offset, &m->samples_us[i])) return false;
  return offset == blob.size();
}

// Every rank's measurement, in rank order.
std::vector<RankMeasurement> GatherMeasurements(World& world,
                                                const std::vector<RankMeasurement>& mine) {
  if (!world.multi_process) {
    std::vector<RankMeasurement> all = mine;
    std::sort(all.begin(), all.end(),
              [](const RankMeasurement& a, const RankMeasurement& b) { return a.rank < b.rank; });
    return all;
  }
  std::vector<std::string> blobs;
  std::string error;
  if (!world.exchange->AllGather(Serialize(mine.at(0)), &blobs, &error))
    Fatal("gathering the measurements: " + error);
  std::vector<RankMeasurement> all(blobs.size());
  for (size_t r = 0; r < blobs.size(); ++r) {
    if (!Deserialize(blobs[r], &all[r]) || all[r].rank != static_cast<int>(r))
      Fatal("malformed measurement from rank " + std::to_string(r));
  }
  return all;
}

CaseResult Reduce(const std::vector<RankMeasurement>& all, const TimingOptions& options) {
  CaseResult result;
  double sum = 0;
  double min_time = all[0].time_us;
  double max_time = all[0].time_us;
  for (const RankMeasurement& m : all) {
    sum += m.time_us;
    min_time = std::min(min_time, m.time_us);
    max_time = std::max(max_time, m.time_us);
  }
  switch (options.average) {
    case RankAggregate::kRank0: result.time_us = all[0].time_us; break;  // all: in rank order
    case RankAggregate::kMin: result.time_us = min_time; break;
    case RankAggregate::kMean: result.time_us = sum / all.size(); break;
    case RankAggregate::kMax: result.time_us = max_time; break;
  }
  // The slowest process's issue time: the one the collective waited for.
  for (const RankMeasurement& m : all) result.host_issue_us = std::max(result.host_issue_us, m.host_issue_us);
  // An iteration of a collective is done when its slowest rank is done.
  result.samples_us = all[0].samples_us;
  for (const RankMeasurement& m : all)
    for (size_t i = 0; i < result.samples_us.size() && i < m.samples_us.size(); ++i)
      result.samples_us[i] = std::max(result.samples_us[i], m.samples_us[i]);

  result.checked = options.check;
  if (options.check) {
    for (const RankMeasurement& m : all) {
      result.wrong += m.wrong;
      if (m.checksum != all[0].checksum || m.checksum_after != all[0].checksum_after) {
        result.ranks_differing_from_rank0.push_back(m.rank);
        result.wrong += 1;
      }
    }
  }
  return result;
}

}  // namespace

namespace {

// The nccl-tests collectives (collectives.h) as a case. Each phase of a collective's calls is
// grouped across the local comms; a refusal in a later phase, after the earlier ones were
// launched, leaves those waiting for peers that never come: fatal.
class CollectiveCalls final : public CaseCalls {
 public:
  explicit CollectiveCalls(const CaseSpec& spec) : spec_(spec) {}

  std::string Name() const override { return CollName(spec_.collective->id); }

  bool Precheck(World& world, Backend& backend, int local, std::string* refusal) override {
    return spec_.collective->precheck(backend, local, CaseRankCall(world, spec_, local), refusal);
  }

  bool TryIssueAll(World& world, Backend& backend, std::string* refusal) override {
    const Collective& collective = *spec_.collective;
    for (int phase = 0; phase < collective.phases; ++phase) {
      const size_t refused = IssueGrouped(
          world, backend,
          [&](int local, std::string* message) {
            return collective.issue(backend, local, CaseRankCall(world, spec_, local), phase,
                                    world.local[local].stream, message);
          },
          refusal);
      if (refused == 0) continue;
      if (phase == 0 && refused == world.local.size()) return false;
      Fatal(std::string(backend.Name()) + " refused " + CollName(collective.id) + " on " +
            std::to_string(refused) + " of " + std::to_string(world.local.size()) +
            " local rank(s)" +
            (phase > 0 ? " in phase " + std::to_string(phase + 1) : std::string()) +
            " after launching it elsewhere (the launched calls cannot complete): " + *refusal);
    }
    return true;
  }

  // In place the input is written after the poison, over the part of the output it shares.
  void Prepare(World& world, Backend& backend, int local, bool poison) override {
    const RankSlot& slot = world.local[local];
    const RankCall call = CaseRankCall(world, spec_, local);
    if (poison)
      PoisonBuffer(call.recv, OutputElements(world, slot) * ElementSize(spec_.dtype), slot.stream);
    // Every rank's input is filled, the root's and the others' alike: a library that reads a
    // non-root's buffer for the root's data gets other values.
    FillInput(const_cast<void*>(call.send), spec_.shape.send_count,
              MakeDataSpec(world, backend, slot), slot.stream);
  }

  void Check(World& world, Backend& backend, int local, unsigned long long* counters) override {
    const RankSlot& slot = world.local[local];
    const RankCall call = CaseRankCall(world, spec_, local);
    const size_t elements = OutputElements(world, slot);
    CountWrong(call.recv, elements, MakeDataSpec(world, backend, slot), &counters[0], slot.stream);
    // Only where every rank's output should be the same bits; elsewhere the checksum stays 0 on
    // every rank, which compares equal.
    if (CollSameOutputEverywhere(spec_.collective->id))
      LaunchChecksum(call.recv, elements * ElementSize(spec_.dtype), &counters[1], slot.stream);
  }

 private:
  DataSpec MakeDataSpec(const World& world, const Backend& backend, const RankSlot& slot) const {
    DataSpec data;
    data.coll = spec_.collective->id;
    data.dtype = spec_.dtype;
    data.op = spec_.op;
    data.count = spec_.shape.count;
    data.seed = spec_.seed;
    data.rank = slot.rank;
    data.nranks = world.nranks;
    data.root = spec_.root;
    data.accumulation_eps = backend.AccumulationEpsilon(spec_.dtype);
    return data;
  }

  // Elements of the rank's output that the case writes (0 off the root of reduce and gather).
  size_t OutputElements(const World& world, const RankSlot& slot) const {
    return OutputCount(spec_.collective->id, spec_.shape, slot.rank, spec_.root, world.nranks);
  }

  const CaseSpec spec_;
};

}  // namespace

TimingOptions TimingOptionsFor(const PerfArgs& args) {
  TimingOptions timing;
  timing.mode = args.timing;
  timing.iters = args.iters;
  timing.warmup = args.warmup;
  timing.graph_launches = args.graph_launches;
  timing.average = args.average;
  timing.check = args.check;
  timing.max_case_seconds = args.max_case_seconds;
  return timing;
}

size_t IssueGrouped(World& world, Backend& backend,
                    const std::function<bool(int local, std::string* refusal)>& issue,
                    std::string* refusal) {
  size_t refused = 0;
  backend.GroupStart();
  for (size_t local = 0; local < world.local.size(); ++local) {
    std::string message;
    if (!issue(static_cast<int>(local), &message) && refused++ == 0) *refusal = message;
  }
  backend.GroupEnd();
  return refused;
}

CaseResult RunCase(World& world, Backend& backend, const CaseSpec& spec,
                   const TimingOptions& options) {
  CollectiveCalls calls(spec);
  return RunCase(world, backend, calls, options);
}

RankCall CaseRankCall(const World& world, const CaseSpec& spec, int local) {
  const RankSlot& slot = world.local[local];
  const size_t element_bytes = ElementSize(spec.dtype);
  const size_t rank = static_cast<size_t>(slot.rank);
  char* recv = static_cast<char*>(slot.recv);
  RankCall call;
  // In place, input and output both lie in the receive buffer, where NCCL defines them per
  // collective (CollShape's offsets); out of place, each starts its own buffer.
  call.send = spec.in_place ? recv + rank * spec.shape.send_in_place_offset * element_bytes
                            : slot.send;
  call.recv = spec.in_place ? recv + rank * spec.shape.recv_in_place_offset * element_bytes : recv;
  call.count = spec.shape.count;
  call.dtype = spec.dtype;
  call.op = spec.op;
  call.root = spec.root;
  call.rank = slot.rank;
  call.nranks = world.nranks;
  return call;
}

void HostBarrier(World& world, const char* what) {
  if (!world.multi_process) return;
  std::string error;
  if (!world.exchange->Barrier(&error)) Fatal(std::string("host barrier ") + what + ": " + error);
}

void WaitForStreams(World& world, Backend* backend, const char* what) {
  const Clock::time_point start = Clock::now();
  Clock::time_point next_health_check = start + std::chrono::milliseconds(100);
  // Spin without sleeping: in latency mode this loop is part of what is measured.
  for (;;) {
    bool all_done = true;
    for (RankSlot& slot : world.local) {
      cudaError_t status = cudaStreamQuery(slot.stream);
      if (status == cudaErrorNotReady) {
        all_done = false;
      } else if (status != cudaSuccess) {
        CheckCuda(status, "cudaStreamQuery", __FILE__, __LINE__);
      }
    }
    if (all_done) return;
    Clock::time_point now = Clock::now();
    if (now < next_health_check) continue;
    next_health_check = now + std::chrono::milliseconds(100);
    std::string message;
    if (backend != nullptr) {
      for (size_t local = 0; local < world.local.size(); ++local)
        if (backend->HasAsyncError(static_cast<int>(local), &message))
          Fatal(std::string("during ") + what + ": " + message);
    }
    if (world.exchange != nullptr && world.exchange->PeerAborted(&message))
      Fatal(std::string("during ") + what + ": " + message);
    double waited_s = std::chrono::duration<double>(now - start).count();
    if (waited_s > world.timeout_s) {
      Fatal(std::string("the GPU work of ") + what + " did not finish within " +
            std::to_string(static_cast<int>(world.timeout_s)) +
            " s (a peer may have failed or hung; raise YALI_PERF_TIMEOUT_S for very long runs)");
    }
  }
}

void InitComms(World& world, Backend& backend) {
  if (!world.multi_process) {
    std::vector<int> devices;
    for (const RankSlot& slot : world.local) devices.push_back(slot.device);
    backend.InitAll(devices);
    return;
  }
  const RankSlot& slot = world.local[0];
  std::string id = slot.rank == 0 ? backend.NewUniqueId() : std::string();
  std::string error;
  if (!world.exchange->Broadcast(0, &id, &error))
    Fatal(std::string("sharing the ") + backend.Name() + " unique id: " + error);
  backend.InitRank(id, world.nranks, slot.rank, slot.device);
}

void RegisterBuffers(World& world, Backend& backend, int mode) {
  std::vector<std::vector<void*>> buffers;
  for (const RankSlot& slot : world.local) buffers.push_back({slot.send, slot.recv});
  // YALI's registration waits for every peer's (bounded by YALI_TIMEOUT_MS): arriving together
  // keeps a slow peer from looking like a hung one, and a peer that failed before is reported
  // here by the exchange instead.
  const std::string what = std::string("before registering the ") + backend.Name() + " buffers";
  HostBarrier(world, what.c_str());
  backend.RegisterBuffers(buffers, world.buffer_bytes, mode);
}

CaseResult RunCase(World& world, Backend& backend, CaseCalls& calls,
                   const TimingOptions& options) {
  std::vector<RankMeasurement> mine(world.local.size());
  for (size_t local = 0; local < world.local.size(); ++local) mine[local].rank = world.local[local].rank;

  CaseResult skipped;
  skipped.skipped = true;
  if (!PrecheckEverywhere(world, backend, calls, &skipped.skip_reason)) return skipped;
  if (options.check) {
    if (!CheckedRun(world, backend, calls, &mine, &skipped.skip_reason)) return skipped;
  } else {
    // Defined data even when unchecked, so that no timing runs on NaNs or denormals by accident.
    PrepareBuffers(world, backend, calls, /*poison=*/false);
    WaitForStreams(world, nullptr, "filling the inputs");
    // The case's first call, where a refusal is still a skipped result rather than a failure:
    // one untimed call more than -w asks for.
    HostBarrier(world, "before the first call");
    if (!FirstIssueAll(world, backend, calls, &skipped.skip_reason)) return skipped;
    WaitForStreams(world, &backend, "the first call");
  }
  // Plain warmup calls first, in every mode: a library that sets things up lazily on its first
  // call must not do that inside a graph capture.
  const CallCounts counts = WarmUpAndDecideCounts(world, backend, calls, options);
  TimingOptions sized = options;
  sized.iters = counts.iters;
  sized.warmup = counts.warmup;
  // The timed iterations run on whatever the checked run left in the buffers: refilling between
  // iterations would time the fill too.
  switch (sized.mode) {
    case TimingMode::kEvents: TimeWithEvents(world, backend, calls, sized, &mine); break;
    case TimingMode::kGraph: TimeWithGraph(world, backend, calls, sized, &mine); break;
    case TimingMode::kThroughput:
      TimeWithHostThroughput(world, backend, calls, sized, &mine);
      break;
    case TimingMode::kLatency: TimeWithHostLatency(world, backend, calls, sized, &mine); break;
  }
  if (options.check) CheckAfterTiming(world, backend, calls, sized.mode, &mine);
  CaseResult result = Reduce(GatherMeasurements(world, mine), sized);
  result.counts = counts;
  return result;
}

}  // namespace yali_perf
