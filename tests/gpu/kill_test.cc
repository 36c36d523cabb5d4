// yali-kill-test: one rank SIGKILLed in the middle of collectives. What must hold (the library's
// failure contract, include/yali/yali.h):
//   1. every surviving rank sees an error within about one YALI_TIMEOUT_MS of the kill (T + S:
//      --slack-ms, T / 2 by default), and it is yaliTimeout on every survivor (the first survivor
//      to time out tells the others: one waiting on a survivor must not time out on its own later);
//   2. the survivor's streams drain: cudaStreamQuery / cudaStreamSynchronize return cudaSuccess
//      (YALI kernels end cleanly, they never trap; a copy-engine call's stream is released), and
//      yaliCommGetAsyncError reports the error without synchronizing (it is polled while the
//      stream still runs);
//   3. a later call on the failed comm returns the error instead of launching;
//   4. yaliCommAbort returns yaliSuccess in under 2 s;
//   5. the survivor can then create a NEW communicator among the survivors and run correct
//      collectives on it, and destroy it;
// and nothing hangs: every wait here is bounded, and the parent kills everything past a deadline.
//
// Shape: the parent never initializes CUDA (like yali-gpu-tests' parent: a probe child counts the
// GPUs; yaliGetUniqueId touches no CUDA). Per run it forks one child per rank (rank r on GPU
// r % visible, YALI_ALLOW_SHARED_GPU=1 when GPUs are fewer than ranks), sharing an anonymous
// MAP_SHARED region (struct Shared) for the unique ids, each rank's progress and the survivors'
// measurements. The children create the comm with YALI_ALGO and YALI_TIMEOUT_MS set, and loop:
// issue kSlots calls of the run's collective (eager) or replay a graph of kSlots captured calls,
// wait for the stream while polling yaliCommGetAsyncError, verify every output (tests/gpu/data.h:
// inputs generated from a hash; reductions against a float64 reference, moved data bit for bit;
// every input unchanged), publish the iteration. Once every rank has verified --kill-after
// iterations, the parent waits for the victim to have collectives in flight and SIGKILLs it, then
// publishes a fresh unique id for the survivors' new comm. A run passes when the victim died of our
// SIGKILL and every survivor exited 0 with its measurements inside the bounds. A survivor whose
// first comm broke the contract still tries the survivors' comm (unless its CUDA context is
// unusable), so that one failure does not hide the others.
//
// Runs: every algorithm of every collective (the registry's rows, kAlgos below: AllReduce's five,
// ReduceScatter's pull, LL and staged, Reduce's pull, LL, two-shot and staged, AllGather's,
// Scatter's and AlltoAll's LL, staged, direct and copy-engine, Broadcast's those and two-shot,
// Gather's LL, staged and copy-engine, AlltoAllv's staged through yaliAlltoAllv with uneven host
// counts: 33 algorithms), each forced with YALI_ALGO, x every
// mode (eager, graph) x every victim; --coll and --algo narrow the set. Every run checks with
// yaliAlgoInfo, for each of its calls and buffers, that the forced algorithm is the one that runs.
// The algorithms for registered outputs (twoshot_direct, *_direct) run with every rank's outputs
// registered with yaliCommRegister, the copy-engine ones (*_ce) and the pull ones
// (reducescatter_pull, reduce_pull) with every rank's inputs registered
// (every rank allocates and registers the same sizes, in the same order: the root's layout). The
// copy-engine algorithms run eager only: a stream capture never chooses them (yali.h), so their
// graph runs are listed as SKIP with that reason. The rooted collectives' root rotates over the
// calls of an iteration (call s: root s % nranks), so a kill hits calls whose root is the victim and
// calls whose root survives. 33 eager + 27 graph runs per victim; about 4 s each where one H100
// ran the AllReduce ones (YALI_TIMEOUT_MS=3000 and set-up).
//
//   yali-kill-test [--ranks N] [--victim R[,R...]] [--coll NAME[,NAME...]|all] [--algo NAME[,NAME...]]
//                  [--mode eager|graph|both] [--timeout-ms T] [--kill-after K] [--slack-ms S] [--seed N]
//
//   --ranks       ranks, one process each (3..8, default 3: the survivors' comm needs two)
//   --victim      the rank(s) SIGKILLed, one run each (default 1; rank 0 hosts the bootstrap socket)
//   --coll        the collectives whose algorithms run, by yaliCollectiveName's names: allreduce,
//                 reducescatter, allgather, broadcast, reduce, gather, scatter, alltoall, alltoallv
//                 (default all)
//   --algo        only these algorithms (each of a collective --coll keeps; default: every
//                 algorithm of the --coll collectives)
//   --mode        eager calls, a replayed CUDA graph, or both (default)
//   --timeout-ms  YALI_TIMEOUT_MS of every comm (default 3000)
//   --kill-after  iterations every rank verifies before the kill (default 3)
//   --slack-ms    the first error's bound is T + S after the kill (default T / 2)
//   --seed        the inputs' base seed
//
// Prints a header (a NOTE line when ranks share GPUs, and the number of runs), then one line per
// run: PASS|FAIL|SKIP, the algorithm, mode, ranks and victim, the victim's iteration at the kill
// (in flight or between iterations), each survivor's time from the kill to its first error and
// that error, each survivor's yaliCommAbort time, how many survivors verified every call on their
// new comm, the run's seconds, and the failures (SKIP: why the run cannot exist); then "kill test:
// N of M runs passed (K skipped)", the failed runs, and "VERDICT: PASS|FAIL". Failures are also
// printed by the rank that saw them, as they happen.
//
// Exit codes: 0 every run passed, 1 a run failed, 2 bad arguments, 77 no GPU.
#include <cuda_runtime.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yali/yali.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data.h"

