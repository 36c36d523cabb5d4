// yali-perf: bandwidth and correctness of YALI's and NCCL's collectives, side by side on the same
// buffers, with nccl-tests' flags, sizes and table. See PerfUsage() (-h) for the options.
//
// The flow: parse the options; find this process's place (single process driving -g GPUs, or one
// process per GPU under a launcher, meeting through HostExchange); create both libraries' comms;
// allocate one send and one receive buffer per rank, shared by every case (with -R 1, registered
// with both libraries); then for each pass of --repeat, collective, dtype, op, root and size, run
// each library out-of-place and in-place through the same harness (harness.cc) and print one
// table row per library.
// With -e max, the buffers take what the GPUs have free (less a headroom for the libraries), after
// every collective has run once on small buffers, and each collective's sweep ends at the largest
// message that fits.
// With --tune, the same set-up (YALI only), then tune.cc measures YALI's crossovers instead of the
// sweep and writes a tuning table.
// With -C alltoallv, the same set-up with buffers sized for its largest case, then alltoallv.cc
// runs its cases (sized in tokens) instead of the sweep, with a table and JSON of its own.
#include <unistd.h>
#include <yali/yali.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "alltoallv.h"
#include "alltoallv_report.h"
#include "backend.h"
#include "coll_shape.h"
#include "collectives.h"
#include "cuda_check.h"
#include "harness.h"
#include "host_exchange.h"
#include "launch_env.h"
#include "perf_args.h"
#include "perf_error.h"
#include "report.h"
#include "sample_stats.h"
#include "text_format.h"
#include "tune.h"
#include "tune_plan.h"

namespace yali_perf {
namespace {

// Memory left free on each GPU beside the buffers: NCCL and YALI may allocate more on first use
// (NCCL's lazily created channels, graph uploads).
constexpr size_t kDeviceHeadroomBytes = size_t(1) << 30;
// -e max fills the GPUs, so it leaves more, by default the larger of these: NCCL connects (and
// allocates the buffers of) each algorithm and each peer on first use, CUDA graphs and the
// check's kernels need some too. $YALI_PERF_MEM_HEADROOM overrides.
constexpr size_t kMaxModeMinHeadroomBytes = size_t(2) << 30;
constexpr size_t kMaxModeHeadroomFraction = 32;  // 1/32 of the GPU's memory
// -e max first runs every collective on every library once at each of these sizes, on buffers of
// the larger one, so that what the libraries create lazily exists before the big buffers take the
// memory (and is counted in the free memory they are sized from).
constexpr size_t kPrewarmSizes[] = {4096, size_t(32) << 20};
constexpr size_t kBufferGranularity = 4096;
// An allocation that fails is retried this much smaller (7/8), down to kBufferGranularity.
constexpr size_t kStepDownNumerator = 7;
constexpr size_t kStepDownDenominator = 8;
// How long a failing rank waits for its communicators to abort before it exits anyway.
constexpr int kAbortTimeoutSeconds = 10;

struct Options {
  PerfArgs args;
  LaunchEnv launch;
  double timeout_s = 120.0;
  std::string rendezvous_dir = "/tmp";
  std::string command;
  std::string nvls_note;
  // The NCCL_/YALI_/CUDA_/TORCH_ variables as the user set them, before KeepNvlsOff (RunInfo).
  std::vector<std::string> environment;
};

// The variables either library reads (NAME=value, sorted; bytes outside printable ASCII as '?',
// so that the JSON stays valid UTF-8).
std::vector<std::string> LibraryEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string v(*e);
    bool ours = false;
    for (const char* prefix : {"NCCL_", "YALI_", "CUDA_", "TORCH_"}) ours = ours || v.rfind(prefix, 0) == 0;
    if (!ours) continue;
    for (char& c : v)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string ShellQuoted(const std::string& word) {
  bool plain = !word.empty();
  for (char c : word)
    if (!(isalnum(static_cast<unsigned char>(c)) || std::string("-_=.,/:+@%").find(c) != std::string::npos))
      plain = false;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string CommandLine(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + ShellQuoted(argv[i]);
  return command;
}

std::string UtcNow() {
  std::time_t now = std::time(nullptr);
  std::tm utc;
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string HostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// NVLink multicast (NVLS) must stay off on shared machines: unless the user chose otherwise, NCCL
// is told so before it reads its environment (at comm creation).
std::string KeepNvlsOff() {
  const char* user_value = std::getenv("NCCL_NVLS_ENABLE");
  if (user_value == nullptr) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    return "NCCL_NVLS_ENABLE=0 (set by yali-perf: no NVLink multicast)";
  }
  std::string note = std::string("NCCL_NVLS_ENABLE=") + user_value + " (from the environment)";
  if (std::string(user_value) != "0") note += "  WARNING: NCCL may use NVLink multicast";
  return note;
}

Options ParseOptionsOrExit(int argc, char** argv) {
  Options options;
  options.command = CommandLine(argc, argv);
  std::string error;
  if (!ParsePerfArgs(argc, argv, &options.args, &error)) {
    std::fprintf(stderr, "yali-perf: %s\n", error.c_str());
    std::exit(2);
  }
  if (options.args.help) {
    std::fputs(PerfUsage(argv[0]).c_str(), stdout);
    std::exit(0);
  }
  if (!DetectLaunchEnv(ProcessEnv(), static_cast<int>(getppid()), &options.launch, &error)) {
    std::fprintf(stderr, "yali-perf: %s\n", error.c_str());
    std::exit(2);
  }
  if (const char* timeout = std::getenv("YALI_PERF_TIMEOUT_S")) {
    options.timeout_s = std::atof(timeout);
    if (!(options.timeout_s > 0)) {
      std::fprintf(stderr, "yali-perf: YALI_PERF_TIMEOUT_S=%s: expected seconds > 0\n", timeout);
      std::exit(2);
    }
  }
  if (const char* dir = std::getenv("YALI_PERF_RENDEZVOUS_DIR")) {
    if (*dir != '\0') options.rendezvous_dir = dir;
  }
  return options;
}

uint64_t MixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The same data for both libraries at one (collective, dtype, op, root, size, placement),
// different data elsewhere. AllReduce's seeds are those it had before the other collectives.
uint64_t CaseSeed(CollId coll, DType dtype, RedOp op, int root, size_t bytes, bool in_place) {
  uint64_t seed = MixSeed(static_cast<uint64_t>(dtype) + 1);
  seed = MixSeed(seed ^ (static_cast<uint64_t>(op) + 17));
  seed = MixSeed(seed ^ bytes);
  seed = MixSeed(seed ^ (in_place ? 0x5151 : 0xa0a0));
  if (coll == CollId::kAllReduce) return seed;
  return MixSeed(seed ^ (static_cast<uint64_t>(coll) << 32) ^ static_cast<uint64_t>(root + 1));
}

// -e max's headroom on a GPU of `total_bytes`: $YALI_PERF_MEM_HEADROOM, else the larger of
// kMaxModeMinHeadroomBytes and 1/kMaxModeHeadroomFraction of the GPU.
size_t MaxModeHeadroom(size_t total_bytes) {
  if (const char* text = std::getenv("YALI_PERF_MEM_HEADROOM")) {
    size_t bytes = 0;
    if (!ParseSize(text, &bytes))
      Fatal(std::string("YALI_PERF_MEM_HEADROOM=") + text + ": expected a size such as 4G");
    return bytes;
  }
  return std::max(kMaxModeMinHeadroomBytes, total_bytes / kMaxModeHeadroomFraction);
}

// What one local rank's GPU offers: its free memory before our buffers, and how many ranks of the
// job share it (YALI_ALLOW_SHARED_GPU in one process, or processes that picked the same device).
struct GpuMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  int sharing = 1;
};

std::vector<GpuMemory> SurveyMemory(World& world) {
  std::vector<GpuMemory> memory(world.local.size());
  std::vector<std::string> bus_ids(world.local.size());
  for (size_t i = 0; i < world.local.size(); ++i) {
    YALI_PERF_CUDA(cudaSetDevice(world.local[i].device));
    YALI_PERF_CUDA(cudaMemGetInfo(&memory[i].free_bytes, &memory[i].total_bytes));
    char bus_id[64] = {0};
    YALI_PERF_CUDA(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, world.local[i].device));
    bus_ids[i] = bus_id;
  }
  if (!world.multi_process) {
    for (size_t i = 0; i < memory.size(); ++i)
      memory[i].sharing = static_cast<int>(
          std::count(bus_ids.begin(), bus_ids.end(), bus_ids[i]));
    return memory;
  }
  // Processes that share a GPU each see the same free memory: each must count the others. They
  // all measured before any of them allocated (the exchange is the barrier), so the smallest
  // reading among them is the one to share.
  std::vector<std::string> all;
  std::string error;
  if (!world.exchange->AllGather(bus_ids[0] + " " + std::to_string(memory[0].free_bytes), &all,
                                 &error))
    Fatal("surveying the GPUs' memory: " + error);
  int sharing = 0;
  for (const std::string& line : all) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) Fatal("malformed memory survey from a peer: " + line);
    if (line.substr(0, space) != bus_ids[0]) continue;
    ++sharing;
    memory[0].free_bytes = std::min<size_t>(memory[0].free_bytes, std::stoull(line.substr(space + 1)));
  }
  memory[0].sharing = std::max(1, sharing);
  return memory;
}

