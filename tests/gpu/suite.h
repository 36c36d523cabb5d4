// The GPU test suite's case library, shared by yali-gpu-tests (fork launcher: single- and
// multi-process modes) and yali-gpu-tests-mpi (MPI launcher).
//
// A case is a function of a Ctx. The Ctx knows the ranks this process drives ("local ranks": all n
// in single-process mode, one in multi-process modes) and a World: the processes taking part, with
// a barrier and an allgather of bytes. Case code is written once for both shapes: it loops over the
// local ranks for every step, and uses the World only for what must cross processes (unique ids,
// output hashes, agreeing on a skip).
//
// Every collective step (comm creation, allreduce, verification) must be reached by every process in
// the same order, so a case's control flow may depend only on values all processes share (the
// options, the seed, results combined with Ctx::allTrue).
#ifndef YALI_TESTS_GPU_SUITE_H_
#define YALI_TESTS_GPU_SUITE_H_

#include <cuda_runtime.h>
#include <yali/yali.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data.h"

namespace yt {

// ---- Processes ----------------------------------------------------------------------------------

class World {
 public:
  virtual ~World() = default;
  virtual int rank() const = 0;  // this process, 0..size()-1
  virtual int size() const = 0;  // processes taking part
  virtual void barrier() = 0;
  // all[p * bytes .. (p+1) * bytes) = process p's `mine`. Collective.
  virtual void allgather(const void* mine, void* all, size_t bytes) = 0;
  // The k-th unique id of this case when the launcher made it before starting the processes (the
  // fork launcher's parent does); false otherwise, and Ctx makes one on process 0 and shares it.
  virtual bool presetUniqueId(int /*k*/, yaliUniqueId* /*id*/) { return false; }
};

// ---- Options and modes --------------------------------------------------------------------------

enum class Mode { Single, Multi, Mpi };
const char* modeName(Mode m);

enum class CaptureMode { Relaxed, ThreadLocal, Global };

struct Options {
  int ranks = 0;               // 0: all visible GPUs (at most 8)
  bool single = true, multi = true;
  std::string filter;          // run cases whose name contains it
  bool quick = false;          // fewer sizes and repetitions
  uint64_t seed = 0x5EED0001;  // base seed; every case and replay derives its own
  double deadlineScale = 1.0;  // multiplies every case's deadline
  CaptureMode capture = CaptureMode::ThreadLocal;
  bool list = false;
  // More ranks than GPUs: rank r runs on GPU r % visible, with YALI_ALLOW_SHARED_GPU=1. Checks the
  // algorithms where GPUs are few; says nothing of NVLink's memory ordering or speed.
  bool shareGpus = false;
  // Single mode in this process, case after case (no forked children, no parent watchdog), for
  // tools that follow one process (compute-sanitizer, cuda-gdb). A fatal failure ends the run.
  bool inProcess = false;
};

// The GPU of `rank` when `visible` GPUs are visible (rank % visible: only --share-gpus runs more
// ranks than GPUs). Sets YALI_ALLOW_SHARED_GPU=1 in this process when ranks share one.
int deviceOfRank(const Options& opt, int rank, int nranks, int visible);

// Parses the shared options; returns false (after printing usage) on an error. `--help` prints
// usage and exits 0.
bool parseOptions(int argc, char** argv, bool mpi, Options* opt);

// ---- Cases --------------------------------------------------------------------------------------

class Ctx;
struct CaseDef {
  const char* name;
  const char* what;
  double deadlineSeconds;  // a case still running after this is killed and FAILS
  void (*fn)(Ctx&);
};
const std::vector<CaseDef>& allCases();
// The registered-buffer cases (cases_registered.cc); allCases() includes them.
const std::vector<CaseDef>& registeredCases();
// The failure, lifetime and soak cases (cases_trust.cc); allCases() includes them.
const std::vector<CaseDef>& trustCases();
bool caseSelected(const CaseDef& c, const Options& opt);

// trust_epoch_wrap (cases_trust.cc) crosses the launch counter's wrap with every algorithm family;
// the parts for the other collectives live beside the helpers they use. kEpochMax is the last
// launch epoch before the wrap (the library's kEpochLimit, 2^32 - 1): a comm made with
// YALI_TEST_EPOCH_START=kEpochMax - k wraps at its launch k (from 0; a launch is one kernel, so a
// copy-engine call does not count). Collective.
constexpr uint64_t kEpochMax = 4294967295ull;
void epochWrapExchange(Ctx& ctx);   // cases_collectives.cc: LL, staged, direct, copy engines
void epochWrapAlltoAllv(Ctx& ctx);  // cases_alltoallv.cc: alltoallv_staged

// Exit codes of a case's process.
constexpr int kExitPass = 0;
constexpr int kExitFail = 1;
constexpr int kExitSkip = 77;

// ---- Watchdog: names the stuck step and ends the process ----------------------------------------

// Starts (once) a thread that, when the armed deadline passes, prints the case and its current
// step and calls _exit(kExitFail).
void watchdogArm(const char* caseName, Mode mode, int nranks, double seconds);
void watchdogDisarm();
void watchdogStep(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Called (when set) instead of _exit by fatal errors and the watchdog; the MPI launcher sets it to
// MPI_Abort so that the whole job ends.
extern void (*gFatalHook)(int code);

// Writes one line (prefix + text + '\n') to stdout with a single write(2), so lines from several
// processes do not interleave.
void logLine(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- Per-process context of one case run --------------------------------------------------------

struct LocalRank {
  int rank;                  // rank in the communicator
  int dev;                   // CUDA device
  cudaStream_t stream;       // the case's main stream on that device
  VerifyResult* scratch;     // device scratch of the checker
};

class Ctx {
 public:
  Ctx(World* world, Mode mode, int nranks, const Options& opt, const CaseDef& c,
      const std::vector<int>& localRanks, const std::vector<int>& localDevs);
  ~Ctx();

  World* world;
  Mode mode;
  int nranks;
  const Options& opt;
  const CaseDef& def;
  std::vector<LocalRank> local;

  bool quick() const { return opt.quick; }
  bool single() const { return mode == Mode::Single; }

  // Reporting. fail() marks the case failed and goes on; fatal() ends this process (the case
  // fails: a rank that cannot go on would leave its peers waiting).
  void fail(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  void note(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  [[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  int failures() const { return failures_; }
  // Collective: true when every process passes ok. When false, the case is reported SKIPPED with
  // `why` (unless something already failed).
  bool requireAll(bool ok, const char* why);
  bool skipped() const { return skipped_; }
  const std::string& skipReason() const { return skipReason_; }
  // Collective AND of ok over all processes.
  bool allTrue(bool ok);

  // The seed of the next input set: the same sequence on every rank.
  uint64_t nextSeed();

  // Collective: a unique id shared by all processes.
  yaliUniqueId sharedUniqueId();

  // Collective: creates one communicator per local rank (single: yaliCommInitAll over the local
  // devices, or `devlist`; multi: yaliCommInitRank with a fresh shared id on the current device).
  // Fatal on failure.
  std::vector<yaliComm_t> createComms(const char* label, const int* devlist = nullptr);
  // yaliCommDestroy on each; records a failure for any error. Collective.
  void destroyComms(std::vector<yaliComm_t>& comms, const char* label);

  // Exit code of this process for the case.
  int exitCode() const;

  // CUDA call that must succeed, else fatal.
  void cuda(cudaError_t e, const char* what, int line);

 private:
  int failures_ = 0;
  bool skipped_ = false;
  std::string skipReason_;
  uint64_t seedCounter_ = 0;
  int idCounter_ = 0;
};

#define CUDA_OK(ctx, call) (ctx).cuda((call), #call, __LINE__)

// Runs one case in this process (watchdog armed, streams created), returns the exit code. Used by
// both launchers in the process that drives the case's local ranks.
int runCaseHere(World* world, Mode mode, int nranks, const Options& opt, const CaseDef& c,
                const std::vector<int>& localRanks, const std::vector<int>& localDevs);

}  // namespace yt

#endif  // YALI_TESTS_GPU_SUITE_H_
