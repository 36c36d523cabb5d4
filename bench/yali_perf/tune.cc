#include "tune.h"
#include "text_format.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "collectives.h"
#include "cuda_check.h"
#include "json_writer.h"
#include "perf_error.h"
#include "tune_plan.h"

namespace yali_perf {
namespace {

// What --tune sets for each candidate. YALI reads both when a communicator is created.
constexpr const char* kEnvAlgo = "YALI_ALGO";
constexpr const char* kEnvTuningFile = "YALI_TUNING_FILE";
// Overrides of the table (src/core/env.cc; tune_plan.h: TuneEnvOverrides): YALI_MAX_CTAS would
// cap every candidate's CTAs (so that different candidates ran the same geometry),
// YALI_ONESHOT_LL_MAX_BYTES would replace the threshold under test in the final check, and the
// exchanges' YALI_<ALGO>_MAX_BYTES / _MIN_BYTES the thresholds that the direct steps' baseline
// runs with. Cleared while tuning, restored after.
const std::vector<std::string>& EnvOverrides() {
  static const std::vector<std::string> kOverrides = TuneEnvOverrides();
  return kOverrides;
}

std::vector<std::string> SavedNames() {
  std::vector<std::string> names = {kEnvAlgo, kEnvTuningFile};
  for (const std::string& name : EnvOverrides()) names.push_back(name);
  return names;
}

// The library's defaults for the buffer sizes that bound the candidates (src/core/env.cc).
constexpr int64_t kDefaultLLBufferBytes = int64_t(1) << 20;
constexpr int64_t kDefaultStagingBytes = int64_t(4) << 20;

// A byte-size setting as the library reads it: unset or empty means the default; the value is
// rounded up to 256 bytes (the library's offsets are 256-byte aligned). The range check stays the
// library's: an out-of-range value fails the first comm creation with its own message.
int64_t LibraryByteSetting(const char* name, int64_t default_value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return default_value;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0')
    Fatal(std::string(name) + "='" + text + "' is not an integer");
  return (value + 255) / 256 * 256;
}

// True when `path` can be written: the file itself if it exists, else its directory. Checked
// before the measurements, so that a typo in --tune-out or -J does not cost a whole run.
bool CanWrite(const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) return access(path.c_str(), W_OK) == 0;
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  return access(dir.c_str(), W_OK) == 0;
}

// The user's values of some variables, put back (or unset again) by Restore().
class SavedEnv {
 public:
  explicit SavedEnv(const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      const char* value = std::getenv(name.c_str());
      saved_.push_back({name, value ? std::optional<std::string>(value) : std::nullopt});
    }
  }
  void Restore() const {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }
  std::optional<std::string> Value(const std::string& name) const {
    for (const auto& [saved_name, value] : saved_)
      if (saved_name == name) return value;
    return std::nullopt;
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};


// "twoshot/32x512 slot 128K" or "oneshot_ll/8x512": what the selector ran.
std::string SelectorLabel(const TuneMeasurement& m) {
  std::string label = Format("%s/%dx%d", m.algo.c_str(), m.ctas, m.threads);
  if (m.slot_bytes > 0) label += " slot " + SizeLabel(m.slot_bytes);
  return label;
}

const char* StepTitle(TuneStepKind kind) {
  switch (kind) {
    case TuneStepKind::kTwoshotGeometry: return "two-shot geometry (threads x ctas cap x max slot)";
    case TuneStepKind::kTwoshotMinSlot: return "two-shot min slot";
    case TuneStepKind::kLLGeometry: return "LL geometry (threads x ctas cap)";
  }
  return "?";
}

class Tuner {
 public:
  Tuner(World& world, Backend& yali, const PerfArgs& args, const RunInfo& info)
      : world_(world),
        yali_(yali),
        args_(args),
        info_(info),
        saved_env_(SavedNames()) {}

  int Run();

 private:
  bool printer() const { return world_.local[0].rank == 0; }
  void Print(const std::string& text) const {
    if (!printer()) return;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }

