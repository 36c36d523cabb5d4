// Command-line options of yali-perf: nccl-tests' flags plus YALI's (-C, --impl, --timing, --inplace,
// --repeat, --max-case-time, --tune).
//
// Host-only (no CUDA): the parser and the size sweep are unit-tested without a GPU
// (tests/test_perf_args.cc).
#ifndef YALI_PERF_PERF_ARGS_H_
#define YALI_PERF_PERF_ARGS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace yali_perf {

// Element types the benchmark knows: every NCCL type. Kept separate from yaliDataType_t /
// ncclDataType_t so that the parser and the report need neither header; each backend maps them.
// The first three keep the values they had when they were the only ones (case seeds hash them).
enum class DType {
  kFloat,
  kHalf,
  kBfloat16,
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kDouble,
  kF8e4m3,
  kF8e5m2,
};
enum class RedOp { kSum, kProd, kMax, kMin, kAvg };

// Every type in nccl-tests' order (what -d all runs).
const std::vector<DType>& AllDTypes();
bool IsFloating(DType dtype);

// The collectives yali-perf measures. The first nine have yaliCollective_t's values: the first
// eight are the library calls both backends make (Backend::Issue), kAlltoAllv is YALI's uneven
// exchange in its four forms (Backend::IssueVar; alltoallv.h runs it); kRsAg is AllReduce composed
// by hand from a ReduceScatter and an AllGather on the same buffer; kSendRecv is nccl-tests'
// sendrecv, point-to-point (no yaliCollective_t): each rank sends to rank+1 and receives from
// rank-1 in one group (yaliSend/yaliRecv, ncclSend/ncclRecv; Backend::Issue makes the group).
enum class CollId {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kReduce = 4,
  kGather = 5,
  kScatter = 6,
  kAlltoAll = 7,
  kAlltoAllv = 8,
  kRsAg = 9,
  kSendRecv = 10,
};

// Every collective, in the order -C all runs them. Not alltoallv: its cases are sized in tokens
// (--tokens x --hidden x dtype, with a routing), not by the -b/-e sweep that `all` shares, and its
// table has a column per form instead of one row per library, so it runs alone (-C alltoallv).
const std::vector<CollId>& AllCollectives();
// Every collective -C can name: AllCollectives() and alltoallv.
const std::vector<CollId>& NamedCollectives();
// "allreduce", "reducescatter", ..., "rs_ag", "sendrecv", "alltoallv": the JSON's "collective"
// and -C's names.
const char* CollName(CollId coll);

// The forms of AlltoAllv (yali.h, "AlltoAllv: uneven exchange"): the columns of -C alltoallv.
enum class VarForm {
  kHostCounts,      // yaliAlltoAllv; on NCCL, grouped ncclSend/ncclRecv (torch's all_to_all_single)
  kDeviceCounts,    // yaliAlltoAllvDeviceCounts: int64 counts in device memory
  kExpertDispatch,  // yaliExpertDispatch: rows to global experts, received expert-major
  kExpertCombine,   // yaliExpertCombine: the dispatch's inverse
};
const char* VarFormName(VarForm form);  // "host_counts", "device_counts", "dispatch", "combine"

// How -C alltoallv routes tokens to experts (alltoallv_plan.h: ExpertWeights).
enum class TokenDist {
  kUniform,  // every expert alike
  kZipf,     // expert of popularity rank i (a seeded permutation) weighs 1 / (i + 1)^s
  kHot,      // the experts of rank 0 share --hot-share of the weight
};
const char* TokenDistName(TokenDist dist);  // "uniform", "zipf", "hot"

// -C alltoallv: the Mixture-of-Experts exchange. Every rank routes `tokens` tokens, each to `topk`
// distinct experts among `experts` (experts / nranks on each rank), and sends one row of `hidden`
// elements per (token, choice). The defaults are DeepSeek-V3's layer: 4096 tokens of 7168 bf16,
// top-8 of 256 experts.
struct AlltoAllvArgs {
  std::vector<size_t> tokens = {4096};  // --tokens: per rank, one table line each
  size_t hidden = 7168;                 // --hidden: elements per row
  int topk = 8;                         // --topk
  int experts = 256;                    // --experts: in all, a multiple of nranks
  std::vector<TokenDist> dists = {TokenDist::kUniform};  // --dist: one block of lines each
  double zipf_s = 1.0;                  // --zipf-s: the exponent of kZipf
  double hot_share = 0.5;               // --hot-share: the weight of rank 0's experts in kHot
  size_t align_rows = 1;                // --align: each expert's segment in the dispatch's output
  uint64_t seed = 1;                    // --seed: routing and row data
};