namespace {

using yt::VerifyResult;

constexpr int kExitPass = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSkip = 77;

constexpr int kMaxRanks = 8;
// Calls per iteration (eager), or captured in the graph. The counts (elements per piece: a rank's
// block for one receiver; AllReduce's and Reduce's whole message) stay within every forced
// algorithm's buffers (the LL ones take pieces up to YALI_LL_BUFFER_BYTES, 1 MB by default), so
// the forced algorithm is the one that runs; 4093 and 50001 are odd, 1031 is under one two-shot
// slot. AlltoAllv's are the largest count of a pair (pairCount).
constexpr int kSlots = 4;
constexpr size_t kCounts[kSlots] = {65536, 4093, 50001, 1031};
constexpr yaliDataType_t kDtype = yaliFloat32;
constexpr yaliRedOp_t kOp = yaliSum;
// The contract's bound on yaliCommAbort.
constexpr double kAbortLimitMs = 2000;
// Verified iterations on the survivors' new comm.
constexpr int kRecoveryIterations = 5;
// The parent's grace between telling the processes to stop (a failure before the kill) and
// killing them.
constexpr double kStopGraceSeconds = 10;

// ---- The collectives and their algorithms --------------------------------------------------------

enum class Coll : int {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kAlltoAll,
  kAlltoAllv,
};

struct CollDesc {
  Coll coll;
  yaliCollective_t id;  // for yaliAlgoInfo; yaliCollectiveName(id) is its --coll name
  const char* call;     // the entry point, for messages
  bool reduces;         // inputs reduced (sum, float64 reference); else moved (kMoveOp: bit for bit)
};

// In Coll order.
const CollDesc kColls[] = {
    {Coll::kAllReduce, yaliCollAllReduce, "yaliAllReduce", true},
    {Coll::kReduceScatter, yaliCollReduceScatter, "yaliReduceScatter", true},
    {Coll::kAllGather, yaliCollAllGather, "yaliAllGather", false},
    {Coll::kBroadcast, yaliCollBroadcast, "yaliBroadcast", false},
    {Coll::kReduce, yaliCollReduce, "yaliReduce", true},
    {Coll::kGather, yaliCollGather, "yaliGather", false},
    {Coll::kScatter, yaliCollScatter, "yaliScatter", false},
    {Coll::kAlltoAll, yaliCollAlltoAll, "yaliAlltoAll", false},
    {Coll::kAlltoAllv, yaliCollAlltoAllv, "yaliAlltoAllv", false},
};
const CollDesc& collDesc(Coll c) { return kColls[static_cast<int>(c)]; }
const char* collName(Coll c) { return yaliCollectiveName(collDesc(c).id); }

// Every algorithm of the library's registry (src/collectives/registry.cc), in its order, with what
// it needs. A name the library does not know fails comm creation (YALI_ALGO is checked there), so
// a renamed algorithm shows as a failed run; a new one must be added here to be covered.
struct AlgoDesc {
  const char* name;
  Coll coll;
  bool registeredOutput;  // only for outputs registered on every rank (twoshot_direct, *_direct)
  bool copyEngine;        // *_ce: only for inputs registered on every rank, never chosen inside a
                          // stream capture (yali.h): eager runs only
  bool registeredInput = false;  // reducescatter_pull, reduce_pull: only for inputs registered on
                                 // every rank
};
const AlgoDesc kAlgos[] = {
    {"twoshot_direct", Coll::kAllReduce, true, false},
    {"oneshot_ll", Coll::kAllReduce, false, false},
    {"oneshot_pull", Coll::kAllReduce, false, false},
    {"twoshot_push", Coll::kAllReduce, false, false},
    {"twoshot", Coll::kAllReduce, false, false},
    {"reducescatter_pull", Coll::kReduceScatter, false, false, true},
    {"reducescatter_ll", Coll::kReduceScatter, false, false},
    {"reducescatter_staged", Coll::kReduceScatter, false, false},
    {"allgather_ce", Coll::kAllGather, false, true},
    {"allgather_direct", Coll::kAllGather, true, false},
    {"allgather_ll", Coll::kAllGather, false, false},
    {"allgather_staged", Coll::kAllGather, false, false},
    {"broadcast_ce", Coll::kBroadcast, false, true},
    {"broadcast_direct", Coll::kBroadcast, true, false},
    {"broadcast_ll", Coll::kBroadcast, false, false},
    {"broadcast_twoshot", Coll::kBroadcast, false, false},
    {"broadcast_staged", Coll::kBroadcast, false, false},
    {"reduce_pull", Coll::kReduce, false, false, true},
    {"reduce_ll", Coll::kReduce, false, false},
    {"reduce_twoshot", Coll::kReduce, false, false},
    {"reduce_staged", Coll::kReduce, false, false},
    {"gather_ce", Coll::kGather, false, true},
    {"gather_ll", Coll::kGather, false, false},
    {"gather_staged", Coll::kGather, false, false},
    {"scatter_ce", Coll::kScatter, false, true},
    {"scatter_direct", Coll::kScatter, true, false},
    {"scatter_ll", Coll::kScatter, false, false},
    {"scatter_staged", Coll::kScatter, false, false},
    {"alltoall_ce", Coll::kAlltoAll, false, true},
    {"alltoall_direct", Coll::kAlltoAll, true, false},
    {"alltoall_ll", Coll::kAlltoAll, false, false},
    {"alltoall_staged", Coll::kAlltoAll, false, false},
    {"alltoallv_staged", Coll::kAlltoAllv, false, false},
};

const AlgoDesc* findAlgo(const std::string& name) {
  for (const AlgoDesc& a : kAlgos) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // system-wide: comparable across the processes
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
double msSince(int64_t t0Ns) { return (double)(nowNs() - t0Ns) / 1e6; }

// One line to stdout with a single write(2), so that lines of several processes do not interleave.
void logLine(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void logLine(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  std::fflush(stdout);
  const char* p = buf;
  while (n > 0) {
    ssize_t w = ::write(1, p, (size_t)n);
    if (w <= 0) break;
    p += w;
    n -= (int)w;
  }
}

// ---- Options --------------------------------------------------------------------------------------

struct Config {
  int ranks = 3;
  std::vector<int> victims = {1};
  std::vector<const AlgoDesc*> algos;  // the runs' YALI_ALGO, in kAlgos order (parseArgs fills it)
  bool eager = true, graph = true;
  int timeoutMs = 3000;  // YALI_TIMEOUT_MS of every comm
  int killAfter = 3;     // verified iterations on every rank before the kill
  int slackMs = -1;      // added to YALI_TIMEOUT_MS in the bound on the first error; -1: T / 2
  uint64_t seed = 0x5EED0001;
};

void usage(const char* prog) {
  std::printf(
      "usage: %s [options]\n"
      "  --ranks N            ranks, one process each (3..8, default 3; rank r on GPU r %% visible)\n"
      "  --victim R[,R...]    the rank(s) to SIGKILL, one run each (default 1; 0 hosts the\n"
      "                       bootstrap socket)\n"
      "  --coll NAME[,...]|all  the collectives whose algorithms run (default all): allreduce,\n"
      "                       reducescatter, allgather, broadcast, reduce, gather, scatter,\n"
      "                       alltoall, alltoallv\n"
      "  --algo NAME[,...]    only these algorithms, YALI_ALGO of the runs (default: every\n"
      "                       algorithm of the --coll collectives; *_direct and twoshot_direct run\n"
      "                       with their outputs registered, *_ce with their inputs registered and\n"
      "                       eager only)\n"
      "  --mode eager|graph|both   eager calls, a replayed CUDA graph, or both (default)\n"
      "  --timeout-ms T       YALI_TIMEOUT_MS of every comm (default 3000)\n"
      "  --kill-after K       verified iterations on every rank before the kill (default 3)\n"
      "  --slack-ms S         the first error must come within T + S ms of the kill (default T / 2:\n"
      "                       a survivor waiting on another survivor, not on the victim, must\n"
      "                       hear of the failure from it rather than time out on its own)\n"
      "  --seed N             base seed of the inputs\n"
      "Exit codes: 0 every run passed, 1 a run failed, 2 bad arguments, 77 no GPU.\n",
      prog);
}

bool splitList(const std::string& s, std::vector<std::string>* out) {
  out->clear();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) return false;
    out->push_back(item);
  }
  return !out->empty();
}

// The runs' algorithms: those of the --coll collectives (all when none or "all" is given), and of
// them only the --algo ones when given.
bool selectAlgos(const std::vector<std::string>& collNames, const std::vector<std::string>& algoNames,
                 Config* cfg) {
  std::vector<bool> collOn(std::size(kColls), collNames.empty());
  for (const std::string& name : collNames) {
    bool known = false;
    for (const CollDesc& c : kColls) {
      if (name == "all" || name == collName(c.coll)) {
        collOn[static_cast<int>(c.coll)] = true;
        known = true;
      }
    }
    if (!known) {
      std::string names;
      for (const CollDesc& c : kColls) names += std::string(collName(c.coll)) + ", ";
      std::fprintf(stderr, "--coll: unknown collective '%s' (%sor all)\n", name.c_str(), names.c_str());
      return false;
    }
  }
  for (const std::string& name : algoNames) {
    const AlgoDesc* a = findAlgo(name);
    if (a == nullptr) {
      std::fprintf(stderr, "--algo: unknown algorithm '%s'\n", name.c_str());
      return false;
    }
    if (!collOn[static_cast<int>(a->coll)]) {
      std::fprintf(stderr, "--algo: %s is an algorithm of %s, which --coll leaves out\n", name.c_str(),
                   collName(a->coll));
      return false;
    }
  }
  cfg->algos.clear();
  for (const AlgoDesc& a : kAlgos) {
    if (!collOn[static_cast<int>(a.coll)]) continue;
    bool named = algoNames.empty();
    for (const std::string& name : algoNames) named |= name == a.name;
    if (named) cfg->algos.push_back(&a);
  }
  return true;
}

bool checkVictims(const std::vector<std::string>& victims, Config* cfg) {
  if (!victims.empty()) {
    cfg->victims.clear();
    for (const std::string& s : victims) cfg->victims.push_back(std::atoi(s.c_str()));
  }
  for (int r : cfg->victims) {
    if (r < 0 || r >= cfg->ranks) {
      std::fprintf(stderr, "--victim %d is not a rank of %d\n", r, cfg->ranks);
      return false;
    }
  }
  return true;
}

bool parseArgs(int argc, char** argv, Config* cfg) {
  std::vector<std::string> victims, collNames, algoNames;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      usage(argv[0]);
      std::exit(0);
    } else if (a == "--ranks") {
      if (!(v = value())) return false;
      cfg->ranks = std::atoi(v);
      if (cfg->ranks < 3 || cfg->ranks > kMaxRanks) {
        std::fprintf(stderr, "--ranks must be 3..%d (the survivors' new comm needs 2), got %s\n",
                     kMaxRanks, v);
        return false;
      }
    } else if (a == "--victim") {
      if (!(v = value())) return false;
      if (!splitList(v, &victims)) {
        std::fprintf(stderr, "--victim needs a comma-separated list of ranks, got '%s'\n", v);
        return false;
      }
    } else if (a == "--coll") {
      if (!(v = value())) return false;
      if (!splitList(v, &collNames)) {
        std::fprintf(stderr, "--coll needs a comma-separated list of collectives, got '%s'\n", v);
        return false;
      }
    } else if (a == "--algo") {
      if (!(v = value())) return false;
      if (!splitList(v, &algoNames)) {
        std::fprintf(stderr, "--algo needs a comma-separated list of names, got '%s'\n", v);
        return false;
      }
    } else if (a == "--mode") {
      if (!(v = value())) return false;
      std::string m = v;
      cfg->eager = m == "eager" || m == "both";
      cfg->graph = m == "graph" || m == "both";
      if (!cfg->eager && !cfg->graph) {
        std::fprintf(stderr, "--mode must be eager, graph or both, got %s\n", v);
        return false;
      }
    } else if (a == "--timeout-ms") {
      if (!(v = value())) return false;
      cfg->timeoutMs = std::atoi(v);
      if (cfg->timeoutMs < 100) {
        std::fprintf(stderr, "--timeout-ms must be at least 100, got %s\n", v);
        return false;
      }
    } else if (a == "--kill-after") {
      if (!(v = value())) return false;
      cfg->killAfter = std::atoi(v);
      if (cfg->killAfter < 1) {
        std::fprintf(stderr, "--kill-after must be at least 1, got %s\n", v);
        return false;
      }
    } else if (a == "--slack-ms") {
      if (!(v = value())) return false;
      cfg->slackMs = std::atoi(v);
      if (cfg->slackMs < 0) {
        std::fprintf(stderr, "--slack-ms must not be negative, got %s\n", v);
        return false;
      }
    } else if (a == "--seed") {
      if (!(v = value())) return false;
      cfg->seed = std::strtoull(v, nullptr, 0);
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      usage(argv[0]);
      return false;
    }
  }
  if (cfg->slackMs < 0) cfg->slackMs = cfg->timeoutMs / 2;
  return selectAlgos(collNames, algoNames, cfg) && checkVictims(victims, cfg);
}