  void SetUp();
  void PrintHeader() const;
  void WriteTableFile(const std::string& text) const;
  // `algo` null: the selector decides; `table` empty: the built-in table.
  void CreateComms(const char* algo, const std::string& table);
  // One size of AllReduce, or of `coll` (root 0): `bytes` is yali-perf's size (coll_shape.h).
  TuneMeasurement Measure(size_t bytes, bool check) { return Measure(CollId::kAllReduce, bytes, check); }
  TuneMeasurement Measure(CollId coll, size_t bytes, bool check);
  void ExpectSelector(const TuneMeasurement& m, TuneAlgo algo, int threads,
                      const std::string& what) const;
  // For the exchanges: the algorithm's name only (their kernels' thread limits may clamp the
  // table's threads).
  void ExpectAlgo(const TuneMeasurement& m, CollId coll, const std::string& algo,
                  const std::string& what) const;
  void RunStep(int number, TuneStep* step);
  void RunCrossover();
  void RunExchange(int number, int total, ExchangeCrossover* crossover);
  void RunComparison(const std::string& table);
  void PrintSummary(const std::string& out_path) const;

  World& world_;
  Backend& yali_;
  const PerfArgs& args_;
  const RunInfo& info_;
  SavedEnv saved_env_;
  DType dtype_ = DType::kFloat;
  TimingOptions timing_;
  TuneHeader header_;
  std::string table_path_;  // the candidates' table; the same string on every rank (YALI checks)
  uint64_t seed_ = 0;       // advanced identically on every rank: new data for every case
  std::vector<TuneStep> steps_;
  Crossover crossover_;
  std::vector<ExchangeCrossover> exchanges_;  // steps 5 and 6, in the order they ran
  TuneComparison comparison_;
  TuningLine chosen_;
  uint64_t total_wrong_ = 0;
  int rejected_ = 0;
};

void Tuner::SetUp() {
  dtype_ = args_.dtypes.at(0);
  timing_.mode = TimingMode::kEvents;
  timing_.iters = args_.iters;
  timing_.warmup = args_.warmup;
  timing_.average = RankAggregate::kMax;  // a collective is done when its slowest rank is

  if (world_.nranks < 2)
    Fatal("--tune needs at least 2 GPUs (a table is per world size; got " +
          std::to_string(world_.nranks) + ")");

  // The table's key is (compute-capability major, nranks): YALI ignores a line for another
  // architecture, so the major must be the one the library will see.
  int sm_major = -1;
  for (const RankSlot& slot : world_.local) {
    int major = 0;
    YALI_PERF_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, slot.device));
    if (sm_major >= 0 && major != sm_major)
      Fatal("--tune: GPUs of different architectures (compute capability " +
            std::to_string(sm_major) + ".x and " + std::to_string(major) + ".x)");
    sm_major = major;
  }
  const int64_t ll_capacity = LibraryByteSetting("YALI_LL_BUFFER_BYTES", kDefaultLLBufferBytes);
  const int64_t staging = LibraryByteSetting("YALI_STAGING_BYTES", kDefaultStagingBytes);

  // Every rank builds the same candidate list from these, so they must agree.
  if (world_.multi_process) {
    const std::string mine = Format("sm %d ll %lld staging %lld", sm_major,
                                    static_cast<long long>(ll_capacity),
                                    static_cast<long long>(staging));
    std::vector<std::string> all;
    std::string error;
    if (!world_.exchange->AllGather(mine, &all, &error)) Fatal("--tune: agreeing on the setup: " + error);
    for (size_t r = 0; r < all.size(); ++r)
      if (all[r] != all[0])
        Fatal("--tune: rank " + std::to_string(r) + " has '" + all[r] + "', rank 0 '" + all[0] +
              "' (the GPUs and YALI_LL_BUFFER_BYTES / YALI_STAGING_BYTES must match)");
  }

  if (printer()) {
    if (!CanWrite(args_.tune_out)) Fatal("--tune: cannot write --tune-out " + args_.tune_out);
    if (!args_.json_path.empty() && !CanWrite(args_.json_path))
      Fatal("--tune: cannot write -J " + args_.json_path);
  }

  // The candidates' table: one file, written by rank 0 and read by every rank's YALI (all ranks
  // are on this host: YALI maps its peers through CUDA IPC). Its path goes into YALI's settings
  // digest, so every rank must use rank 0's exact string.
  if (printer()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                          "/yali-tune-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    int fd = mkstemp(name.data());
    if (fd < 0) Fatal("--tune: cannot create a temporary file " + pattern);
    close(fd);
    table_path_ = name.data();
    const std::string path = table_path_;
    AddFatalHook([path](const std::string&) {
      unlink(path.c_str());
      unlink((path + ".part").c_str());
    });
  }
  if (world_.multi_process) {
    std::string error;
    if (!world_.exchange->Broadcast(0, &table_path_, &error))
      Fatal("--tune: sharing the table's path: " + error);
  }

  for (const std::string& name : EnvOverrides()) unsetenv(name.c_str());

  header_.date = info_.date;
  header_.hostname = info_.hostname;
  header_.gpu_name = info_.gpus.empty() ? "unknown" : info_.gpus[0].name;
  header_.sm_major = sm_major;
  header_.nranks = world_.nranks;
  header_.multi_process = world_.multi_process;
  header_.dtype = DTypeName(dtype_);
  header_.command = info_.command;
  header_.iters = args_.iters;
  header_.warmup = args_.warmup;
  header_.yali_version = info_.yali_version;
  header_.ll_capacity = ll_capacity;
  header_.staging_bytes = staging;

  chosen_.sm_major = sm_major;
  chosen_.nranks = world_.nranks;
}