// -r all: every rank in turn is the root of the rooted collectives (nccl-tests' -r -1).
constexpr int kEveryRoot = -1;

enum class TimingMode {
  kEvents,      // CUDA events around -n back-to-back calls (the nccl-tests method)
  kGraph,       // the -n calls captured into one CUDA graph, launched -G times
  kThroughput,  // host clock around -n back-to-back calls
  kLatency,     // host clock around each call, synchronized one by one
};

// How the per-rank times of one collective become the reported time (-a).
// -a: nccl-tests' numbers (0 rank 0's time, 1 the mean over ranks, 2 the minimum, 3 the maximum).
enum class RankAggregate { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };

// Placement of the result: --inplace 0 runs out-of-place only, 1 in-place only, 2 both.
enum class PlacementSet { kOutOfPlace = 0, kInPlace = 1, kBoth = 2 };

struct PerfArgs {
  size_t min_bytes = 4096;
  size_t max_bytes = size_t(1) << 30;
  // -e max: the sweep ends at the largest message whose buffers fit on every GPU (max_bytes is
  // then unused); see SizeSweepUpTo.
  bool max_bytes_auto = false;
  // The sweep multiplies by step_factor when it is > 1, else adds step_bytes (nccl-tests' rule).
  double step_factor = 4.0;
  size_t step_bytes = size_t(1) << 20;
  int ngpus = 0;  // 0: not given (all visible GPUs in single-process mode, 1 under a launcher)
  int iters = 20;
  int warmup = 5;
  // --repeat: passes over the whole sweep in this process; each result carries its pass number
  // ("run" in the JSON), so that one process can stand for several runs of the report.
  int repeat = 1;
  // --max-case-time: seconds; 0 means no limit. See CallCountsWithinTimeLimit.
  double max_case_seconds = 0;
  bool check = true;
  // -C: the collectives, in command-line order (default AllReduce alone).
  std::vector<CollId> collectives = {CollId::kAllReduce};
  // -r: the root of broadcast, reduce, gather and scatter (nccl-tests' default 0), or kEveryRoot.
  int root = 0;
  std::vector<DType> dtypes = {DType::kFloat};  // -C alltoallv alone: bfloat16 unless -d is given
  std::vector<RedOp> ops = {RedOp::kSum};
  int graph_launches = 0;  // -G; > 0 selects graph timing
  std::string json_path;   // -J; empty: no JSON
  RankAggregate average = RankAggregate::kMean;
  bool run_yali = true;
  bool run_nccl = true;
  bool impl_given = false;  // --impl on the command line (so a missing NCCL is an error, not a note)
  TimingMode timing = TimingMode::kEvents;
  PlacementSet placements = PlacementSet::kBoth;
  bool percentiles = false;  // --percentiles: a second table with the per-iteration distribution
  // -R (nccl-tests' flag and values). 0: plain buffers. 1: every library under test registers
  // each rank's send and receive buffers with its comms (yaliCommRegister, ncclCommRegister)
  // before the first case, so that both may run zero-copy on them. 2: each library at its best:
  // YALI as with 1; NCCL's registered as symmetric windows (ncclCommWindowRegister,
  // NCCL_WIN_COLL_SYMMETRIC), which its symmetric kernels and, under -x 2, its copy-engine
  // collectives need.
  int registered = 0;
  // --nccl-memory: NCCL runs on buffers of its own from ncclMemAlloc (own, the default: what
  // nccl-tests gives it, cuMem memory, which NCCL's registration takes, at capture in graphs and
  // by ncclCommRegister) or on the cudaMalloc buffers YALI runs on (shared: what PyTorch's default
  // caching allocator hands NCCL; NCCL registers none of it). YALI always runs on cudaMalloc's
  // (its registration, CUDA IPC, takes only those). Backend::WantsOwnBuffers.
  bool nccl_own_memory = true;
  // -x (nccl-tests' --cta_policy): NCCL's comms are made with ncclConfig_t.CTAPolicy set to
  // this (0 default, 1 efficiency, 2 zero: copy engines where NCCL can); -1: not set, the comms
  // are made as before (ncclCommInitAll / ncclCommInitRank).
  int nccl_cta_policy = -1;
  // --tune: measure YALI's crossovers on this machine and write a tuning table (tune.h) to
  // tune_out (--tune-out) instead of running the sweep.
  bool tune = false;
  std::string tune_out = "yali-tuning.txt";
  // --tune-colls: what --tune measures, allreduce first and always (tune_plan.h:
  // TunableCollectives(), which is the default; ParseArgs fills it).
  std::vector<CollId> tune_colls;
  // -C alltoallv's shape (--tokens, --hidden, --topk, --experts, --dist, --zipf-s, --hot-share,
  // --align, --seed).
  AlltoAllvArgs alltoallv;
  bool help = false;
};