// The smallest of every rank's `mine` (each process passes the smallest of its local ranks').
size_t MinOverRanks(World& world, size_t mine, const char* what) {
  if (!world.multi_process) return mine;
  std::vector<std::string> all;
  std::string error;
  if (!world.exchange->AllGather(std::to_string(mine), &all, &error))
    Fatal(std::string("agreeing on ") + what + ": " + error);
  for (const std::string& text : all) mine = std::min<size_t>(mine, std::stoull(text));
  return mine;
}

// What AllocateBuffers did, for the report.
struct BufferPlan {
  size_t smallest_free = 0;  // the least free memory per rank's share of a GPU, over all ranks
  size_t headroom = 0;       // left free on each GPU
  int step_downs = 0;        // allocations that failed and were retried smaller, over local ranks
};

// Allocates the shared buffers, equal on every rank: as large as the largest case needs (`wanted`),
// less if the GPU lacks the memory (cases that do not fit are then skipped); with `fill` (-e max),
// as large as every GPU affords. Each GPU's free memory (cudaMemGetInfo), less the headroom, is
// split among the ranks that share it, two buffers each per set (`buffer_sets`: 2 when a library
// will run on buffers of its own: NCCL, Backend::WantsOwnBuffers); the smallest share over all ranks sets the size. An
// allocation that fails anyway (fragmentation, another process) steps down and retries instead of
// failing the run.
BufferPlan AllocateBuffers(World& world, size_t wanted, bool fill, int buffer_sets = 1) {
  BufferPlan plan;
  const std::vector<GpuMemory> memory = SurveyMemory(world);
  // Rounded up: the rounding down to the granularity below must not cut what a case needs (an
  // AlltoAllv case of 590714880 bytes was skipped on 2026-11-28 for 2 KB).
  size_t target = fill ? std::numeric_limits<size_t>::max()
                       : (std::max(wanted, kBufferGranularity) + kBufferGranularity - 1) / kBufferGranularity *
                             kBufferGranularity;
  plan.smallest_free = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < world.local.size(); ++i) {
    const GpuMemory& gpu = memory[i];
    const size_t headroom = fill ? MaxModeHeadroom(gpu.total_bytes) : kDeviceHeadroomBytes;
    plan.headroom = std::max(plan.headroom, headroom);
    const size_t share = gpu.free_bytes / static_cast<size_t>(gpu.sharing);
    plan.smallest_free = std::min(plan.smallest_free, share);
    const size_t buffers_per_rank = 2 * static_cast<size_t>(buffer_sets);
    const size_t affordable =
        gpu.free_bytes > headroom
            ? (gpu.free_bytes - headroom) / (buffers_per_rank * static_cast<size_t>(gpu.sharing))
            : 0;
    target = std::min(target, affordable);
  }
  plan.smallest_free = MinOverRanks(world, plan.smallest_free, "the GPUs' free memory");
  // Every rank asks for the same: a rank that could hold more would only keep memory idle.
  target = MinOverRanks(world, target, "the buffer size") / kBufferGranularity * kBufferGranularity;

  size_t mine = target;
  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    size_t capacity = target;
    for (;;) {
      if (capacity < kBufferGranularity)
        Fatal("cannot allocate two buffers of even " + std::to_string(kBufferGranularity) +
              " bytes on device " + std::to_string(slot.device));
      cudaError_t send_status = cudaMalloc(&slot.send, capacity);
      cudaError_t recv_status = send_status == cudaSuccess ? cudaMalloc(&slot.recv, capacity)
                                                            : send_status;
      if (send_status == cudaSuccess && recv_status == cudaSuccess) break;
      if (send_status == cudaSuccess) YALI_PERF_CUDA(cudaFree(slot.send));
      slot.send = slot.recv = nullptr;
      cudaGetLastError();  // clear the allocation failure; step down
      ++plan.step_downs;
      capacity = capacity / kStepDownDenominator * kStepDownNumerator / kBufferGranularity *
                 kBufferGranularity;
    }
    YALI_PERF_CUDA(cudaMalloc(&slot.counters, 2 * sizeof(unsigned long long)));
    mine = std::min(mine, capacity);
  }
  world.buffer_bytes = MinOverRanks(world, mine, "the allocated buffer size");
  return plan;
}