void Tuner::PrintHeader() const {
  std::string text = "# yali-perf --tune: " + info_.command + "\n";
  text += Format("# nranks %d (%s), dtype %s, compute capability major %d\n", world_.nranks,
                 world_.multi_process ? "one process per GPU" : "one process driving every GPU",
                 DTypeName(dtype_), header_.sm_major);
  for (const GpuInfo& gpu : info_.gpus)
    text += Format("#   rank %2d: device %2d  %s  [%s]\n", gpu.rank, gpu.device, gpu.name.c_str(),
                   gpu.pci_bus_id.c_str());
  text += Format("# YALI version %d; YALI_LL_BUFFER_BYTES=%lld (LL capacity), "
                 "YALI_STAGING_BYTES=%lld\n",
                 info_.yali_version, static_cast<long long>(header_.ll_capacity),
                 static_cast<long long>(header_.staging_bytes));
  text += Format("# timing: CUDA events around -n %d back-to-back out-of-place calls after -w %d, "
                 "the slowest rank's time; each candidate checked once (#wrong > 0 rejects it)\n",
                 args_.iters, args_.warmup);
  for (const std::string& name : EnvOverrides()) {
    if (std::optional<std::string> value = saved_env_.Value(name))
      text += "# " + name + "=" + *value +
              " cleared while tuning (it would override the candidates); restored after\n";
  }
  text += "# buffers: " + std::to_string(world_.buffer_bytes) + " bytes per buffer per rank\n";
  text += "# candidates' table: " + table_path_ + "\n";
  std::string colls;
  std::vector<CollId> exchanges;
  for (CollId coll : args_.tune_colls) {
    colls += std::string(colls.empty() ? "" : ",") + CollName(coll);
    if (coll != CollId::kAllReduce) exchanges.push_back(coll);
  }
  const TuneCount count =
      CountTuneRuns(world_.nranks, ElementSize(dtype_), header_.ll_capacity,
                    header_.staging_bytes, world_.buffer_bytes, exchanges);
  text += Format("# collectives: %s (--tune-colls); at most %d configurations (communicator sets) "
                 "and %d measurements (sizes timed, each -w %d + -n %d calls after one checked or "
                 "untimed call)\n#\n",
                 colls.empty() ? "allreduce" : colls.c_str(), count.configurations,
                 count.measurements, args_.warmup, args_.iters);
  Print(text);
}

void Tuner::WriteTableFile(const std::string& text) const {
  // Written whole and renamed into place, so that a reader never sees half a table.
  const std::string part = table_path_ + ".part";
  {
    std::ofstream file(part, std::ios::trunc);
    file << text;
    file.close();
    if (!file.good()) Fatal("--tune: cannot write " + part);
  }
  if (std::rename(part.c_str(), table_path_.c_str()) != 0)
    Fatal("--tune: cannot rename " + part + " to " + table_path_);
}