// ---- The region shared by one run's processes ---------------------------------------------------
//
// Plain words accessed with __atomic builtins (lock-free, so they work across processes). Each
// RankState is written by its rank only and read by the parent; the run-wide fields are written
// by the parent only.

enum class ErrorVia : int { None = 0, CallReturn = 1, AsyncWhileRunning = 2, AsyncAfterDrain = 3 };

// The enumerator's name, for the one-line summaries (yaliGetErrorString describes it at length).
const char* resultName(int r) {
  switch ((yaliResult_t)r) {
    case yaliSuccess: return "yaliSuccess";
    case yaliUnhandledCudaError: return "yaliUnhandledCudaError";
    case yaliSystemError: return "yaliSystemError";
    case yaliInternalError: return "yaliInternalError";
    case yaliInvalidArgument: return "yaliInvalidArgument";
    case yaliInvalidUsage: return "yaliInvalidUsage";
    case yaliRemoteError: return "yaliRemoteError";
    case yaliInProgress: return "yaliInProgress";
    case yaliTimeout: return "yaliTimeout";
    default: return "unknown result";
  }
}

const char* viaName(int v) {
  switch ((ErrorVia)v) {
    case ErrorVia::None: return "none";
    case ErrorVia::CallReturn: return "returned by the call";
    case ErrorVia::AsyncWhileRunning: return "yaliCommGetAsyncError while the stream ran";
    case ErrorVia::AsyncAfterDrain: return "yaliCommGetAsyncError after the stream drained";
  }
  return "?";
}

struct RankState {
  int64_t iteration;  // iterations verified on the first comm
  int inFlight;       // 1 from issuing an iteration until its stream drained
  int finished;       // 1 once the fields below are final (survivors only)
  int firstError;     // yaliResult_t of the first error seen after the kill
  int errorVia;       // ErrorVia
  double errorMs;     // kill -> first error
  double drainMs;     // first error -> the stream idle
  double abortMs;     // yaliCommAbort
  int recoveryIterations;  // verified iterations on the new comm
  double recoveryMs;       // the new comm: init to destroy
  char failure[416];       // the first failure, for the parent's line ("" when none)
};

struct Shared {
  int nranks;
  int victim;
  yaliUniqueId id;          // the first comm's, made by the parent before fork
  yaliUniqueId recoveryId;  // the survivors' new comm's, made by the parent after the kill
  int recoveryIdReady;
  int killed;               // set (release) just before the SIGKILL
  int64_t killNs;           // CLOCK_MONOTONIC of the kill
  int stop;                 // a process failed before the kill: everyone leaves
  RankState rank[kMaxRanks];
};