void FreeBuffers(World& world) {
  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    for (cudaEvent_t event : slot.events) YALI_PERF_CUDA(cudaEventDestroy(event));
    slot.events.clear();
    YALI_PERF_CUDA(cudaFree(slot.send));
    YALI_PERF_CUDA(cudaFree(slot.recv));
    YALI_PERF_CUDA(cudaFree(slot.counters));
    YALI_PERF_CUDA(cudaStreamDestroy(slot.stream));
  }
}

std::vector<GpuInfo> DescribeGpus(World& world) {
  std::vector<GpuInfo> gpus;
  for (const RankSlot& slot : world.local) {
    cudaDeviceProp properties;
    YALI_PERF_CUDA(cudaGetDeviceProperties(&properties, slot.device));
    char bus_id[64] = {0};
    YALI_PERF_CUDA(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, slot.device));
    gpus.push_back({slot.rank, slot.device, properties.name, bus_id});
  }
  if (!world.multi_process) return gpus;
  // One line per rank: "rank device pci_bus_id name" (the name last: it has spaces).
  std::string mine = std::to_string(gpus[0].rank) + " " + std::to_string(gpus[0].device) + " " +
                     gpus[0].pci_bus_id + " " + gpus[0].name;
  std::vector<std::string> all;
  std::string error;
  if (!world.exchange->AllGather(mine, &all, &error)) Fatal("gathering GPU names: " + error);
  gpus.clear();
  for (const std::string& line : all) {
    GpuInfo gpu;
    char bus_id[64] = {0};
    int name_offset = 0;
    if (std::sscanf(line.c_str(), "%d %d %63s %n", &gpu.rank, &gpu.device, bus_id, &name_offset) < 3)
      Fatal("malformed GPU description from a peer: " + line);
    gpu.pci_bus_id = bus_id;
    gpu.name = line.substr(name_offset);
    gpus.push_back(gpu);
  }
  return gpus;
}

// What the report and the JSON say about the run.
RunInfo DescribeRun(const Options& options, World& world, const std::string& collectives,
                    int nccl_version, bool nccl_runs) {
  const PerfArgs& args = options.args;
  RunInfo info;
  info.collective = collectives;
  info.date = UtcNow();
  info.hostname = HostName();
  info.command = options.command;
  info.nranks = world.nranks;
  info.multi_process = world.multi_process;
  info.timing = args.timing;
  info.iters = args.iters;
  info.warmup = args.warmup;
  info.graph_launches = args.timing == TimingMode::kGraph ? args.graph_launches : 0;
  info.repeat = args.repeat;
  info.max_case_seconds = args.max_case_seconds;
  info.registered = args.registered;
  info.nccl_cta_policy = args.nccl_cta_policy;
  info.nccl_own_memory = args.nccl_own_memory;
  info.gpus = DescribeGpus(world);
  YALI_PERF_CUDA(cudaSetDevice(world.local[0].device));
  if (yaliGetVersion(&info.yali_version) != yaliSuccess) info.yali_version = -1;
  info.nccl_version = nccl_version;
  info.max_bytes_auto = args.max_bytes_auto;
  info.buffer_bytes = world.buffer_bytes;
  info.environment = options.environment;  // as the user set them (yali-perf's own: nvls_note)
  info.average = static_cast<int>(args.average);
  // NCCL runs here when it has a version (built, loaded) and the caller says it takes part. On its
  // own ncclMemAlloc memory (the default) its registration takes effect; on the shared cudaMalloc
  // buffers (--nccl-memory shared) ncclCommRegister succeeds and registers nothing (NCCL takes such
  // memory, from 2.24 on, only with NCCL_LEGACY_CUDA_REGISTER=1, and never among the ranks of one
  // process).
  if (args.registered == 1 && nccl_runs && nccl_version >= 22400 && !args.nccl_own_memory) {
    const char* legacy = std::getenv("NCCL_LEGACY_CUDA_REGISTER");
    const bool effective = world.multi_process && legacy != nullptr && std::string(legacy) == "1";
    if (!effective)
      info.nccl_registration_note =
          std::string("-R 1 with --nccl-memory shared: NCCL's registration of these cudaMalloc buffers does nothing (") +
          (world.multi_process ? "NCCL_LEGACY_CUDA_REGISTER is not 1" : "one process drives every rank") +
          "): NCCL runs its copy path while YALI may run zero-copy";
  }
  return info;
}

std::string TimingDescription(const PerfArgs& args) {
  std::string text;
  switch (args.timing) {
    case TimingMode::kEvents:
      text = "events: CUDA events around -n " + std::to_string(args.iters) +
             " back-to-back calls on each rank's stream, after -w " + std::to_string(args.warmup) +
             " warmup calls";
      break;
    case TimingMode::kGraph:
      text = "graph: -n " + std::to_string(args.iters) +
             " calls captured into one CUDA graph per rank, launched -G " +
             std::to_string(args.graph_launches) + " times between CUDA events";
      break;
    case TimingMode::kThroughput:
      text = "throughput: host clock around -n " + std::to_string(args.iters) +
             " back-to-back calls, GPUs idle before and after";
      break;
    case TimingMode::kLatency:
      text = "latency: host clock around each call, waiting for it to finish (-n " +
             std::to_string(args.iters) + " samples)";
      break;
  }
  // RankAggregate's order: nccl-tests' -a numbers.
  const char* aggregate[] = {"rank 0's", "mean", "min", "max"};
  static_assert(static_cast<int>(RankAggregate::kMax) == 3, "one name per -a value");
  text += "; time = " + std::string(aggregate[static_cast<int>(args.average)]) +
          " over ranks of each rank's time per call (-a " +
          std::to_string(static_cast<int>(args.average)) + ")";
  if (args.max_case_seconds > 0) {
    text += Format("; --max-case-time %g: -n and -w shrink per case to about %g s of timed calls "
                   "(at least %d iterations), sized from a timed warmup call (the fastest rank's)",
                   args.max_case_seconds, args.max_case_seconds, kMinItersWithinTimeLimit);
  }
  if (args.repeat > 1) text += "; " + std::to_string(args.repeat) + " passes (--repeat)";
  return text;
}