void Tuner::CreateComms(const char* algo, const std::string& table) {
  // Identical values on every rank (YALI refuses comms whose ranks' settings differ).
  if (table.empty()) {
    unsetenv(kEnvTuningFile);
  } else {
    if (printer()) WriteTableFile(table);
    setenv(kEnvTuningFile, table_path_.c_str(), 1);
  }
  if (algo != nullptr) setenv(kEnvAlgo, algo, 1);
  else unsetenv(kEnvAlgo);
  // In a multi-process job rank 0 wrote the table before it hands out the unique id, so the peers
  // read the new table (InitComms).
  InitComms(world_, yali_);
}

TuneMeasurement Tuner::Measure(CollId coll, size_t bytes, bool check) {
  CaseSpec spec;
  spec.collective = &CollectiveFor(coll);
  spec.dtype = dtype_;
  spec.op = RedOp::kSum;
  spec.root = 0;
  spec.shape = ShapeFor(coll, bytes, ElementSize(dtype_), world_.nranks);
  spec.in_place = false;
  spec.seed = 0x7e57ull * 1000003ull + ++seed_;
  TimingOptions options = timing_;
  options.check = check;
  CaseResult result = RunCase(world_, yali_, spec, options);
  if (result.skipped)
    Fatal(std::string("--tune: YALI refused ") + CollName(coll) + ": " + result.skip_reason);

  TuneMeasurement m;
  m.bytes = spec.shape.bytes;
  m.time_us = result.time_us;
  m.busbw_gbs = AlgorithmBandwidth(m.bytes, result.time_us) * BusFactor(coll, world_.nranks);
  m.checked = result.checked;
  m.wrong = result.wrong;
  LibraryCall call;
  call.kind = coll;
  call.send = world_.local[0].send;
  call.recv = world_.local[0].recv;
  call.count = spec.shape.count;
  call.dtype = dtype_;
  call.root = spec.root;
  AlgoChoice algo = yali_.Describe(0, call);
  if (!algo.known)
    Fatal(std::string("--tune: yaliAlgoInfo could not describe ") + CollName(coll) + " at " +
          SizeLabel(m.bytes));
  m.algo = algo.algorithm;
  m.ctas = algo.ctas;
  m.threads = algo.threads;
  m.slot_bytes = algo.chunk_bytes;
  total_wrong_ += result.wrong;
  if (result.wrong > 0) {
    std::string ranks;
    for (int r : result.ranks_differing_from_rank0) ranks += " " + std::to_string(r);
    const std::string text = Format(
        "!!! WRONG RESULTS: %llu wrong at %s with %s%s%s\n", static_cast<unsigned long long>(m.wrong),
        SizeLabel(m.bytes).c_str(), SelectorLabel(m).c_str(),
        ranks.empty() ? "" : "; output differs bitwise from rank 0 on rank(s)", ranks.c_str());
    Print(text);
    if (printer()) std::fputs(("yali-perf --tune: " + text).c_str(), stderr);
  }
  return m;
}

// The selector must run what the candidate asked for; otherwise the table was not applied (a line
// for another sm or nranks is silently skipped by YALI) and every candidate would time the same.
void Tuner::ExpectSelector(const TuneMeasurement& m, TuneAlgo algo, int threads,
                           const std::string& what) const {
  if (m.algo == TuneAlgoName(algo) && m.threads == threads) return;
  Fatal(Format("--tune: at %s the library ran %s, not %s with %d threads (%s): was %s applied "
               "(sm=%d nranks=%d)?",
               SizeLabel(m.bytes).c_str(), SelectorLabel(m).c_str(), TuneAlgoName(algo), threads,
               what.c_str(), table_path_.c_str(), header_.sm_major, header_.nranks));
}

void Tuner::ExpectAlgo(const TuneMeasurement& m, CollId coll, const std::string& algo,
                       const std::string& what) const {
  if (m.algo == algo) return;
  Fatal(Format("--tune: %s at %s: the library ran %s, not %s (%s): was %s applied (sm=%d "
               "nranks=%d)?",
               CollName(coll), SizeLabel(m.bytes).c_str(), SelectorLabel(m).c_str(), algo.c_str(),
               what.c_str(), table_path_.c_str(), header_.sm_major, header_.nranks));
}

