// yali-perf: AllReduce bandwidth and correctness of YALI and NCCL, side by side, with nccl-tests'
// flags and table. See PerfUsage() (-h) for the options.
//
// The flow: parse the options; find this process's place (single process driving -g GPUs, or one
// process per GPU under a launcher, meeting through HostExchange); create both libraries' comms;
// allocate one send and one receive buffer per rank, shared by every case (with -R 1, registered
// with both libraries); then for each pass of --repeat, dtype, op and size, run each library
// out-of-place and in-place through the same harness (harness.cc) and print one table row per
// library.
// With --tune, the same set-up (YALI only), then tune.cc measures YALI's crossovers instead of the
// sweep and writes a tuning table.
#include <unistd.h>
#include <yali/yali.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
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
constexpr size_t kBufferGranularity = 4096;
// How long a failing rank waits for its communicators to abort before it exits anyway.
constexpr int kAbortTimeoutSeconds = 10;

struct Options {
  PerfArgs args;
  LaunchEnv launch;
  double timeout_s = 120.0;
  std::string rendezvous_dir = "/tmp";
  std::string command;
  std::string nvls_note;
};

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

// The same data for both libraries at one (dtype, op, size, placement), different data elsewhere.
uint64_t CaseSeed(DType dtype, RedOp op, size_t bytes, bool in_place) {
  uint64_t seed = MixSeed(static_cast<uint64_t>(dtype) + 1);
  seed = MixSeed(seed ^ (static_cast<uint64_t>(op) + 17));
  seed = MixSeed(seed ^ bytes);
  return MixSeed(seed ^ (in_place ? 0x5151 : 0xa0a0));
}