// Per-collective totals of one library, for the summary lines.
struct CollTotals {
  uint64_t wrong = 0;
  double busbw_sum = 0;
  int results = 0;
  // -e max: the largest message that ran.
  bool ran = false;
  LargestRecord largest;
};

struct ImplRun {
  explicit ImplRun(std::unique_ptr<Backend> library) : backend(std::move(library)) {}
  std::unique_ptr<Backend> backend;
  // A library that wants buffers of its own (Backend::WantsOwnBuffers: NCCL): its send and
  // receive buffer per local rank; empty for a library that runs on the shared ones.
  std::vector<std::pair<void*, void*>> own_buffers;
  uint64_t total_wrong = 0;
  double busbw_sum = 0;
  int results = 0;
  std::map<CollId, CollTotals> per_collective;
};

// "allreduce,allgather": the JSON's top-level "collective".
std::string CollectiveList(const std::vector<CollId>& collectives) {
  std::string text;
  for (CollId coll : collectives) text += (text.empty() ? "" : ",") + std::string(CollName(coll));
  return text;
}

// The label of one case in the notes: "4096 B float sum", with the collective and root in front
// when the run has more than plain allreduce ("reducescatter 4096 B float sum").
std::string CaseLabel(bool name_collective, CollId coll, int root, size_t bytes, DType dtype,
                      const std::string& redop) {
  std::string text;
  if (name_collective) {
    text = std::string(CollName(coll)) + " ";
    if (CollHasRoot(coll)) text += "root " + std::to_string(root) + " ";
  }
  return text + std::to_string(bytes) + " B " + DTypeName(dtype) + " " + redop;
}

// -e max: runs every selected collective once per library at kPrewarmSizes on buffers of the
// largest of them, so that what the libraries set up on first use is there before the big
// buffers are sized from the free memory. Refused cases are simply passed over.
void Prewarm(World& world, std::vector<ImplRun>& impls, const PerfArgs& args) {
  const size_t bytes = *std::max_element(std::begin(kPrewarmSizes), std::end(kPrewarmSizes));
  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    YALI_PERF_CUDA(cudaMalloc(&slot.send, bytes));
    YALI_PERF_CUDA(cudaMalloc(&slot.recv, bytes));
  }
  world.buffer_bytes = bytes;
  TimingOptions once;
  once.mode = TimingMode::kEvents;
  once.iters = 1;
  once.warmup = 0;
  once.check = false;
  for (CollId coll : args.collectives) {
    for (ImplRun& impl : impls) {
      for (size_t size : kPrewarmSizes) {
        CaseSpec spec;
        spec.collective = &CollectiveFor(coll);
        spec.dtype = DType::kFloat;
        spec.op = RedOp::kSum;
        spec.root = 0;
        spec.shape = ShapeFor(coll, size, ElementSize(spec.dtype), world.nranks);
        spec.in_place = false;
        spec.seed = CaseSeed(coll, spec.dtype, spec.op, 0, size, false);
        RunCase(world, *impl.backend, spec, once);
      }
    }
  }
  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    YALI_PERF_CUDA(cudaFree(slot.send));
    YALI_PERF_CUDA(cudaFree(slot.recv));
    slot.send = slot.recv = nullptr;
  }
  world.buffer_bytes = 0;
}

// The shared send and receive buffer of each local rank, as AllocateBuffers made them.
std::vector<std::pair<void*, void*>> SlotBuffers(const World& world) {
  std::vector<std::pair<void*, void*>> buffers;
  for (const RankSlot& slot : world.local) buffers.emplace_back(slot.send, slot.recv);
  return buffers;
}

// Points every local rank's slot at `buffers` (one send and receive buffer per local rank).
void SetSlotBuffers(World& world, const std::vector<std::pair<void*, void*>>& buffers) {
  for (size_t i = 0; i < world.local.size(); ++i) {
    world.local[i].send = buffers[i].first;
    world.local[i].recv = buffers[i].second;
  }
}

// Points every local rank's slot at `impl`'s buffers: its own (NCCL's) or the shared ones.
void UseBuffersOf(World& world, const ImplRun& impl,
                  const std::vector<std::pair<void*, void*>>& shared) {
  SetSlotBuffers(world, impl.own_buffers.empty() ? shared : impl.own_buffers);
}

// Each library that wants buffers of its own gets a send and a receive buffer per local rank,
// world.buffer_bytes each, from the library itself.
void AllocateOwnBuffers(World& world, std::vector<ImplRun>& impls, int mode) {
  for (ImplRun& impl : impls) {
    if (!impl.backend->WantsOwnBuffers(mode)) continue;
    for (size_t i = 0; i < world.local.size(); ++i) {
      void* send = impl.backend->AllocateOwnBuffer(static_cast<int>(i), world.buffer_bytes);
      void* recv = impl.backend->AllocateOwnBuffer(static_cast<int>(i), world.buffer_bytes);
      impl.own_buffers.emplace_back(send, recv);
    }
  }
}

// The orderly end of a run: registrations, comms, buffers, the rendezvous.
void EndRun(World& world, std::vector<ImplRun>& impls, const PerfArgs& args, bool multi,
            HostExchange& exchange, const std::vector<std::pair<void*, void*>>& shared) {
  // Deregistration first: it needs the comms. Collective for YALI like the registration, so the
  // ranks start it together (rank 0 has just written the report). NCCL requires its
  // windows deregistered before ncclCommDestroy and before ncclMemFree of their memory: hence
  // deregister, destroy, then free the libraries' own buffers.
  if (args.registered) {
    HostBarrier(world, "before deregistering the buffers");
    for (ImplRun& impl : impls) impl.backend->DeregisterBuffers();
  }
  for (ImplRun& impl : impls) impl.backend->DestroyAll();
  for (ImplRun& impl : impls) {
    for (size_t i = 0; i < impl.own_buffers.size(); ++i) {
      impl.backend->FreeOwnBuffer(static_cast<int>(i), impl.own_buffers[i].first);
      impl.backend->FreeOwnBuffer(static_cast<int>(i), impl.own_buffers[i].second);
    }
    impl.own_buffers.clear();
  }
  SetSlotBuffers(world, shared);  // FreeBuffers frees the shared ones
  FreeBuffers(world);
  if (multi) {
    std::string error;
    if (!exchange.Close(&error)) Fatal("closing the rendezvous: " + error);
  }
}