void Tuner::RunStep(int number, TuneStep* step) {
  const bool higher = HigherIsBetter(step->kind);
  std::string sizes;
  for (size_t i = 0; i < step->sizes.size(); ++i)
    sizes += (i ? " + " : "") + SizeLabel(step->sizes[i]);
  Print(Format("# step %d/4: %s, YALI_ALGO=%s, %zu candidates at %s, score = %s\n", number,
               StepTitle(step->kind), TuneAlgoName(step->algo),
               step->candidates.size(), sizes.c_str(),
               higher ? "sum of busBW (higher wins)" : "sum of times (lower wins)"));
  if (step->sizes.empty())
    Fatal(std::string("--tune: no size of step ") + TuneStepName(step->kind) +
          " fits the buffers (" + std::to_string(world_.buffer_bytes) + " bytes)");

  const int total = static_cast<int>(step->candidates.size());
  for (int i = 0; i < total; ++i) {
    TuneCandidate& candidate = step->candidates[i];
    const std::string params = CandidateParams(step->kind, candidate.line);
    const int threads = step->algo == TuneAlgo::kTwoshot ? candidate.line.twoshot_threads
                                                          : candidate.line.ll_threads;
    CreateComms(TuneAlgoName(step->algo), FormatTuningLine(candidate.line) + "\n");
    std::string row = Format("  [%2d/%d] %-30s", i + 1, total, params.c_str());
    double score = 0;
    for (size_t s = 0; s < step->sizes.size(); ++s) {
      // Checked once per candidate, at its first size: the geometry is the same at every size of
      // a step, and a check at each would add a fill and a float64 reference per size.
      TuneMeasurement m = Measure(step->sizes[s], /*check=*/s == 0);
      ExpectSelector(m, step->algo, threads, params);
      if (m.wrong > 0) candidate.rejected = true;
      score += higher ? m.busbw_gbs : m.time_us;
      row += Format(" %s%5s %9.2f us %7.1f GB/s (%s)", s ? "|" : "", SizeLabel(m.bytes).c_str(),
                    m.time_us, m.busbw_gbs, SelectorLabel(m).c_str());
      candidate.measurements.push_back(m);
    }
    yali_.DestroyAll();
    if (candidate.rejected) {
      ++rejected_;
      row += "  REJECTED (wrong results)";
    } else {
      row += higher ? Format("  -> %.1f GB/s", score) : Format("  -> %.2f us", score);
    }
    Print(row + "\n");
  }

  ChooseBest(step);
  if (step->chosen < 0)
    Fatal(std::string("--tune: every candidate of step ") + TuneStepName(step->kind) +
          " gave wrong results");
  const TuneCandidate& best = step->candidates[step->chosen];
  std::string line = "  chosen: " + CandidateParams(step->kind, best.line) +
                     (higher ? Format(" (%.1f GB/s)", best.score) : Format(" (%.2f us)", best.score));
  if (step->runner_up >= 0) {
    const TuneCandidate& second = step->candidates[step->runner_up];
    line += "; runner-up " + CandidateParams(step->kind, second.line) +
            (higher ? Format(" (%.1f GB/s)", second.score) : Format(" (%.2f us)", second.score));
  }
  Print(line + "\n#\n");
}

void Tuner::RunCrossover() {
  crossover_.sizes = CrossoverSizes(header_.ll_capacity, world_.buffer_bytes);
  Print(Format("# step 4/4: LL/two-shot threshold, each with the parameters chosen above, at "
               "%zu sizes from 4K to the LL capacity (%s)\n",
               crossover_.sizes.size(), SizeLabel(header_.ll_capacity).c_str()));
  // Every size is checked here: LL is timed at sizes up to its capacity that step 3 did not
  // cover, and each size is its own decision.
  const TuneAlgo algos[] = {TuneAlgo::kOneshotLL, TuneAlgo::kTwoshot};
  for (TuneAlgo algo : algos) {
    if (crossover_.sizes.empty()) break;
    std::vector<TuneMeasurement>& row = algo == TuneAlgo::kOneshotLL ? crossover_.ll : crossover_.twoshot;
    const int threads = algo == TuneAlgo::kOneshotLL ? chosen_.ll_threads : chosen_.twoshot_threads;
    CreateComms(TuneAlgoName(algo), FormatTuningLine(chosen_) + "\n");
    for (size_t bytes : crossover_.sizes) {
      TuneMeasurement m = Measure(bytes, /*check=*/true);
      ExpectSelector(m, algo, threads, "the chosen parameters");
      row.push_back(m);
    }
    yali_.DestroyAll();
  }
  ChooseLLMax(&crossover_, header_.ll_capacity);
  std::string text = Format("  %8s %12s %-24s %12s %-24s %s\n", "size", "LL (us)", "(selector)",
                            "2-shot (us)", "(selector)", "faster");
  for (size_t i = 0; i < crossover_.sizes.size(); ++i) {
    const TuneMeasurement& ll = crossover_.ll[i];
    const TuneMeasurement& two = crossover_.twoshot[i];
    text += Format("  %8s %12.2f %-24s %12.2f %-24s %s\n", SizeLabel(crossover_.sizes[i]).c_str(),
                   ll.time_us, SelectorLabel(ll).c_str(), two.time_us, SelectorLabel(two).c_str(),
                   ll.wrong > 0 || (two.wrong == 0 && ll.time_us >= two.time_us) ? "two-shot"
                                                                                   : "LL");
  }
  Print(text + "  " + crossover_.reason + "\n#\n");
  chosen_.ll_max = crossover_.ll_max;
}