// Allocates the shared buffers: as large as the largest case needs, less if the GPU lacks the
// memory (cases that do not fit are then skipped); equal on every rank.
void AllocateBuffers(World& world, size_t wanted) {
  wanted = std::max(wanted, kBufferGranularity);
  size_t mine = wanted;
  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    size_t free_bytes = 0, total_bytes = 0;
    YALI_PERF_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t affordable = free_bytes > kDeviceHeadroomBytes ? (free_bytes - kDeviceHeadroomBytes) / 2 : 0;
    size_t capacity = std::min(wanted, affordable) / kBufferGranularity * kBufferGranularity;
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
      cudaGetLastError();  // clear the allocation failure; try half as much
      capacity = capacity / 2 / kBufferGranularity * kBufferGranularity;
    }
    YALI_PERF_CUDA(cudaMalloc(&slot.counters, 2 * sizeof(unsigned long long)));
    mine = std::min(mine, capacity);
  }
  world.buffer_bytes = mine;
  if (world.multi_process) {
    std::vector<std::string> all;
    std::string error;
    if (!world.exchange->AllGather(std::to_string(mine), &all, &error))
      Fatal("agreeing on the buffer size: " + error);
    for (const std::string& text : all)
      world.buffer_bytes = std::min<size_t>(world.buffer_bytes, std::stoull(text));
  }
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
RunInfo DescribeRun(const Options& options, World& world, const Collective& collective,
                    int nccl_version) {
  const PerfArgs& args = options.args;
  RunInfo info;
  info.collective = collective.name;
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
  info.gpus = DescribeGpus(world);
  YALI_PERF_CUDA(cudaSetDevice(world.local[0].device));
  if (yaliGetVersion(&info.yali_version) != yaliSuccess) info.yali_version = -1;
  info.nccl_version = nccl_version;
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
  const char* aggregate[] = {"min", "mean", "max"};
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

struct ImplRun {
  std::unique_ptr<Backend> backend;
  uint64_t total_wrong = 0;
  double busbw_sum = 0;
  int results = 0;
};

int Run(const Options& options) {
  const PerfArgs& args = options.args;
  const Collective& collective = kAllReduce;
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

  for (RankSlot& slot : world.local) {
    YALI_PERF_CUDA(cudaSetDevice(slot.device));
    YALI_PERF_CUDA(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking));
  }

  // Libraries: YALI first, so its rows come first at each size.
  std::vector<ImplRun> impls;
  std::string nccl_missing;
  // --tune measures YALI alone: NCCL is not even loaded.
  std::unique_ptr<Backend> nccl = args.tune ? nullptr : MakeNcclBackend(&nccl_missing);
  if (nccl == nullptr && args.run_nccl && args.impl_given && !ncclSitsOut)
    Fatal("--impl nccl: NCCL baseline not built: " + nccl_missing);
  int nccl_version = nccl != nullptr ? nccl->VersionCode() : -1;
  std::string nccl_version_text = nccl != nullptr ? nccl->VersionText() : "";
  if (args.run_yali || args.tune) impls.push_back({MakeYaliBackend()});
  if (args.run_nccl && !ncclSitsOut && nccl != nullptr) impls.push_back({std::move(nccl)});
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
    AllocateBuffers(world, TuneLargestMessageBytes());
    RunInfo info = DescribeRun(options, world, collective, -1);
    int code = RunTune(world, *impls[0].backend, args, info);
    FreeBuffers(world);
    if (multi) {
      std::string error;
      if (!exchange.Close(&error)) Fatal("closing the rendezvous: " + error);
    }
    return code;
  }

  for (ImplRun& impl : impls) InitComms(world, *impl.backend);

  const std::vector<size_t> sizes = SizeSweep(args);
  size_t wanted = 0;
  for (DType dtype : args.dtypes)
    for (size_t bytes : sizes) {
      size_t count = CountForBytes(bytes, dtype);
      wanted = std::max({wanted, collective.input_bytes(count, ElementSize(dtype), world.nranks),
                         collective.output_bytes(count, ElementSize(dtype), world.nranks)});
    }
  AllocateBuffers(world, wanted);
  // -R 1: every library registers the same buffers, so that each may run zero-copy and the
  // comparison stays like for like.
  if (args.registered)
    for (ImplRun& impl : impls) RegisterBuffers(world, *impl.backend);

  RunInfo info = DescribeRun(options, world, collective, nccl_version);

  if (printer) {
    std::printf("# yali-perf: %s\n", options.command.c_str());
    std::printf("# collective %s: busbw = algbw * %s\n", collective.name, collective.bus_factor_text);
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
    std::printf("# timing %s\n", TimingDescription(args).c_str());
    std::printf("# check: %s\n",
                args.check ? "on (-c 1): #wrong = elements outside tolerance of a float64 "
                             "reference, summed over ranks, + ranks whose output differs "
                             "bitwise from rank 0's"
                           : "off (-c 0)");
    std::printf("# buffers: %zu bytes per buffer per rank, %s\n#\n", world.buffer_bytes,
                args.registered ? "registered with each library (-R 1: yaliCommRegister, "
                                  "ncclCommRegister)"
                                : "not registered (-R 0)");
    std::fputs(TableHeader().c_str(), stdout);
    std::fflush(stdout);
  }

  TimingOptions timing;
  timing.mode = args.timing;
  timing.iters = args.iters;
  timing.warmup = args.warmup;
  timing.graph_launches = args.graph_launches;
  timing.average = args.average;
  timing.check = args.check;
  timing.max_case_seconds = args.max_case_seconds;

  const bool run_out_of_place = args.placements != PlacementSet::kInPlace;
  const bool run_in_place = args.placements != PlacementSet::kOutOfPlace;
  std::vector<ResultRecord> records;

  // Passes outermost: a slow drift of the machine then touches every case of a pass alike, as it
  // does separate processes, instead of making one case's repetitions look unstable.
  for (int run = 1; run <= args.repeat; ++run) {
    if (printer && args.repeat > 1) {
      std::printf("# run %d of %d\n", run, args.repeat);
      std::fflush(stdout);
    }
    for (DType dtype : args.dtypes) {
      for (RedOp op : args.ops) {
        for (size_t requested_bytes : sizes) {
          const size_t count = CountForBytes(requested_bytes, dtype);
          const size_t element_bytes = ElementSize(dtype);
          const size_t bytes = count * element_bytes;
          const size_t needed =
              std::max(collective.input_bytes(count, element_bytes, world.nranks),
                       collective.output_bytes(count, element_bytes, world.nranks));
          if (needed > world.buffer_bytes) {
            if (printer && run == 1)
              std::printf("# %zu B %s %s: skipped, needs %zu B per buffer, %zu B fit on the GPUs\n",
                          bytes, DTypeName(dtype), RedOpName(op), needed, world.buffer_bytes);
            continue;
          }
          // nccl/yali time ratios at this size, filled in as the rows are measured.
          double yali_time[2] = {-1, -1};
          for (ImplRun& impl : impls) {
            ResultRecord halves[2];
            bool ran[2] = {false, false};
            for (int placement = 0; placement < 2; ++placement) {
              const bool in_place = placement == 1;
              if ((in_place && !run_in_place) || (!in_place && !run_out_of_place)) continue;
              CaseSpec spec;
              spec.collective = &collective;
              spec.dtype = dtype;
              spec.op = op;
              spec.count = count;
              spec.in_place = in_place;
              spec.seed = CaseSeed(dtype, op, bytes, in_place);
              CaseResult result = RunCase(world, *impl.backend, spec, timing);

              ResultRecord& record = halves[placement];
              ran[placement] = true;
              record.impl = impl.backend->Name();
              record.dtype = dtype;
              record.op = op;
              record.bytes = bytes;
              record.count = count;
              record.in_place = in_place;
              record.run = run;
              record.iters = result.counts.iters;
              record.warmup = result.counts.warmup;
              record.time_us = result.time_us;
              record.algbw_gbs = AlgorithmBandwidth(bytes, result.time_us);
              record.busbw_gbs = record.algbw_gbs * collective.bus_bandwidth_factor(world.nranks);
              record.checked = result.checked;
              record.wrong = result.wrong;
              // The buffers the case ran on (registered ones can change YALI's choice).
              const RankSlot& slot0 = world.local[0];
              AlgoChoice algo = impl.backend->DescribeAllReduce(
                  0, in_place ? slot0.recv : slot0.send, slot0.recv, count, dtype, op);
              record.algo_known = algo.known;
              record.algo = algo.algorithm;
              record.ctas = algo.ctas;
              record.samples_us = result.samples_us;
              record.stats = ComputeStats(result.samples_us);
              impl.total_wrong += result.wrong;
              impl.busbw_sum += record.busbw_gbs;
              impl.results += 1;
              if (printer && !result.ranks_differing_from_rank0.empty()) {
                std::string ranks;
                for (int r : result.ranks_differing_from_rank0) ranks += " " + std::to_string(r);
                std::printf("# %s %zu B %s %s %s: output of rank(s)%s differs bitwise from rank 0 "
                            "(counted in #wrong)\n",
                            record.impl.c_str(), bytes, DTypeName(dtype), RedOpName(op),
                            in_place ? "in-place" : "out-of-place", ranks.c_str());
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
            if (printer) {
              const ResultRecord& any = ran[0] ? halves[0] : halves[1];
              std::fputs(TableRow(any.impl, bytes, count, dtype, op, ran[0] ? &halves[0] : nullptr,
                                  ran[1] ? &halves[1] : nullptr, AlgoLabel(any), ratio[0], ratio[1])
                             .c_str(),
                         stdout);
              std::fflush(stdout);
            }
          }
        }
      }
    }
  }

  uint64_t total_wrong = 0;
  for (const ImplRun& impl : impls) total_wrong += impl.total_wrong;
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
    std::printf("#\n");
    std::fflush(stdout);
    if (!args.json_path.empty()) {
      std::ofstream file(args.json_path);
      file << FormatJson(info, records);
      if (!file.good()) Fatal("cannot write the JSON file " + args.json_path);
    }
  }

  // Deregistration first: it needs the comms. Collective for YALI like the registration, so the
  // ranks start it together (rank 0 has just written the report).
  if (args.registered) {
    HostBarrier(world, "before deregistering the buffers");
    for (ImplRun& impl : impls) impl.backend->DeregisterBuffers();
  }
  for (ImplRun& impl : impls) impl.backend->DestroyAll();
  FreeBuffers(world);
  if (multi) {
    std::string error;
    if (!exchange.Close(&error)) Fatal("closing the rendezvous: " + error);
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace yali_perf

int main(int argc, char** argv) {
  std::string nvls_note = yali_perf::KeepNvlsOff();
  yali_perf::Options options = yali_perf::ParseOptionsOrExit(argc, argv);
  options.nvls_note = nvls_note;
  return yali_perf::Run(options);
}