int Run(const Options& options) {
  const PerfArgs& args = options.args;
  const bool multi = options.launch.under_launcher && options.launch.size > 1;

  World world;
  world.multi_process = multi;
  world.timeout_s = options.timeout_s;
  HostExchange exchange;
  bool ncclSitsOut = false;  // ranks share a GPU in this process (below)
  if (multi) {
    SetErrorPrefix("yali-perf: rank " + std::to_string(options.launch.rank) + ": ");
    if (args.ngpus > 1)
      Fatal("-g " + std::to_string(args.ngpus) + " under a launcher: run one process per GPU (-g 1)");
  }

  int visible = 0;
  YALI_PERF_CUDA(cudaGetDeviceCount(&visible));
  if (visible < 1) Fatal("no CUDA device is visible");

  if (multi) {
    HostExchange::Options exchange_options;
    exchange_options.base_dir = options.rendezvous_dir;
    exchange_options.job_id = options.launch.job_id;
    exchange_options.rank = options.launch.rank;
    exchange_options.nranks = options.launch.size;
    exchange_options.timeout_s = options.timeout_s;
    std::string error;
    if (!exchange.Open(exchange_options, &error)) Fatal("rendezvous: " + error);
    world.exchange = &exchange;
    world.nranks = options.launch.size;
    RankSlot slot;
    slot.rank = options.launch.rank;
    slot.device = options.launch.local_rank % visible;
    world.local.push_back(slot);
  } else {
    int ngpus = args.ngpus > 0 ? args.ngpus : (options.launch.under_launcher ? 1 : visible);
    // More ranks than GPUs only where YALI lets ranks share a GPU (testing: kernel-level costs,
    // never NVLink speed); NCCL cannot put two ranks of one process on one GPU, so it sits out.
    const char* share = std::getenv("YALI_ALLOW_SHARED_GPU");
    const bool sharing = ngpus > visible && share != nullptr && std::string(share) == "1";
    if (ngpus > visible && !sharing)
      Fatal("-g " + std::to_string(ngpus) + " but only " + std::to_string(visible) +
            " GPU(s) are visible (YALI_ALLOW_SHARED_GPU=1 lets ranks share them, YALI only)");
    if (sharing && args.run_nccl && args.impl_given)
      Fatal("-g " + std::to_string(ngpus) + " on " + std::to_string(visible) +
            " GPU(s): NCCL cannot run two ranks of one process on one GPU; use --impl yali");
    if (sharing) ncclSitsOut = true;
    world.nranks = ngpus;
    for (int i = 0; i < ngpus; ++i) {
      RankSlot slot;
      slot.rank = i;
      slot.device = i % visible;
      world.local.push_back(slot);
    }
  }
  const bool printer = world.local[0].rank == 0;

  const bool alltoallv = RunsAlltoAllv(args);
  if (alltoallv) {
    std::string error;
    if (!CheckAlltoAllvWorld(args.alltoallv, world.nranks, &error)) Fatal(error);
  }

  bool any_rooted = false;
  for (CollId coll : args.collectives) any_rooted = any_rooted || CollHasRoot(coll);
  if (any_rooted && args.root != kEveryRoot && args.root >= world.nranks)
    Fatal("-r " + std::to_string(args.root) + ": the root must be a rank, below " +
          std::to_string(world.nranks));

  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    YALI_PERF_CUDA(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking));
  }

  // Libraries: YALI first, so its rows come first at each size.
  std::vector<ImplRun> impls;
  std::string nccl_missing;
  // --tune measures YALI alone: NCCL is not even loaded.
  NcclOptions nccl_options;
  nccl_options.cta_policy = args.nccl_cta_policy;
  nccl_options.own_memory = args.nccl_own_memory;
  std::unique_ptr<Backend> nccl = args.tune ? nullptr : MakeNcclBackend(nccl_options, &nccl_missing);
  if (nccl == nullptr && args.run_nccl && args.impl_given && !ncclSitsOut)
    Fatal("--impl nccl: NCCL baseline not built: " + nccl_missing);
  int nccl_version = nccl != nullptr ? nccl->VersionCode() : -1;
  std::string nccl_version_text = nccl != nullptr ? nccl->VersionText() : "";
  if (args.run_yali || args.tune) impls.emplace_back(MakeYaliBackend());
  if (args.run_nccl && !ncclSitsOut && nccl != nullptr) impls.emplace_back(std::move(nccl));
  if (impls.empty()) Fatal("nothing to run");

  // On a fatal error: first tell the peers (so they stop waiting), then stop the comms. The last
  // library started is aborted first: its kernels are the ones that may be stuck, and an abort of
  // the other library could synchronize the device behind them. Bounded all the same, so that a
  // hung abort cannot keep a failed rank alive.
  AddFatalHook([&impls](const std::string&) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([&impls, done] {
      for (auto it = impls.rbegin(); it != impls.rend(); ++it) it->backend->AbortAll();
      done->set_value();
    }).detach();
    if (finished.wait_for(std::chrono::seconds(kAbortTimeoutSeconds)) != std::future_status::ready)
      std::fprintf(stderr, "yali-perf: aborting the communicators did not finish within %d s\n",
                   kAbortTimeoutSeconds);
  });
  if (multi) AddFatalHook([&exchange](const std::string& message) { exchange.PostAbort(message); });

  if (args.tune) {
    // The comms are created per candidate inside RunTune, on impls[0]'s backend, so that the
    // abort hook above covers them.
    AllocateBuffers(world, TuneLargestMessageBytes(), /*fill=*/false);
    RunInfo info = DescribeRun(options, world, CollName(CollId::kAllReduce), -1, false);
    int code = RunTune(world, *impls[0].backend, args, info);
    FreeBuffers(world);
    if (multi) {
      std::string error;
      if (!exchange.Close(&error)) Fatal("closing the rendezvous: " + error);
    }
    return code;
  }

  for (ImplRun& impl : impls) InitComms(world, *impl.backend);

  // Libraries that run on buffers of their own (NCCL) need a second set of the same size.
  int buffer_sets = 1;
  for (const ImplRun& impl : impls)
    if (impl.backend->WantsOwnBuffers(args.registered)) buffer_sets = 2;
  std::vector<size_t> sizes;
  BufferPlan buffers;
  if (alltoallv) {
    buffers = AllocateBuffers(world, AlltoAllvBufferBytes(args, world.nranks), /*fill=*/false, buffer_sets);
  } else if (args.max_bytes_auto) {
    Prewarm(world, impls, args);
    buffers = AllocateBuffers(world, 0, /*fill=*/true, buffer_sets);
    sizes = SizeSweepUpTo(args, world.buffer_bytes);
  } else {
    sizes = SizeSweep(args);
    size_t wanted = 0;
    for (CollId coll : args.collectives)
      for (DType dtype : args.dtypes)
        for (size_t bytes : sizes)
          wanted = std::max(wanted, ShapeFor(coll, bytes, ElementSize(dtype), world.nranks).bytes);
    buffers = AllocateBuffers(world, wanted, /*fill=*/false, buffer_sets);
  }
  const std::vector<std::pair<void*, void*>> shared_buffers = SlotBuffers(world);
  AllocateOwnBuffers(world, impls, args.registered);
  // -R 1: every library registers the buffers it runs on (YALI the shared ones, NCCL its own of
  // the same size), so that each may run zero-copy. -R 2: each in its best way (NCCL as
  // symmetric windows).
  if (args.registered) {
    for (ImplRun& impl : impls) {
      UseBuffersOf(world, impl, shared_buffers);
      RegisterBuffers(world, *impl.backend, args.registered);
    }
  }

  RunInfo info = DescribeRun(options, world, CollectiveList(args.collectives), nccl_version,
                             args.run_nccl && !ncclSitsOut && nccl_version >= 0);
  // The collective (and root) head each block of rows unless the run is plain allreduce, whose
  // output stays what it always was.
  const bool name_collective =
      !(args.collectives.size() == 1 && args.collectives[0] == CollId::kAllReduce);

  if (printer) {
    std::printf("# yali-perf: %s\n", options.command.c_str());
    if (alltoallv) {
      std::fputs(AlltoAllvPreamble(args, world.nranks).c_str(), stdout);
    } else {
      for (CollId coll : args.collectives)
        std::printf("# collective %s: busbw = algbw * %s\n", CollName(coll), BusFactorText(coll));
    }
    if (any_rooted)
      std::printf("# root: %s (-r)\n",
                  args.root == kEveryRoot ? "every rank in turn" : std::to_string(args.root).c_str());
    if (multi) {
      std::printf("# nranks %d, launch mode multi: one process per GPU (rank/size from %s; "
                  "rendezvous %s, job id from %s)\n",
                  world.nranks, options.launch.source.c_str(), exchange.directory().c_str(),
                  options.launch.job_id_source.c_str());
    } else {
      std::printf("# nranks %d, launch mode single: one process driving %d GPU(s)\n", world.nranks,
                  world.nranks);
    }
    for (const GpuInfo& gpu : info.gpus)
      std::printf("#   rank %2d: device %2d  %s  [%s]\n", gpu.rank, gpu.device, gpu.name.c_str(),
                  gpu.pci_bus_id.c_str());
    std::printf("# YALI version %d (built against header %d)\n", info.yali_version,
                YALI_VERSION_CODE);
    if (nccl_version >= 0) {
      std::printf("# NCCL version %d (%s)%s\n", nccl_version, nccl_version_text.c_str(),
                  args.run_nccl && !ncclSitsOut ? "" : ncclSitsOut ? " (not run: ranks share a GPU)" : " (not run: --impl)");
    } else {
      std::printf("# NCCL baseline not built: %s\n", nccl_missing.c_str());
    }
    std::printf("# %s\n", options.nvls_note.c_str());
    if (!info.nccl_registration_note.empty())
      std::printf("# NOTE %s\n", info.nccl_registration_note.c_str());
    std::printf("# timing %s\n", TimingDescription(args).c_str());
    const char* check_text =
        alltoallv ? "on (-c 1): outputs poisoned before each checked call; #wrong = elements of "
                    "the output rows that differ bit for bit from the row of (source rank, "
                    "token, choice), + positions no row belongs to (padding, past the end) "
                    "that were written, + count and offset outputs that differ, summed over ranks"
                  : "on (-c 1): two calls checked, the first before the warmup and one more "
                    "after the timed calls (graph-launched under -G); #wrong = their elements "
                    "outside tolerance of a float64 reference (exact for integers and data "
                    "movement), summed over ranks, + ranks whose output differs bitwise from "
                    "rank 0's in either call";
    std::printf("# check: %s\n", args.check ? check_text : "off (-c 0)");
    if (args.max_bytes_auto) {
      std::printf("# -e max: buffers sized from the free memory (least per rank: %zu B), %zu B "
                  "left free per GPU for the libraries%s; every collective ran once at 4K and "
                  "32M first\n",
                  buffers.smallest_free, buffers.headroom,
                  buffers.step_downs > 0
                      ? Format(", %d allocation(s) failed and stepped down", buffers.step_downs).c_str()
                      : "");
    }
    const char* registration[] = {
        "not registered (-R 0)",
        "registered with each library (-R 1: yaliCommRegister, ncclCommRegister)",
        "each library at its best (-R 2): YALI's registered with yaliCommRegister; NCCL's "
        "registered as symmetric windows (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC)"};
    std::printf("# buffers: %zu bytes per buffer per rank, %s\n", world.buffer_bytes,
                registration[args.registered]);
    for (const ImplRun& impl : impls)
      if (!impl.own_buffers.empty())
        std::printf("# memory: %s on buffers of its own (NCCL: ncclMemAlloc, as nccl-tests; its "
                    "registration, in graphs too, takes no cudaMalloc memory); the others on "
                    "cudaMalloc's\n",
                    impl.backend->Name());
    if (!args.nccl_own_memory && args.run_nccl)
      std::printf("# memory: NCCL on YALI's cudaMalloc buffers (--nccl-memory shared), as PyTorch's "
                  "default allocator hands it memory: NCCL registers none of it, in graphs neither\n");
    if (args.nccl_cta_policy >= 0)
      std::printf("# NCCL comms made with CTAPolicy %d (-x: 0 default, 1 efficiency, 2 zero)\n",
                  args.nccl_cta_policy);
    std::printf("#\n");
    std::fputs(alltoallv ? VarTableHeader().c_str() : TableHeader().c_str(), stdout);
    std::fflush(stdout);
  }

  if (alltoallv) {
    std::vector<Backend*> backends;
    for (ImplRun& impl : impls) backends.push_back(impl.backend.get());
    std::map<std::string, std::string> absent;
    if (!args.run_yali) absent["yali"] = "not run (--impl)";
    if (!args.run_nccl) {
      absent["nccl"] = "not run (--impl)";
    } else if (ncclSitsOut) {
      absent["nccl"] = "not run: ranks share a GPU";
    } else if (nccl_version < 0) {
      absent["nccl"] = "NCCL baseline not built: " + nccl_missing;
    }
    auto use_buffers_of = [&](const Backend& backend) {
      for (const ImplRun& impl : impls)
        if (impl.backend.get() == &backend) UseBuffersOf(world, impl, shared_buffers);
    };
    const uint64_t wrong = RunAlltoAllv(world, backends, absent, args, info, printer, use_buffers_of);
    EndRun(world, impls, args, multi, exchange, shared_buffers);
    return wrong == 0 ? 0 : 1;
  }

  const TimingOptions timing = TimingOptionsFor(args);

  const bool run_out_of_place = args.placements != PlacementSet::kInPlace;
  const bool run_in_place = args.placements != PlacementSet::kOutOfPlace;
  std::vector<ResultRecord> records;
  // Refusal reasons already printed: one note per (library, collective, dtype, op, root,
  // placement); later rows of the combination just say "skipped".
  std::set<std::string> reasons_printed;
  auto note = [&](const std::string& text) {
    if (!printer) return;
    std::printf("# %s\n", text.c_str());
    std::fflush(stdout);
  };

  // Passes outermost: a slow drift of the machine then touches every case of a pass alike, as it
  // does separate processes, instead of making one case's repetitions look unstable.
  for (int run = 1; run <= args.repeat; ++run) {
    if (printer && args.repeat > 1) {
      std::printf("# run %d of %d\n", run, args.repeat);
      std::fflush(stdout);
    }
    for (CollId coll : args.collectives) {
      const Collective& collective = CollectiveFor(coll);
      const bool reduces = CollReduces(coll);
      // Collectives that only move data run once per dtype, whatever -o says.
      const std::vector<RedOp> ops = reduces ? args.ops : std::vector<RedOp>{RedOp::kSum};
      std::vector<int> roots = {0};
      if (CollHasRoot(coll)) {
        roots = {args.root};
        if (args.root == kEveryRoot) {
          roots.clear();
          for (int r = 0; r < world.nranks; ++r) roots.push_back(r);
        }
      }
      const bool in_place_here = run_in_place && CollHasInPlace(coll);
      if (run_in_place && !CollHasInPlace(coll) && run == 1) {
        const std::string reason = CollNoInPlaceReason(coll);
        note(std::string(CollName(coll)) + " in-place: skipped (" + reason + ")");
        SkipRecord skip;
        skip.every_size = true;
        skip.impl = "all";
        skip.collective = CollName(coll);
        skip.redop = "none";
        skip.placement = "in-place";
        skip.reason = reason;
        for (DType dtype : args.dtypes) {
          skip.dtype = dtype;
          info.skipped.push_back(skip);
        }
      }
      if (!run_out_of_place && !in_place_here) continue;
      std::string block;  // the last block heading printed
      for (DType dtype : args.dtypes) {
        for (RedOp op : ops) {
          const std::string redop = reduces ? RedOpName(op) : "none";
          if (reduces && op == RedOp::kAvg && !IsFloating(dtype)) {
            // yali.h: avg is for the floating types only; NCCL's integer avg (a truncating
            // division) is not compared either.
            if (run == 1) {
              const std::string reason = "avg is for floating types only (YALI refuses it)";
              note(std::string(CollName(coll)) + " " + DTypeName(dtype) + " avg: skipped (" +
                   reason + ")");
              SkipRecord skip;
              skip.every_size = true;
              skip.impl = "all";
              skip.collective = CollName(coll);
              skip.dtype = dtype;
              skip.redop = redop;
              skip.reason = reason;
              info.skipped.push_back(skip);
            }
            continue;
          }
          for (int root : roots) {
            if (printer && name_collective) {
              const std::string heading = BlockHeading(coll, root);
              if (heading != block) std::fputs(heading.c_str(), stdout);
              block = heading;
            }
            for (size_t requested_bytes : sizes) {
              const size_t element_bytes = ElementSize(dtype);
              const CollShape shape = ShapeFor(coll, requested_bytes, element_bytes, world.nranks);
              const size_t bytes = shape.bytes;
              const std::string label =
                  CaseLabel(name_collective, coll, root, bytes, dtype, redop);
              if (shape.bytes > world.buffer_bytes) {
                if (printer && run == 1)
                  std::printf("# %s: skipped, needs %zu B per buffer, %zu B fit on the GPUs\n",
                              label.c_str(), shape.bytes, world.buffer_bytes);
                continue;
              }
              // nccl/yali time ratios at this size, filled in as the rows are measured.
              double yali_time[2] = {-1, -1};
              for (ImplRun& impl : impls) {
                ResultRecord halves[2];
                bool ran[2] = {false, false};
                bool skipped_any = false;
                for (int placement = 0; placement < 2; ++placement) {
                  const bool in_place = placement == 1;
                  if ((in_place && !in_place_here) || (!in_place && !run_out_of_place)) continue;
                  CaseSpec spec;
                  spec.collective = &collective;
                  spec.dtype = dtype;
                  spec.op = op;
                  spec.root = root;
                  spec.shape = shape;
                  spec.in_place = in_place;
                  spec.seed = CaseSeed(coll, dtype, op, root, requested_bytes, in_place);
                  UseBuffersOf(world, impl, shared_buffers);
                  CaseResult result = RunCase(world, *impl.backend, spec, timing);
                  const char* placement_name = in_place ? "in-place" : "out-of-place";
                  if (result.skipped) {
                    skipped_any = true;
                    SkipRecord skip;
                    skip.impl = impl.backend->Name();
                    skip.collective = CollName(coll);
                    skip.dtype = dtype;
                    skip.redop = redop;
                    skip.root = CollHasRoot(coll) ? root : -1;
                    skip.bytes = bytes;
                    skip.count = shape.count;
                    skip.placement = placement_name;
                    skip.run = run;
                    skip.reason = result.skip_reason;
                    info.skipped.push_back(skip);
                    const std::string key = skip.impl + "|" + skip.collective + "|" +
                                            DTypeName(dtype) + "|" + redop + "|" +
                                            std::to_string(root) + "|" + placement_name;
                    if (reasons_printed.insert(key).second)
                      note(skip.impl + " " + label + " " + placement_name + ": skipped (" +
                           result.skip_reason + ")");
                    continue;
                  }

                  ResultRecord& record = halves[placement];
                  ran[placement] = true;
                  record.impl = impl.backend->Name();
                  record.collective = CollName(coll);
                  record.dtype = dtype;
                  record.op = op;
                  record.has_op = reduces;
                  record.root = CollHasRoot(coll) ? root : -1;
                  record.bytes = bytes;
                  record.count = shape.count;
                  record.in_place = in_place;
                  record.run = run;
                  record.iters = result.counts.iters;
                  record.warmup = result.counts.warmup;
                  record.time_us = result.time_us;
                  // nccl-tests: algbw is the size column over the time, for every collective.
                  record.algbw_gbs = AlgorithmBandwidth(bytes, result.time_us);
                  record.busbw_gbs = record.algbw_gbs * BusFactor(coll, world.nranks);
                  record.checked = result.checked;
                  record.wrong = result.wrong;
                  // The buffers the case ran on (registered ones can change YALI's choice).
                  AlgoChoice algo =
                      collective.describe(*impl.backend, 0, CaseRankCall(world, spec, 0));
                  record.algo_known = algo.known;
                  record.algo = algo.algorithm;
                  record.ctas = algo.ctas;
                  record.samples_us = result.samples_us;
                  record.stats = ComputeStats(result.samples_us);
                  record.host_issue_us = result.host_issue_us;
                  impl.total_wrong += result.wrong;
                  impl.busbw_sum += record.busbw_gbs;
                  impl.results += 1;
                  CollTotals& totals = impl.per_collective[coll];
                  totals.wrong += result.wrong;
                  totals.busbw_sum += record.busbw_gbs;
                  totals.results += 1;
                  if (!totals.ran || bytes > totals.largest.bytes ||
                      (bytes == totals.largest.bytes && result.wrong > totals.largest.wrong)) {
                    totals.ran = true;
                    totals.largest.collective = record.collective;
                    totals.largest.impl = record.impl;
                    totals.largest.dtype = dtype;
                    totals.largest.bytes = bytes;
                    totals.largest.count = shape.count;
                    totals.largest.wrong = result.wrong;
                    totals.largest.checked = result.checked;
                  }
                  if (printer && !result.ranks_differing_from_rank0.empty()) {
                    std::string ranks;
                    for (int r : result.ranks_differing_from_rank0) ranks += " " + std::to_string(r);
                    std::printf("# %s %s %s: output of rank(s)%s differs bitwise from rank 0 "
                                "(counted in #wrong)\n",
                                record.impl.c_str(), label.c_str(), placement_name, ranks.c_str());
                  }
                }
                bool is_yali = std::string(impl.backend->Name()) == "yali";
                double ratio[2] = {-1, -1};
                for (int placement = 0; placement < 2; ++placement) {
                  if (!ran[placement]) continue;
                  if (is_yali) {
                    yali_time[placement] = halves[placement].time_us;
                  } else if (yali_time[placement] > 0) {
                    ratio[placement] = halves[placement].time_us / yali_time[placement];
                  }
                  records.push_back(halves[placement]);
                }
                if (printer && (ran[0] || ran[1] || skipped_any)) {
                  // A half the library refused prints as "-", like a placement not run; a row
                  // with nothing measured says "skipped" where the algorithm goes.
                  const ResultRecord* any = ran[0] ? &halves[0] : ran[1] ? &halves[1] : nullptr;
                  std::fputs(TableRow(impl.backend->Name(), bytes, shape.count, dtype, redop,
                                      ran[0] ? &halves[0] : nullptr, ran[1] ? &halves[1] : nullptr,
                                      any != nullptr ? AlgoLabel(*any) : "skipped", ratio[0],
                                      ratio[1])
                                 .c_str(),
                             stdout);
                  std::fflush(stdout);
                }
              }
            }
          }
        }
      }
    }
  }

  uint64_t total_wrong = 0;
  for (const ImplRun& impl : impls) total_wrong += impl.total_wrong;
  for (CollId coll : args.collectives)
    for (const ImplRun& impl : impls) {
      auto it = impl.per_collective.find(coll);
      if (it != impl.per_collective.end() && it->second.ran) info.largest.push_back(it->second.largest);
    }
  if (printer) {
    if (args.percentiles) std::fputs(PercentileTable(records).c_str(), stdout);
    std::printf("#\n");
    for (const ImplRun& impl : impls) {
      if (args.check) {
        std::printf("# Out of bounds values (%s) : %llu %s\n", impl.backend->Name(),
                    static_cast<unsigned long long>(impl.total_wrong),
                    impl.total_wrong == 0 ? "OK" : "FAILED");
      } else {
        std::printf("# Out of bounds values (%s) : N/A (-c 0)\n", impl.backend->Name());
      }
    }
    for (const ImplRun& impl : impls)
      std::printf("# Avg bus bandwidth    (%s) : %.3f\n", impl.backend->Name(),
                  impl.results > 0 ? impl.busbw_sum / impl.results : 0.0);
    // With several collectives, the same two lines per collective (the totals above mix them).
    if (args.collectives.size() > 1) {
      for (CollId coll : args.collectives)
        for (const ImplRun& impl : impls) {
          auto it = impl.per_collective.find(coll);
          const CollTotals totals = it != impl.per_collective.end() ? it->second : CollTotals();
          const std::string who = std::string(impl.backend->Name()) + ", " + CollName(coll);
          if (args.check) {
            std::printf("# Out of bounds values (%s) : %llu %s\n", who.c_str(),
                        static_cast<unsigned long long>(totals.wrong),
                        totals.wrong == 0 ? "OK" : "FAILED");
          }
          std::printf("# Avg bus bandwidth    (%s) : %.3f\n", who.c_str(),
                      totals.results > 0 ? totals.busbw_sum / totals.results : 0.0);
        }
    }
    if (args.max_bytes_auto) {
      std::printf("#\n# Largest message that ran (-e max, buffers of %zu B per rank):\n",
                  world.buffer_bytes);
      for (CollId coll : args.collectives)
        for (const ImplRun& impl : impls) {
          auto it = impl.per_collective.find(coll);
          if (it == impl.per_collective.end() || !it->second.ran) {
            std::printf("#   %-13s %-4s none (every case skipped)\n", CollName(coll),
                        impl.backend->Name());
            continue;
          }
          const LargestRecord& l = it->second.largest;
          std::printf("#   %-13s %-4s %14zu B  (count %zu %s)  #wrong %s\n", CollName(coll),
                      impl.backend->Name(), l.bytes, l.count, DTypeName(l.dtype),
                      l.checked ? std::to_string(l.wrong).c_str() : "N/A");
        }
    }
    std::printf("#\n");
    std::fflush(stdout);
    if (!args.json_path.empty()) {
      std::ofstream file(args.json_path);
      file << FormatJson(info, records);
      if (!file.good()) Fatal("cannot write the JSON file " + args.json_path);
    }
  }

  EndRun(world, impls, args, multi, exchange, shared_buffers);
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace yali_perf

int main(int argc, char** argv) {
  std::vector<std::string> environment = yali_perf::LibraryEnvironment();  // before KeepNvlsOff
  std::string nvls_note = yali_perf::KeepNvlsOff();
  yali_perf::Options options = yali_perf::ParseOptionsOrExit(argc, argv);
  options.nvls_note = nvls_note;
  options.environment = environment;
  return yali_perf::Run(options);
}