// Steps 5 and 6 for one collective (tune_plan.h). The table is the AllReduce choices plus the
// exchange keys chosen so far; kLLMax forces each side with YALI_ALGO on plain buffers; kDirectMin
// registers both buffers of every rank (yaliCommRegister, as -R 1 does), forces `<coll>_direct`
// on one side and leaves the other to the selector with `<coll>_direct_min=0`, i.e. what runs
// without direct: LL up to step 5's value, staged above.
void Tuner::RunExchange(int number, int total, ExchangeCrossover* x) {
  const bool ll_step = x->rule == ExchangeRule::kLLMax;
  const std::string key = ExchangeKey(x->coll, x->rule);
  const std::string candidate_algo = ExchangeAlgoName(x->coll, ll_step ? "ll" : "direct");
  Print(Format("# exchange %d/%d: %s (%s against %s%s), %zu sizes (piece %s..%s)\n", number,
               total, key.c_str(), candidate_algo.c_str(),
               ll_step ? ExchangeAlgoName(x->coll, "staged").c_str() : "the choice without it",
               ll_step ? "" : ", registered buffers", x->sizes.size(),
               x->sizes.empty() ? "-" : SizeLabel(x->pieces.front()).c_str(),
               x->sizes.empty() ? "-" : SizeLabel(x->pieces.back()).c_str()));
  if (x->sizes.empty()) {
    ChooseExchangeThreshold(x, header_.ll_capacity);
    Print("  " + x->reason + "\n#\n");
    return;
  }
  // The exchange keys chosen so far, this collective's ll_max among them for step 6.
  TuningLine line = chosen_;
  int64_t ll_max = -1;  // this collective's, from step 5
  for (const TuningKey& k : line.extra)
    if (k.key == ExchangeKey(x->coll, ExchangeRule::kLLMax)) ll_max = k.value;
  if (!ll_step) line.extra.push_back({key, 0});
  const std::string table = FormatTuningLine(line) + "\n";

  for (int side = 0; side < 2; ++side) {
    const bool candidate = side == 0;
    std::vector<TuneMeasurement>& row = candidate ? x->candidate : x->baseline;
    const char* forced = nullptr;
    std::string forced_name;
    if (candidate) forced_name = candidate_algo;
    else if (ll_step) forced_name = ExchangeAlgoName(x->coll, "staged");
    if (!forced_name.empty()) forced = forced_name.c_str();
    CreateComms(forced, table);
    if (!ll_step) RegisterBuffers(world_, yali_, /*mode=*/1);
    for (size_t i = 0; i < x->sizes.size(); ++i) {
      TuneMeasurement m = Measure(x->coll, x->sizes[i], /*check=*/true);
      std::string expected = forced_name;
      if (expected.empty()) {  // step 6's baseline: the selector with direct off
        const bool ll = ll_max > 0 && static_cast<int64_t>(x->pieces[i]) <= ll_max &&
                        static_cast<int64_t>(x->pieces[i]) <= header_.ll_capacity;
        expected = ExchangeAlgoName(x->coll, ll ? "ll" : "staged");
      }
      if (!ll_step && candidate && i == 0 && m.algo != expected) {
        // The library would not take the direct row on these buffers (same decision on every
        // rank: the same settings and registrations): leave the key to the built-in table.
        const std::string why = "the library ran " + SelectorLabel(m) + " instead of " +
                                expected + " on buffers registered with yaliCommRegister";
        if (!ll_step) yali_.DeregisterBuffers();
        yali_.DestroyAll();
        SkipExchangeCrossover(x, why);
        Print("  " + x->reason + "\n#\n");
        return;
      }
      ExpectAlgo(m, x->coll, expected, ll_step || candidate ? "forced with YALI_ALGO"
                                                             : key + "=0 in the table");
      row.push_back(m);
    }
    if (!ll_step) yali_.DeregisterBuffers();
    yali_.DestroyAll();
  }
  ChooseExchangeThreshold(x, header_.ll_capacity);
  const char* cand = ll_step ? "LL" : "direct";
  const char* base = ll_step ? "staged" : "without direct";
  std::string text = Format("  %8s %8s %12s %-26s %14s %-26s %s\n", "piece", "size", cand,
                            "(selector)", base, "(selector)", "faster");
  for (size_t i = 0; i < x->sizes.size(); ++i) {
    const TuneMeasurement& a = x->candidate[i];
    const TuneMeasurement& b = x->baseline[i];
    const bool wins = a.wrong == 0 && (b.wrong > 0 || a.time_us < b.time_us);
    text += Format("  %8s %8s %9.2f us %-26s %11.2f us %-26s %s\n", SizeLabel(x->pieces[i]).c_str(),
                   SizeLabel(x->sizes[i]).c_str(), a.time_us, SelectorLabel(a).c_str(), b.time_us,
                   SelectorLabel(b).c_str(), wins ? cand : base);
  }
  Print(text + "  " + x->reason + "\n#\n");
  chosen_.extra.push_back(ExchangeTuningKey(*x));
}