template <typename T>
T loadAcquire(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T>
void storeRelease(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

// ---- A child's own watchdog: names the stuck step, then exits -------------------------------------

struct ChildWatchdog {
  std::mutex m;
  std::string who, step = "(start)";
  int64_t deadlineNs = 0;
};
ChildWatchdog& childWatchdog() {
  static ChildWatchdog* w = new ChildWatchdog();  // never destroyed: the thread outlives statics
  return *w;
}

void setStep(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void setStep(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  ChildWatchdog& w = childWatchdog();
  std::lock_guard<std::mutex> lock(w.m);
  w.step = buf;
}

void startChildWatchdog(const std::string& who, double seconds) {
  ChildWatchdog& w = childWatchdog();
  {
    std::lock_guard<std::mutex> lock(w.m);
    w.who = who;
    w.deadlineNs = nowNs() + (int64_t)(seconds * 1e9);
  }
  std::thread([seconds] {
    ChildWatchdog& wd = childWatchdog();
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(wd.m);
      if (nowNs() < wd.deadlineNs) continue;
      logLine("  %s WATCHDOG: still running after %.0f s; stuck at: %s", wd.who.c_str(), seconds,
              wd.step.c_str());
      std::fflush(stdout);
      _exit(kExitFail);
    }
  }).detach();
}

// ---- One call's layout: buffers, inputs and the outputs to check --------------------------------

// An output range and where its elements come from (data.h: OutputMap).
struct Piece {
  size_t at = 0;     // first element in recvbuff
  size_t elems = 0;
  yt::OutputMap map;
};

// One call (slot) of an iteration, out of place, as rank `rank` of `nranks` makes it. Every rank
// allocates (and registers) the same sizes, the largest any rank uses: yaliCommRegister wants the
// same size everywhere, and the copy-engine algorithms want every rank's input laid out like the
// root's (yali.h), so Scatter's receivers pass an unused sendbuff of the root's size, and Reduce's
// and Gather's non-roots an unused recvbuff of the root's.
struct Slot {
  size_t count = 0;  // the call's count (AlltoAllv: the largest count of a pair)
  int root = 0;      // rooted collectives
  size_t sendElems = 0, recvElems = 0;
  size_t genElems = 0;  // this rank's input, elements 0..genElems-1 at sendbuff (unchanged after)
  std::vector<Piece> outputs;
  // AlltoAllv's host arguments (elements): [j] for peer j.
  std::vector<size_t> sendcounts, sdispls, recvcounts, rdispls;
};

// AlltoAllv: elements rank s sends to rank d in slot `slot`, at most maxCount: uneven (from a third
// to all of maxCount) and 0 for about a quarter of the pairs (a rank's own piece included).
size_t pairCount(size_t maxCount, int s, int d, int slot) {
  if ((s + 2 * d + slot) % 4 == 3) return 0;
  return maxCount - (size_t)((s + d + slot) % 3) * (maxCount / 3);
}

Slot planSlot(Coll c, int slot, int rank, int nranks) {
  Slot p;
  const size_t count = kCounts[slot], all = (size_t)nranks * count;
  p.count = count;
  p.root = slot % nranks;
  const bool root = rank == p.root;
  yt::OutputMap m;  // reductions: element i of every rank, reduced; moves set block and sources
  auto output = [&](size_t elems) { p.outputs.push_back({0, elems, m}); };
  switch (c) {
    case Coll::kAllReduce:
      p.sendElems = p.recvElems = p.genElems = count;
      output(count);
      break;
    case Coll::kReduceScatter:
      p.sendElems = p.genElems = all;
      p.recvElems = count;
      m.inBase = (unsigned long long)rank * count;
      output(count);
      break;
    case Coll::kAllGather:
      p.sendElems = p.genElems = count;
      p.recvElems = all;
      m.block = count;
      output(all);
      break;
    case Coll::kBroadcast:
      // A receiver's sendbuff holds its own data, which must neither reach the output nor change.
      p.sendElems = p.recvElems = p.genElems = count;
      m.block = count;
      m.srcRank = p.root;
      output(count);
      break;
    case Coll::kReduce:
      p.sendElems = p.recvElems = p.genElems = count;
      if (root) output(count);
      break;
    case Coll::kGather:
      p.sendElems = p.genElems = count;
      p.recvElems = all;
      m.block = count;
      if (root) output(all);
      break;
    case Coll::kScatter:
      p.sendElems = all;
      p.genElems = root ? all : 0;
      p.recvElems = count;
      m.block = count;
      m.srcRank = p.root;
      m.srcChunk = (unsigned long long)rank;
      output(count);
      break;
    case Coll::kAlltoAll:
      p.sendElems = p.recvElems = p.genElems = all;
      m.block = count;
      m.srcChunk = (unsigned long long)rank;
      output(all);
      break;
    case Coll::kAlltoAllv:
      // Peer j's piece at j * count on both sides (gaps after the shorter ones), so that piece s of
      // our output is elements rank * count .. of rank s's input: an OutputMap of block count.
      p.sendElems = p.recvElems = p.genElems = all;
      for (int j = 0; j < nranks; ++j) {
        p.sendcounts.push_back(pairCount(count, rank, j, slot));
        p.recvcounts.push_back(pairCount(count, j, rank, slot));
        p.sdispls.push_back((size_t)j * count);
        p.rdispls.push_back((size_t)j * count);
        if (p.recvcounts[j] == 0) continue;
        Piece piece;
        piece.at = (size_t)j * count;
        piece.elems = p.recvcounts[j];
        piece.map.block = count;
        piece.map.srcRank = j;
        piece.map.srcChunk = (unsigned long long)rank;
        p.outputs.push_back(piece);
      }
      break;
  }
  return p;
}

// The call of slot `p` with these buffers.
yaliResult_t callSlot(Coll c, const Slot& p, const void* send, void* recv, yaliComm_t comm, cudaStream_t stream) {
  switch (c) {
    case Coll::kAllReduce: return yaliAllReduce(send, recv, p.count, kDtype, kOp, comm, stream);
    case Coll::kReduceScatter: return yaliReduceScatter(send, recv, p.count, kDtype, kOp, comm, stream);
    case Coll::kAllGather: return yaliAllGather(send, recv, p.count, kDtype, comm, stream);
    case Coll::kBroadcast: return yaliBroadcast(send, recv, p.count, kDtype, p.root, comm, stream);
    case Coll::kReduce: return yaliReduce(send, recv, p.count, kDtype, kOp, p.root, comm, stream);
    case Coll::kGather: return yaliGather(send, recv, p.count, kDtype, p.root, comm, stream);
    case Coll::kScatter: return yaliScatter(send, recv, p.count, kDtype, p.root, comm, stream);
    case Coll::kAlltoAll: return yaliAlltoAll(send, recv, p.count, kDtype, comm, stream);
    case Coll::kAlltoAllv:
      return yaliAlltoAllv(send, p.sendcounts.data(), p.sdispls.data(), recv, p.recvcounts.data(),
                           p.rdispls.data(), kDtype, comm, stream);
  }
  return yaliInternalError;
}

// ---- One rank's process ---------------------------------------------------------------------------

struct RunSpec {
  const AlgoDesc* algo = nullptr;
  bool graph = false;
  int victim = 1;
  // The copy-engine algorithms in graph mode: a capture never chooses them, so the run cannot exist.
  bool skipped() const { return graph && algo->copyEngine; }
};

std::string runLabel(const RunSpec& run) {
  return std::string(run.algo->name) + " " + (run.graph ? "graph" : "eager") + " victim " + std::to_string(run.victim);
}

class Rank {
 public:
  Rank(Shared* sh, const Config& cfg, const RunSpec& run, int rank)
      : sh_(sh), cfg_(cfg), run_(run), rank_(rank), state_(&sh->rank[rank]) {
    char who[128];
    std::snprintf(who, sizeof who, "[%s %s rank %d/%d]", run.algo->name,
                  run.graph ? "graph" : "eager", rank, sh->nranks);
    who_ = who;
  }

  const std::string& who() const { return who_; }

  // Records a failure: logged, kept for the parent's line (the first one), and the exit code.
  void fail(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    logLine("  %s FAIL: %s", who_.c_str(), buf);
    if (failures_++ == 0) std::snprintf(state_->failure, sizeof state_->failure, "rank %d: %s", rank_, buf);
  }
  [[noreturn]] void leave() {
    std::fflush(stdout);
    _exit(failures_ > 0 ? kExitFail : kExitPass);
  }
  // Runs this rank of the run, then exits: 0 when every check of this rank passed.
  [[noreturn]] void main(int dev);

 private:
  // The buffers, registrations and (graph mode) the captured graph of one comm.
  struct Workload {
    yaliComm_t comm = nullptr;
    int rank = 0, nranks = 0;
    cudaStream_t stream = nullptr;
    uint64_t seedBase = 0;
    Slot slot[kSlots];
    void* send[kSlots] = {};
    void* recv[kSlots] = {};
    void* handles[2 * kSlots] = {};  // the registrations (outputs: *_direct; inputs: *_ce)
    int nhandles = 0;
    uint64_t* seedDev = nullptr;   // graph mode: the seed the captured generators read
    uint64_t* seedHost = nullptr;  // pinned: the source of the copy to seedDev before a replay
    cudaGraphExec_t exec = nullptr;
  };

  bool cudaOk(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    fail("%s: %s", what, cudaGetErrorString(e));
    return false;
  }
  bool yaliOk(yaliResult_t r, yaliComm_t comm, const char* what) {
    if (r == yaliSuccess) return true;
    fail("%s returned %s: %s", what, resultName(r), yaliGetLastError(comm));
    return false;
  }

  // The input seed of slot s in iteration `it`: eager calls generate with it directly; in graph
  // mode the host writes seedOfIteration to seedDev and the captured generator of slot s combines
  // it with s (data.h: combineSeed), so both give combineSeed(base-derived, s).
  static uint64_t seedOfIteration(const Workload& w, int64_t it) { return yt::combineSeed(w.seedBase, (uint64_t)it); }
  static uint64_t slotSeed(const Workload& w, int64_t it, int s) {
    return yt::combineSeed(seedOfIteration(w, it), (uint64_t)s);
  }

  Coll coll() const { return run_.algo->coll; }
  const CollDesc& collective() const { return collDesc(coll()); }
  // The input distribution (data.h): the reduction's, or raw bits for data only moved.
  yaliRedOp_t genOp() const { return collective().reduces ? kOp : yt::kMoveOp; }

  bool setUp(Workload& w);
  bool registerBuffer(Workload& w, void* p, size_t bytes, const char* what);
  yaliResult_t call(Workload& w, int s) { return callSlot(coll(), w.slot[s], w.send[s], w.recv[s], w.comm, w.stream); }
  yaliResult_t issue(Workload& w, int64_t it);
  bool verify(Workload& w, int64_t it);
  void release(Workload& w, bool deregister);

  // Waits for w.stream while polling yaliCommGetAsyncError. Returns false on a CUDA error (the
  // kernels must end cleanly) or when the stream stays busy past the bounds below.
  bool waitStream(Workload& w, const char* what);
  void sawError(yaliResult_t r, ErrorVia via);
  bool killed() const { return loadAcquire(&sh_->killed) != 0; }
  double msSinceKill() const { return (double)(nowNs() - loadAcquire(&sh_->killNs)) / 1e6; }
  double errorLimitMs() const { return cfg_.timeoutMs + cfg_.slackMs; }

  bool runFirstComm();
  bool afterTheError(Workload& w);
  bool recover();

  Shared* sh_;
  const Config& cfg_;
  RunSpec run_;
  int rank_;
  RankState* state_;
  std::string who_;
  int failures_ = 0;
  VerifyResult* scratch_ = nullptr;      // device: one per slot
  VerifyResult* scratchHost_ = nullptr;  // pinned copies
  bool errorSeen_ = false;
  bool errorBeforeKill_ = false;
  int64_t errorNs_ = 0;
};

uint64_t hashString(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = yt::mix64(h ^ c);
  return h;
}

// Collective: every rank registers the same sizes in the same order.
bool Rank::registerBuffer(Workload& w, void* p, size_t bytes, const char* what) {
  setStep("yaliCommRegister(%s)", what);
  if (!yaliOk(yaliCommRegister(w.comm, p, bytes, &w.handles[w.nhandles]), w.comm, "yaliCommRegister")) return false;
  ++w.nhandles;
  return true;
}

bool Rank::setUp(Workload& w) {
  if (!cudaOk(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking), "cudaStreamCreate")) return false;
  const AlgoDesc& algo = *run_.algo;
  const size_t es = yt::dtypeSize(kDtype);
  for (int s = 0; s < kSlots; ++s) {
    w.slot[s] = planSlot(coll(), s, w.rank, w.nranks);
    const Slot& p = w.slot[s];
    if (!cudaOk(cudaMalloc(&w.send[s], p.sendElems * es), "cudaMalloc(send)") ||
        !cudaOk(cudaMalloc(&w.recv[s], p.recvElems * es), "cudaMalloc(recv)")) {
      return false;
    }
    // What the forced algorithm needs registered on every rank: the inputs (copy engines), the
    // outputs (*_direct, twoshot_direct). Only that: the rest must not matter to it.
    if ((algo.copyEngine || algo.registeredInput) && !registerBuffer(w, w.send[s], p.sendElems * es, "send"))
      return false;
    if (algo.registeredOutput && !registerBuffer(w, w.recv[s], p.recvElems * es, "recv")) return false;
  }
  // The forced algorithm must be the one that runs, or this run tests something else.
  for (int s = 0; s < kSlots; ++s) {
    const Slot& p = w.slot[s];
    yaliAlgoInfo_t info;
    std::memset(&info, 0, sizeof info);
    if (!yaliOk(yaliAlgoInfo(w.comm, collective().id, w.send[s], w.recv[s], p.count, kDtype, kOp, p.root, &info),
                w.comm, "yaliAlgoInfo")) {
      return false;
    }
    info.algorithm[sizeof info.algorithm - 1] = '\0';
    if (std::strcmp(algo.name, info.algorithm) != 0) {
      fail("YALI_ALGO=%s, but yaliAlgoInfo(%s) says %s runs for count %zu, root %d%s", algo.name,
           collName(coll()), info.algorithm, p.count, p.root,
           algo.copyEngine        ? " (inputs registered; are the driver's stream memory operations missing?)"
           : algo.registeredInput ? " (inputs registered)"
           : algo.registeredOutput ? " (outputs registered)"
                                   : "");
      return false;
    }
  }
  if (!cudaOk(cudaMalloc(&scratch_, kSlots * sizeof(VerifyResult)), "cudaMalloc(scratch)") ||
      !cudaOk(cudaMallocHost(&scratchHost_, kSlots * sizeof(VerifyResult)), "cudaMallocHost(scratch)")) {
    return false;
  }
  if (!run_.graph) return true;

  // Graph mode: kSlots (generate, call) pairs captured once; every replay reads a fresh seed.
  if (!cudaOk(cudaMalloc(&w.seedDev, sizeof(uint64_t)), "cudaMalloc(seed)") ||
      !cudaOk(cudaMallocHost(&w.seedHost, sizeof(uint64_t)), "cudaMallocHost(seed)")) {
    return false;
  }
  setStep("capturing the graph");
  if (!cudaOk(cudaStreamBeginCapture(w.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) {
    return false;
  }
  bool issued = true;
  for (int s = 0; s < kSlots && issued; ++s) {
    issued = cudaOk(yt::launchGenerate(w.send[s], w.slot[s].genElems, kDtype, genOp(), w.rank, (uint64_t)s,
                                       w.seedDev, w.stream),
                    "launchGenerate (captured)") &&
             yaliOk(call(w, s), w.comm, "the captured call");
  }
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(w.stream, &graph);
  if (!issued) {
    if (graph) cudaGraphDestroy(graph);
    return false;
  }
  if (!cudaOk(e, "cudaStreamEndCapture")) return false;
  e = cudaGraphInstantiate(&w.exec, graph, 0);
  cudaGraphDestroy(graph);
  return cudaOk(e, "cudaGraphInstantiate");
}

yaliResult_t Rank::issue(Workload& w, int64_t it) {
  if (run_.graph) {
    *w.seedHost = seedOfIteration(w, it);  // the previous replay has drained: the copy is done
    if (!cudaOk(cudaMemcpyAsync(w.seedDev, w.seedHost, sizeof(uint64_t), cudaMemcpyHostToDevice, w.stream),
                "cudaMemcpyAsync(seed)") ||
        !cudaOk(cudaGraphLaunch(w.exec, w.stream), "cudaGraphLaunch")) {
      leave();  // a CUDA failure outside YALI: nothing more to learn
    }
    return yaliSuccess;
  }
  for (int s = 0; s < kSlots; ++s) {
    if (!cudaOk(yt::launchGenerate(w.send[s], w.slot[s].genElems, kDtype, genOp(), w.rank, slotSeed(w, it, s),
                                   nullptr, w.stream),
                "launchGenerate")) {
      leave();
    }
    yaliResult_t r = call(w, s);
    if (r != yaliSuccess) return r;
  }
  return yaliSuccess;
}

// Every slot's outputs against the reference of its layout (data.h) and its input unchanged: the
// checks of all slots enqueued, then one copy back and one synchronization.
bool Rank::verify(Workload& w, int64_t it) {
  const size_t es = yt::dtypeSize(kDtype);
  for (int s = 0; s < kSlots; ++s) {
    const Slot& p = w.slot[s];
    const uint64_t seed = slotSeed(w, it, s);
    VerifyResult* r = scratch_ + s;
    cudaError_t e = yt::enqueueReset(r, w.stream);
    for (const Piece& piece : p.outputs) {
      if (e == cudaSuccess) {
        e = yt::enqueueVerifyMapped(static_cast<const char*>(w.recv[s]) + piece.at * es, piece.elems, kDtype, genOp(),
                                    w.nranks, seed, piece.map, r, w.stream);
      }
    }
    if (e == cudaSuccess && p.genElems != 0) {
      e = yt::enqueueVerifyInput(w.send[s], p.genElems, 0, kDtype, genOp(), w.rank, seed, r, w.stream);
    }
    if (!cudaOk(e, "enqueueing the checks")) return false;
  }
  if (!cudaOk(cudaMemcpyAsync(scratchHost_, scratch_, kSlots * sizeof(VerifyResult), cudaMemcpyDeviceToHost, w.stream),
              "cudaMemcpyAsync(checks)") ||
      !cudaOk(cudaStreamSynchronize(w.stream), "cudaStreamSynchronize(checks)")) {
    return false;
  }
  bool ok = true;
  for (int s = 0; s < kSlots; ++s) {
    const VerifyResult& res = scratchHost_[s];
    if (res.nbad == 0 && res.nbadInput == 0) continue;
    const VerifyResult::Record& r0 = res.rec[0];
    fail("iteration %lld, slot %d (%s count %zu, root %d): %llu wrong output elements (%llu NaN; first at %llu: "
         "got %g, expected %g), %llu input elements changed, yet no error was reported",
         (long long)it, s, collective().call, w.slot[s].count, w.slot[s].root, res.nbad, res.nnan, res.firstBad,
         res.nrec ? r0.got : 0.0, res.nrec ? r0.expected : 0.0, res.nbadInput);
    ok = false;
  }
  return ok;
}

void Rank::release(Workload& w, bool deregister) {
  if (w.exec) cudaOk(cudaGraphExecDestroy(w.exec), "cudaGraphExecDestroy");
  w.exec = nullptr;
  if (deregister) {
    setStep("yaliCommDeregister");
    for (int i = 0; i < w.nhandles; ++i) yaliOk(yaliCommDeregister(w.comm, w.handles[i]), w.comm, "yaliCommDeregister");
  }
  w.nhandles = 0;
  for (int s = 0; s < kSlots; ++s) {
    if (w.send[s]) cudaOk(cudaFree(w.send[s]), "cudaFree(send)");
    if (w.recv[s]) cudaOk(cudaFree(w.recv[s]), "cudaFree(recv)");
    w.send[s] = w.recv[s] = nullptr;
  }
  if (w.seedDev) cudaOk(cudaFree(w.seedDev), "cudaFree(seed)");
  if (w.seedHost) cudaOk(cudaFreeHost(w.seedHost), "cudaFreeHost(seed)");
  w.seedDev = nullptr;
  w.seedHost = nullptr;
  if (w.stream) cudaOk(cudaStreamDestroy(w.stream), "cudaStreamDestroy");
  w.stream = nullptr;
  if (scratch_) cudaOk(cudaFree(scratch_), "cudaFree(scratch)");
  if (scratchHost_) cudaOk(cudaFreeHost(scratchHost_), "cudaFreeHost(scratch)");
  scratch_ = nullptr;
  scratchHost_ = nullptr;
}

void Rank::sawError(yaliResult_t r, ErrorVia via) {
  if (errorSeen_) return;
  errorSeen_ = true;
  errorNs_ = nowNs();
  if (!killed()) {
    errorBeforeKill_ = true;
    fail("%s, %s before the kill: %s", resultName(r), viaName((int)via),
         yaliGetLastError(nullptr));
    return;
  }
  state_->firstError = (int)r;
  state_->errorVia = (int)via;
  state_->errorMs = (double)(errorNs_ - loadAcquire(&sh_->killNs)) / 1e6;
}

bool Rank::waitStream(Workload& w, const char* what) {
  for (;;) {
    cudaError_t q = cudaStreamQuery(w.stream);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      fail("%s: cudaStreamQuery returned %s: YALI kernels must end cleanly (no trap), leaving the "
           "CUDA context usable", what, cudaGetErrorString(q));
      return false;
    }
    if (!errorSeen_) {
      yaliResult_t a = yaliSuccess;
      yaliResult_t r = yaliCommGetAsyncError(w.comm, &a);
      if (r != yaliSuccess) {
        fail("yaliCommGetAsyncError itself returned %s", resultName(r));
        return false;
      }
      if (a != yaliSuccess) sawError(a, ErrorVia::AsyncWhileRunning);
    }
    if (errorSeen_ && msSince(errorNs_) > errorLimitMs()) {
      fail("%s: the stream is still busy %.0f ms after the first error (YALI_TIMEOUT_MS=%d): a "
           "kernel did not end", what, msSince(errorNs_), cfg_.timeoutMs);
      return false;
    }
    if (!errorSeen_ && killed() && msSinceKill() > errorLimitMs()) {
      fail("%s: no error %.0f ms after the kill (YALI_TIMEOUT_MS=%d + slack %d ms) and the stream is "
           "still busy", what, msSinceKill(), cfg_.timeoutMs, cfg_.slackMs);
      return false;
    }
    if (!killed() && loadAcquire(&sh_->stop)) leave();
    usleep(200);
  }
  if (errorSeen_ && state_->drainMs == 0) state_->drainMs = msSince(errorNs_);
  return true;
}

// After the first error on the first comm: the error is sticky and reported without a sync, a
// later call returns it, the abort is prompt and leaves the CUDA context clean. Returns false when
// the CUDA context is not fit for the survivors' comm (a failed check of the contract alone still
// lets it be tried, so that one failure does not hide the others).
bool Rank::afterTheError(Workload& w) {
  setStep("after the error: yaliCommGetAsyncError");
  yaliResult_t a = yaliSuccess;
  int64_t t0 = nowNs();
  yaliResult_t r = yaliCommGetAsyncError(w.comm, &a);
  double queryMs = msSince(t0);
  if (r != yaliSuccess) {
    fail("yaliCommGetAsyncError after the error returned %s", resultName(r));
  } else if (a == yaliSuccess) {
    fail("yaliCommGetAsyncError reports yaliSuccess after %s was seen: a failed comm stays failed",
         resultName(state_->firstError));
  } else if (a != (yaliResult_t)state_->firstError) {
    fail("yaliCommGetAsyncError now reports %s, but %s was seen first (%s): a failed comm's error "
         "must not change", resultName(a), resultName(state_->firstError), viaName(state_->errorVia));
  }
  if (queryMs > 100) fail("yaliCommGetAsyncError took %.0f ms: it must not synchronize", queryMs);

  const char* callName = collective().call;
  setStep("after the error: a new %s on the failed comm", callName);
  r = call(w, 0);
  if (r == yaliSuccess) {
    fail("%s on the failed comm returned yaliSuccess; expected its error, %s", callName, resultName(a));
  } else if (r != a) {
    fail("%s on the failed comm returned %s, but yaliCommGetAsyncError reports %s", callName, resultName(r),
         resultName(a));
  }
  // Even if it launched something, it must end (bounded by the timeout, the comm being failed).
  setStep("after the error: cudaStreamSynchronize");
  if (!waitStream(w, "after the failed call")) return false;
  if (!cudaOk(cudaStreamSynchronize(w.stream), "cudaStreamSynchronize after the error")) return false;

  setStep("yaliCommAbort");
  t0 = nowNs();
  r = yaliCommAbort(w.comm);
  state_->abortMs = msSince(t0);
  w.comm = nullptr;
  yaliOk(r, nullptr, "yaliCommAbort");
  if (state_->abortMs > kAbortLimitMs) {
    fail("yaliCommAbort took %.0f ms (the bound is %.0f ms)", state_->abortMs, kAbortLimitMs);
  }
  setStep("after the abort: cudaDeviceSynchronize and freeing the buffers");
  const bool contextOk = cudaOk(cudaDeviceSynchronize(), "cudaDeviceSynchronize after yaliCommAbort") &&
                         cudaOk(cudaGetLastError(), "cudaGetLastError after yaliCommAbort");
  release(w, /*deregister=*/false);  // the abort ended the registrations with the comm
  return contextOk;
}

// The first comm: iterations until the error that the kill causes (the victim never gets out).
// Returns true when the survivors' comm can be tried: the comm saw an error after the kill and
// was aborted, with the CUDA context intact; the checks on the way record their failures.
bool Rank::runFirstComm() {
  Workload w;
  w.rank = rank_;
  w.nranks = sh_->nranks;
  w.seedBase = hashString(cfg_.seed, runLabel(run_) + " first");
  setStep("yaliCommInitRank (first comm)");
  if (!yaliOk(yaliCommInitRank(&w.comm, sh_->nranks, sh_->id, rank_), nullptr, "yaliCommInitRank")) return false;
  if (!setUp(w)) return false;

  for (int64_t it = 0;; ++it) {
    if (!killed() && loadAcquire(&sh_->stop)) leave();
    setStep("iteration %lld: issuing", (long long)it);
    storeRelease(&state_->inFlight, 1);
    yaliResult_t r = issue(w, it);
    if (r != yaliSuccess) sawError(r, ErrorVia::CallReturn);
    setStep("iteration %lld: waiting for the stream", (long long)it);
    if (!waitStream(w, "waiting for an iteration")) return false;
    storeRelease(&state_->inFlight, 0);
    if (!errorSeen_) {
      yaliResult_t a = yaliSuccess;
      if (yaliCommGetAsyncError(w.comm, &a) == yaliSuccess && a != yaliSuccess) {
        sawError(a, ErrorVia::AsyncAfterDrain);
      }
    }
    if (errorSeen_) break;
    setStep("iteration %lld: verifying", (long long)it);
    // A wrong result before the kill ends the run; after it, the failure is recorded and the
    // error must still come.
    if (!verify(w, it) && !killed()) return false;
    storeRelease(&state_->iteration, (int64_t)(it + 1));
    if (killed() && msSinceKill() > errorLimitMs()) {
      fail("no error %.0f ms after the kill (YALI_TIMEOUT_MS=%d + slack %d ms): the survivors went on "
           "without the victim", msSinceKill(), cfg_.timeoutMs, cfg_.slackMs);
      return false;
    }
  }
  if (errorBeforeKill_) return false;
  if (state_->firstError != yaliTimeout) {
    fail("the first error was %s (%s); expected yaliTimeout on every survivor: %s",
         resultName(state_->firstError), viaName(state_->errorVia), yaliGetLastError(w.comm));
  }
  if (state_->errorMs > errorLimitMs()) {
    fail("the first error came %.0f ms after the kill; the bound is YALI_TIMEOUT_MS=%d + slack %d ms",
         state_->errorMs, cfg_.timeoutMs, cfg_.slackMs);
  }
  return afterTheError(w);
}

// The survivors' new comm, from the id the parent made after the kill: a few verified iterations
// in the run's mode, then a clean destroy.
bool Rank::recover() {
  setStep("waiting for the survivors' unique id");
  const int64_t t0 = nowNs();
  while (!loadAcquire(&sh_->recoveryIdReady)) {
    if (msSince(t0) > 10000) {
      fail("the parent did not publish the survivors' unique id within 10 s");
      return false;
    }
    usleep(1000);
  }
  Workload w;
  w.nranks = sh_->nranks - 1;
  w.rank = rank_ < sh_->victim ? rank_ : rank_ - 1;  // survivors keep their order
  w.seedBase = hashString(cfg_.seed, runLabel(run_) + " recovery");
  const int64_t start = nowNs();
  setStep("yaliCommInitRank (survivors' comm, rank %d of %d)", w.rank, w.nranks);
  if (!yaliOk(yaliCommInitRank(&w.comm, w.nranks, sh_->recoveryId, w.rank), nullptr,
              "yaliCommInitRank (survivors' comm)")) {
    return false;
  }
  if (!setUp(w)) return false;
  for (int it = 0; it < kRecoveryIterations; ++it) {
    setStep("survivors' comm, iteration %d", it);
    yaliResult_t r = issue(w, it);
    if (!yaliOk(r, w.comm, "the survivors' comm's call")) return false;
    if (!cudaOk(cudaStreamSynchronize(w.stream), "cudaStreamSynchronize on the survivors' comm")) return false;
    yaliResult_t a = yaliSuccess;
    yaliCommGetAsyncError(w.comm, &a);
    if (!yaliOk(a, w.comm, "yaliCommGetAsyncError on the survivors' comm")) return false;
    if (!verify(w, it)) return false;
    state_->recoveryIterations = it + 1;
  }
  release(w, /*deregister=*/true);
  setStep("yaliCommDestroy (survivors' comm)");
  yaliOk(yaliCommDestroy(w.comm), nullptr, "yaliCommDestroy (survivors' comm)");
  state_->recoveryMs = msSince(start);
  return failures_ == 0;
}

void Rank::main(int dev) {
  if (!cudaOk(cudaSetDevice(dev), "cudaSetDevice")) leave();
  if (runFirstComm()) recover();
  storeRelease(&state_->finished, 1);
  leave();
}

// ---- GPU probe (in a child, so that the parent never initializes CUDA) ---------------------------

struct ProbeResult {
  int count = 0;
  char error[160] = "";
  char name[256] = "";
};

ProbeResult probeGpus() {
  ProbeResult res;
  int fds[2];
  if (pipe(fds) != 0) {
    std::snprintf(res.error, sizeof res.error, "pipe failed");
    return res;
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ProbeResult r;
    cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.count = 0;
      std::snprintf(r.error, sizeof r.error, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    } else if (r.count > 0) {
      cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) std::snprintf(r.name, sizeof r.name, "%s", prop.name);
    }
    ssize_t w = write(fds[1], &r, sizeof r);
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    std::snprintf(res.error, sizeof res.error, "fork failed");
    return res;
  }
  struct pollfd pfd = {fds[0], POLLIN, 0};
  if (!(poll(&pfd, 1, 120000) > 0 && read(fds[0], &res, sizeof res) == (ssize_t)sizeof res)) {
    res = ProbeResult();
    std::snprintf(res.error, sizeof res.error, "the probe process gave no answer in 120 s");
    kill(pid, SIGKILL);
  }
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return res;
}

// ---- The parent: one run ----------------------------------------------------------------------------

struct Outcome {
  bool pass = false;
  std::string line;
};

std::string fmtMs(const std::vector<double>& v) {
  std::string s;
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.0f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s;
}

Outcome runOnce(const Config& cfg, const RunSpec& run, int visible) {
  Outcome out;
  const int n = cfg.ranks;
  const double T = cfg.timeoutMs / 1000.0;
  // Bounds of the parent (generous: the children check the tight ones): the first comm and the
  // kill-after iterations; then the error, the drain, the abort and the survivors' comm.
  const double preKillSeconds = 30 + 2 * T;
  const double runSeconds = preKillSeconds + 30 + 4 * T + 2 * cfg.slackMs / 1000.0;
  char head[96];
  std::snprintf(head, sizeof head, "%-20s %-5s %d ranks, victim %d", run.algo->name,
                run.graph ? "graph" : "eager", n, run.victim);

  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    out.line = std::string("FAIL  ") + head + ": mmap of the shared region failed";
    return out;
  }
  Shared* sh = static_cast<Shared*>(mem);
  std::memset(sh, 0, sizeof *sh);
  sh->nranks = n;
  sh->victim = run.victim;
  yaliResult_t r = yaliGetUniqueId(&sh->id);
  if (r != yaliSuccess) {
    munmap(mem, sizeof(Shared));
    out.line = std::string("FAIL  ") + head + ": yaliGetUniqueId in the parent failed: " + yaliGetLastError(nullptr);
    return out;
  }

  std::fflush(stdout);
  std::fflush(stderr);
  const int64_t t0 = nowNs();
  std::vector<pid_t> pids(n, -1);
  for (int p = 0; p < n; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      // Settings are read at comm creation: set them before any comm exists.
      setenv("YALI_ALGO", run.algo->name, 1);
      setenv("YALI_TIMEOUT_MS", std::to_string(cfg.timeoutMs).c_str(), 1);
      if (n > visible) setenv("YALI_ALLOW_SHARED_GPU", "1", 1);
      Rank rank(sh, cfg, run, p);
      startChildWatchdog(rank.who(), runSeconds - 5);
      rank.main(p % visible);
    }
    if (pid < 0) {
      for (pid_t q : pids) {
        if (q > 0) kill(q, SIGKILL);
      }
      for (pid_t q : pids) {
        if (q > 0) waitpid(q, nullptr, 0);
      }
      munmap(mem, sizeof(Shared));
      out.line = std::string("FAIL  ") + head + ": fork failed";
      return out;
    }
    pids[p] = pid;
  }

  std::vector<int> status(n, 0);
  std::vector<bool> done(n, false);
  int remaining = n;
  std::string why;  // the parent's own reason for failing the run
  int64_t killedAtIteration = -1;
  bool killedInFlight = false;
  int64_t allReachedNs = 0, stopNs = 0;
  while (remaining > 0) {
    const double now = msSince(t0) / 1000.0;
    for (int p = 0; p < n; ++p) {
      if (done[p]) continue;
      int st = 0;
      if (waitpid(pids[p], &st, WNOHANG) != pids[p]) continue;
      done[p] = true;
      status[p] = st;
      --remaining;
      if (!sh->killed && !sh->stop) {
        // Before the kill nobody may leave: the others would wait for it.
        storeRelease(&sh->stop, 1);
        stopNs = nowNs();
        if (why.empty()) why = "rank " + std::to_string(p) + " ended before the kill";
      }
    }
    if (remaining == 0) break;
    if (!sh->killed && !sh->stop) {
      bool all = true;
      for (int p = 0; p < n; ++p) all &= loadAcquire(&sh->rank[p].iteration) >= cfg.killAfter;
      if (all && allReachedNs == 0) allReachedNs = nowNs();
      // The kill lands while the victim has collectives in flight; if that moment is never seen in
      // 2 s (unlikely: it is most of each iteration), between two iterations.
      const bool inFlight = loadAcquire(&sh->rank[run.victim].inFlight) != 0;
      if (all && (inFlight || msSince(allReachedNs) > 2000)) {
        killedAtIteration = loadAcquire(&sh->rank[run.victim].iteration);
        killedInFlight = inFlight;
        sh->killNs = nowNs();
        storeRelease(&sh->killed, 1);
        kill(pids[run.victim], SIGKILL);
        // The survivors' new comm: a fresh id (the first one's rank 0 may be the victim).
        if (yaliGetUniqueId(&sh->recoveryId) == yaliSuccess) {
          storeRelease(&sh->recoveryIdReady, 1);
        } else if (why.empty()) {
          why = std::string("yaliGetUniqueId for the survivors failed: ") + yaliGetLastError(nullptr);
        }
      } else if (now > preKillSeconds) {
        storeRelease(&sh->stop, 1);
        stopNs = nowNs();
        why = "the ranks did not all reach iteration " + std::to_string(cfg.killAfter) + " in " +
              std::to_string((int)preKillSeconds) + " s";
      }
      usleep(all ? 20 : 1000);  // watch closely for the in-flight moment once it may come
      continue;
    }
    const bool stopGraceOver = stopNs != 0 && msSince(stopNs) > kStopGraceSeconds * 1000;
    if (now > runSeconds || stopGraceOver) {
      for (int p = 0; p < n; ++p) {
        if (done[p]) continue;
        logLine("  [%s] rank %d killed by the parent after %.0f s (%s)", head, p, now,
                stopGraceOver ? "the run had stopped" : "run deadline");
        kill(pids[p], SIGKILL);
      }
      for (int p = 0; p < n; ++p) {
        if (done[p]) continue;
        waitpid(pids[p], &status[p], 0);
        done[p] = true;
      }
      if (why.empty()) why = stopGraceOver ? "processes did not leave after a failure" : "run deadline passed";
      break;
    }
    usleep(5000);
  }
  const double seconds = msSince(t0) / 1000.0;

  // The verdict: the victim died of our SIGKILL; every survivor exited 0 with its record final.
  bool pass = why.empty();
  std::string failures;
  const int vst = status[run.victim];
  if (!sh->killed) {
    pass = false;
  } else if (!(WIFSIGNALED(vst) && WTERMSIG(vst) == SIGKILL)) {
    pass = false;
    failures += "; the victim ended before the kill";
  }
  std::vector<double> errMs, abortMs;
  std::vector<std::string> codes;
  int recovered = 0;
  for (int p = 0; p < n; ++p) {
    if (p == run.victim) continue;
    const RankState& s = sh->rank[p];
    const int st = status[p];
    const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == kExitPass && s.finished;
    if (!ok) {
      pass = false;
      if (s.failure[0]) {
        failures += std::string("; ") + s.failure;
      } else if (WIFSIGNALED(st)) {
        failures += "; rank " + std::to_string(p) + " died of signal " + std::to_string(WTERMSIG(st));
      } else {
        failures += "; rank " + std::to_string(p) + " exited with code " +
                    std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      }
    }
    if (s.errorVia != 0) {
      errMs.push_back(s.errorMs);
      codes.push_back(resultName(s.firstError));
    }
    if (s.abortMs > 0) abortMs.push_back(s.abortMs);
    if (s.recoveryIterations == kRecoveryIterations) ++recovered;
  }
  munmap(mem, sizeof(Shared));

  std::string line = std::string(pass ? "PASS  " : "FAIL  ") + head;
  char buf[512];
  if (killedAtIteration < 0) {
    line += ": not killed";
  } else {
    std::snprintf(buf, sizeof buf, ": killed at iteration %lld (%s); first error after %s ms", (long long)killedAtIteration,
                  killedInFlight ? "in flight" : "between iterations", errMs.empty() ? "-" : fmtMs(errMs).c_str());
    line += buf;
    if (!codes.empty()) {
      line += " (";
      for (size_t i = 0; i < codes.size(); ++i) line += (i ? ", " : "") + codes[i];
      line += ")";
    }
    std::snprintf(buf, sizeof buf, "; abort %s ms; new comm of %d: %d/%d verified", abortMs.empty() ? "-" : fmtMs(abortMs).c_str(),
                  n - 1, recovered, n - 1);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, "  (%.1f s)", seconds);
  line += buf;
  if (!why.empty()) line += "; " + why;
  line += failures;
  out.pass = pass;
  out.line = line;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Config cfg;
  if (!parseArgs(argc, argv, &cfg)) return kExitUsage;

  std::vector<RunSpec> runs;
  size_t skipped = 0;
  for (int victim : cfg.victims) {
    for (const AlgoDesc* algo : cfg.algos) {
      for (int g = 0; g < 2; ++g) {
        if ((g == 0 && !cfg.eager) || (g == 1 && !cfg.graph)) continue;
        RunSpec run;
        run.algo = algo;
        run.graph = g == 1;
        run.victim = victim;
        runs.push_back(run);
        if (run.skipped()) ++skipped;
      }
    }
  }
  if (skipped == runs.size()) {
    std::fprintf(stderr, "nothing to run: copy-engine algorithms (*_ce) run eager only, and --mode graph "
                 "leaves out every other run\n");
    return kExitUsage;
  }

  ProbeResult probe = probeGpus();
  if (probe.count <= 0) {
    std::printf("SKIP: no CUDA GPU visible (%s)\n", probe.error[0] ? probe.error : "no devices");
    return kExitSkip;
  }
  std::printf("yali-kill-test: %d ranks (one process each) on %d visible GPU(s) (%s), YALI_TIMEOUT_MS=%d, "
              "kill after %d iterations; bounds: first error %d ms after the kill, abort %.0f ms\n",
              cfg.ranks, probe.count, probe.name, cfg.timeoutMs, cfg.killAfter,
              cfg.timeoutMs + cfg.slackMs, kAbortLimitMs);
  if (cfg.ranks > probe.count) {
    std::printf("NOTE: %d GPU(s) for %d ranks: ranks share GPUs (correctness only; timings mean nothing)\n",
                probe.count, cfg.ranks);
  }

  std::printf("runs: %zu (%zu algorithm(s) x %s x %zu victim(s)), %zu of them skipped (copy-engine "
              "algorithms in graph mode)\n", runs.size() - skipped, cfg.algos.size(),
              cfg.eager && cfg.graph ? "eager, graph" : cfg.eager ? "eager" : "graph", cfg.victims.size(), skipped);

  int passed = 0;
  std::vector<std::string> failed;
  for (const RunSpec& run : runs) {
    if (run.skipped()) {
      std::printf("SKIP  %-20s graph %d ranks, victim %d: a copy-engine algorithm is never chosen inside a "
                  "stream capture (yali.h: graphs take the SM paths); eager only\n",
                  run.algo->name, cfg.ranks, run.victim);
      continue;
    }
    Outcome o = runOnce(cfg, run, probe.count);
    std::printf("%s\n", o.line.c_str());
    if (o.pass) ++passed;
    else failed.push_back(runLabel(run));
  }
  std::printf("kill test: %d of %zu runs passed (%zu skipped)\n", passed, runs.size() - skipped, skipped);
  if (!failed.empty()) {
    std::printf("failed:");
    for (const std::string& f : failed) std::printf(" [%s]", f.c_str());
    std::printf("\n");
  }
  std::printf("VERDICT: %s\n", failed.empty() ? "PASS" : "FAIL");
  return failed.empty() ? kExitPass : kExitFail;
}