// True when the run is -C alltoallv (which runs alone).
bool RunsAlltoAllv(const PerfArgs& args);

// Parses argv[1..argc). Returns false and sets *error (one line naming the option) on a bad option.
bool ParsePerfArgs(int argc, const char* const* argv, PerfArgs* args, std::string* error);

// "4096", "4K", "32M", "1G", "2GB", "8KiB" -> bytes (powers of 1024, as nccl-tests). False if malformed.
bool ParseSize(const std::string& text, size_t* bytes);

// The message sizes of the sweep, min..max inclusive, in bytes.
std::vector<size_t> SizeSweep(const PerfArgs& args);
// The sweep when the largest message that fits is `limit` bytes: SizeSweep's sizes up to
// min(max, limit); with -e max, the sizes from -b up to `limit`, then `limit` itself when the steps
// do not land on it, so that the sweep ends at the largest message that fits.
std::vector<size_t> SizeSweepUpTo(const PerfArgs& args, size_t limit);

// Number of elements for a byte size (nccl-tests semantics: bytes / element size, rounded down).
size_t ElementSize(DType dtype);
inline size_t CountForBytes(size_t bytes, DType dtype) { return bytes / ElementSize(dtype); }
// Machine epsilon (the gap between 1 and the next representable value) of each element type; 0 for
// the integer types, whose reductions are exact.
double DTypeEpsilon(DType dtype);

// Names as the table and the JSON print them (nccl-tests' -d names): "int8", "uint8", "int32",
// "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"; "sum",
// "prod", ...
const char* DTypeName(DType dtype);
const char* RedOpName(RedOp op);
const char* TimingModeName(TimingMode mode);

// Calls that one case (one size, dtype, op, library and placement) makes.
struct CallCounts {
  int iters = 0;   // timed iterations (-n, or fewer under --max-case-time)
  int warmup = 0;  // untimed calls before them (-w, or fewer under --max-case-time)
};

// --max-case-time never takes a case below this many timed iterations. Ten is where the
// per-iteration statistics still mean something: P90 lies between real samples, the sample std
// has 9 degrees of freedom, and the report pools them over runs (50 samples with 5 runs). The
// sizes that reach the floor are the large ones (hundreds of MB), whose calls last milliseconds
// and vary by well under 1%, so ten back-to-back calls already give their mean time.
constexpr int kMinItersWithinTimeLimit = 10;
// Under --max-case-time the warmup starts with this many calls, whatever -w says: the first
// absorbs set-up done on a case's first call (the check run is skipped with -c 0), the second
// is timed to estimate the time per call from which the counts are derived.
constexpr int kTimeLimitProbeCalls = 2;

// The counts of one case under a limit of `max_case_seconds` (0: no limit, -n and -w as given)
// for a call estimated at `seconds_per_call`, in a timing mode that makes `calls_per_iteration`
// calls per timed iteration (CallsPerIteration). The timed iterations shrink to fit the limit,
// but never below kMinItersWithinTimeLimit (nor above -n); the warmup shrinks by the same factor,
// but never below kTimeLimitProbeCalls. A pure function: every rank that feeds it the same
// estimate gets the same counts.
CallCounts CallCountsWithinTimeLimit(int iters, int warmup, double max_case_seconds,
                                     double seconds_per_call, double calls_per_iteration);

// Calls of the collective per timed iteration in `mode`: events times -n calls twice (the
// headline block, then the block with an event between calls); graph runs the captured -n calls
// once to upload the graph, then graph_launches times; throughput and latency once.
double CallsPerIteration(TimingMode mode, int graph_launches);

// The -h text.
std::string PerfUsage(const char* program);

}  // namespace yali_perf

#endif  // YALI_PERF_PERF_ARGS_H_