// Loads the finished table the way a user will (YALI_TUNING_FILE, the selector deciding), checks
// that it selects what was measured, and times it against the built-in table.
void Tuner::RunComparison(const std::string& table) {
  comparison_.sizes = ComparisonSizes(world_.buffer_bytes);
  Print("# check: the written table, loaded as YALI_TUNING_FILE with YALI_ALGO unset, against the "
        "built-in table\n");
  CreateComms(nullptr, table);
  for (size_t bytes : comparison_.sizes) {
    TuneMeasurement m = Measure(bytes, /*check=*/true);
    const bool ll = static_cast<int64_t>(m.bytes) <= chosen_.ll_max &&
                    static_cast<int64_t>(m.bytes) <= header_.ll_capacity;
    ExpectSelector(m, ll ? TuneAlgo::kOneshotLL : TuneAlgo::kTwoshot,
                   ll ? chosen_.ll_threads : chosen_.twoshot_threads, "the written table");
    comparison_.tuned.push_back(m);
  }
  yali_.DestroyAll();
  CreateComms(nullptr, "");
  for (size_t bytes : comparison_.sizes) comparison_.builtin.push_back(Measure(bytes, true));
  yali_.DestroyAll();

  std::string text = Format("  %8s %12s %-24s %12s %-24s %8s\n", "size", "built-in", "(selector)",
                            "tuned", "(selector)", "change");
  for (size_t i = 0; i < comparison_.sizes.size(); ++i) {
    const TuneMeasurement& builtin = comparison_.builtin[i];
    const TuneMeasurement& tuned = comparison_.tuned[i];
    const double change = builtin.time_us > 0 ? 100.0 * (tuned.time_us / builtin.time_us - 1) : 0;
    text += Format("  %8s %9.2f us %-24s %9.2f us %-24s %+7.1f%%\n",
                   SizeLabel(comparison_.sizes[i]).c_str(), builtin.time_us,
                   SelectorLabel(builtin).c_str(), tuned.time_us, SelectorLabel(tuned).c_str(),
                   change);
  }
  Print(text + "#\n");
}

void Tuner::PrintSummary(const std::string& out_path) const {
  std::string text = Format("# tune summary (sm %d, nranks %d, %s):\n", header_.sm_major,
                            header_.nranks, DTypeName(dtype_));
  for (const TuneStep& step : steps_) {
    const TuneCandidate& best = step.candidates[step.chosen];
    text += Format("#   %-17s %-30s best of %zu\n", TuneStepName(step.kind),
                   CandidateParams(step.kind, best.line).c_str(), step.candidates.size());
  }
  text += "#   " + crossover_.reason + "\n";
  for (const ExchangeCrossover& x : exchanges_) text += "#   " + x.reason + "\n";
  text += "#   wrote " + out_path + ": " + FormatTuningLine(chosen_) + "\n";
  char resolved[PATH_MAX];
  const std::string shown =
      realpath(out_path.c_str(), resolved) != nullptr ? std::string(resolved) : out_path;
  text += "#   use it: YALI_TUNING_FILE=" + shown + "\n";
  if (total_wrong_ == 0) {
    text += "# Out of bounds values (yali) : 0 OK\n";
  } else {
    text += Format("# Out of bounds values (yali) : %llu FAILED (%d candidate(s) rejected; the "
                   "table uses only correct ones)\n",
                   static_cast<unsigned long long>(total_wrong_), rejected_);
  }
  Print(text + "#\n");
}

int Tuner::Run() {
  SetUp();
  PrintHeader();

  // Steps 1-3: each candidate set starts from the choices of the steps before it. The fields a
  // step does not vary do not matter to it (its algorithm is forced), so start from neutral ones.
  TuningLine base = chosen_;
  steps_.reserve(3);
  steps_.push_back(TwoshotGeometryStep(base, header_.staging_bytes, world_.buffer_bytes));
  RunStep(1, &steps_.back());
  base = steps_.back().candidates[steps_.back().chosen].line;

  steps_.push_back(TwoshotMinSlotStep(base, world_.buffer_bytes));
  RunStep(2, &steps_.back());
  base = steps_.back().candidates[steps_.back().chosen].line;

  const size_t ll_limit = std::min<size_t>(world_.buffer_bytes, header_.ll_capacity);
  steps_.push_back(LLGeometryStep(base, ll_limit));
  RunStep(3, &steps_.back());
  chosen_ = steps_.back().candidates[steps_.back().chosen].line;

  RunCrossover();

  // Steps 5 and 6: each exchange --tune-colls names, LL/staged first (step 6's baseline runs with
  // its result).
  std::vector<ExchangeCrossover> planned;
  for (const TuneExchange& exchange : TuneExchanges()) {
    bool named = false;
    for (CollId coll : args_.tune_colls) named = named || coll == exchange.coll;
    if (!named) continue;
    for (ExchangeRule rule : {ExchangeRule::kLLMax, ExchangeRule::kDirectMin}) {
      if (rule == ExchangeRule::kDirectMin && !exchange.has_direct) continue;
      planned.push_back(ExchangeCrossoverSizes(exchange.coll, rule, world_.nranks,
                                               ElementSize(dtype_), header_.ll_capacity,
                                               world_.buffer_bytes));
    }
  }
  exchanges_.reserve(planned.size());
  for (size_t i = 0; i < planned.size(); ++i) {
    exchanges_.push_back(planned[i]);
    RunExchange(static_cast<int>(i) + 1, static_cast<int>(planned.size()), &exchanges_.back());
  }

  const std::string table = TuningFileText(header_, steps_, crossover_, chosen_, exchanges_);
  RunComparison(table);

  if (printer()) {
    std::ofstream file(args_.tune_out, std::ios::trunc);
    file << table;
    file.close();
    if (!file.good()) Fatal("--tune: cannot write " + args_.tune_out);
    if (!args_.json_path.empty()) {
      RunInfo info = info_;
      info.timing = TimingMode::kEvents;
      std::string json = FormatJson(info, {}, [&](JsonWriter& writer) {
        WriteTuneJson(writer, header_, steps_, crossover_, comparison_, chosen_, args_.tune_out,
                      exchanges_);
      });
      std::ofstream json_file(args_.json_path, std::ios::trunc);
      json_file << json;
      json_file.close();
      if (!json_file.good()) Fatal("cannot write the JSON file " + args_.json_path);
    }
    PrintSummary(args_.tune_out);
    unlink(table_path_.c_str());
  }
  saved_env_.Restore();
  return total_wrong_ == 0 ? 0 : 1;
}

}  // namespace

int RunTune(World& world, Backend& yali, const PerfArgs& args, const RunInfo& info) {
  Tuner tuner(world, yali, args, info);
  return tuner.Run();
}

}  // namespace yali_perf
