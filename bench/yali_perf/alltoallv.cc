#include "alltoallv.h"

#include <yali/yali.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "alltoallv_plan.h"
#include "alltoallv_report.h"
#include "collectives.h"
#include "cuda_check.h"
#include "perf_error.h"
#include "sample_stats.h"
#include "text_format.h"

namespace yali_perf {
namespace {

// Where each int64 of a rank's counts lives (offsets in int64s into one device array, `words`,
// and into its reference, `expected`, laid out alike). Inputs first, then the outputs of the
// forms, each a range that its column poisons before the checked call and compares after.
struct VarWords {
  size_t expert_send = 0;       // [X] rows to each global expert: dispatch's and combine's input
  size_t rank_send = 0;         // [n] elements to each rank: the device form's input and the
                                //     split sizes the host-count forms exchange
  size_t split_recv = 0;        // [n] elements from each rank: the split sizes' exchange output
                                //     (right after rank_send: one copy takes both to the host)
  size_t dispatch_counts = 0;   // [E * n] the dispatch's recvCounts
  size_t dispatch_offsets = 0;  // [E + 1] the dispatch's expertOffsets
  size_t dev_counts = 0;        // [n] the device form's recvcounts
  size_t dev_displs = 0;        // [n] the device form's rdispls
  size_t total = 0;

  VarWords(int nranks, int local_experts) {
    const size_t n = static_cast<size_t>(nranks);
    const size_t e = static_cast<size_t>(local_experts);
    expert_send = 0;
    rank_send = expert_send + n * e;
    split_recv = rank_send + n;
    dispatch_counts = split_recv + n;
    dispatch_offsets = dispatch_counts + e * n;
    dev_counts = dispatch_offsets + e + 1;
    dev_displs = dev_counts + n;
    total = dev_displs + n;
  }
};

// A range of VarWords: the outputs one form writes.
struct WordRange {
  size_t begin = 0;
  size_t count = 0;
};

// Which of a rank's buffers holds rows in which layout (alltoallv_plan.h).
enum class RowsAt {
  kSendOrder,    // World's send buffer, rows_per_rank rows, RankLayout::send_ids
  kExpertMajor,  // World's recv buffer, capacity rows, RankLayout::expert_ids
  kRankMajor,    // World's recv buffer, capacity rows, RankLayout::rank_ids
};

// What a form reads and writes.
struct FormBuffers {
  RowsAt input;
  RowsAt output;
  WordRange outputs;  // its count outputs, in VarWords
};

FormBuffers BuffersOf(VarForm form, const VarWords& words, int nranks, int local_experts) {
  const size_t n = static_cast<size_t>(nranks);
  const size_t e = static_cast<size_t>(local_experts);
  switch (form) {
    case VarForm::kExpertDispatch:
      return {RowsAt::kSendOrder, RowsAt::kExpertMajor, {words.dispatch_counts, e * n + e + 1}};
    case VarForm::kExpertCombine:
      return {RowsAt::kExpertMajor, RowsAt::kSendOrder, {0, 0}};
    case VarForm::kDeviceCounts:
      return {RowsAt::kSendOrder, RowsAt::kRankMajor, {words.dev_counts, 2 * n}};
    case VarForm::kHostCounts:
      // The split sizes' exchange is part of the form as torch runs it: its output is checked too.
      return {RowsAt::kSendOrder, RowsAt::kRankMajor, {words.split_recv, n}};
  }
  Fatal("internal: unknown AlltoAllv form");
}

// One rank's memory for one case, besides World's buffers; freed with the case.
struct VarRankBuffers {
  int device = 0;
  int64_t* words = nullptr;     // device, VarWords
  int64_t* expected = nullptr;  // device, VarWords: the inputs and the outputs' reference
  int64_t* send_ids = nullptr;    // device, [rows_per_rank]
  int64_t* expert_ids = nullptr;  // device, [capacity_rows], kNoRow past the used rows
  int64_t* rank_ids = nullptr;    // device, [capacity_rows], likewise
  int64_t* split_host = nullptr;  // pinned, [2n]: rank_send and split_recv copied back
  std::vector<size_t> send_counts;  // host, [n] elements: the host-count forms' arguments
  std::vector<size_t> recv_counts;
  std::vector<int64_t> split_expected;  // host, [n]: what the split sizes' exchange must deliver
};

int64_t* UploadIds(const std::vector<int64_t>& ids, size_t positions) {
  std::vector<int64_t> padded(ids);
  padded.resize(std::max<size_t>(positions, 1), kNoRow);
  int64_t* device = nullptr;
  YALI_PERF_CUDA(cudaMalloc(&device, padded.size() * sizeof(int64_t)));
  YALI_PERF_CUDA(cudaMemcpy(device, padded.data(), padded.size() * sizeof(int64_t),
                            cudaMemcpyHostToDevice));
  return device;
}

// The counts of `layout` in VarWords: the inputs, and what each form's outputs must hold.
std::vector<int64_t> ReferenceWords(const RankLayout& layout, const VarWords& words, int nranks,
                                    int local_experts, size_t hidden) {
  const int64_t h = static_cast<int64_t>(hidden);
  std::vector<int64_t> values(words.total, 0);
  std::copy(layout.send_rows.begin(), layout.send_rows.end(), values.begin() + words.expert_send);
  for (int d = 0; d < nranks; ++d)
    for (int e = 0; e < local_experts; ++e)
      values[words.rank_send + d] +=
          layout.send_rows[static_cast<size_t>(d) * local_experts + e] * h;
  std::copy(layout.expert_counts.begin(), layout.expert_counts.end(),
            values.begin() + words.dispatch_counts);
  std::copy(layout.expert_offsets.begin(), layout.expert_offsets.end(),
            values.begin() + words.dispatch_offsets);
  int64_t displacement = 0;
  for (int s = 0; s < nranks; ++s) {
    const int64_t elements = layout.rank_rows[s] * h;
    values[words.split_recv + s] = elements;
    values[words.dev_counts + s] = elements;
    values[words.dev_displs + s] = displacement;
    displacement += elements;
  }
  return values;
}

std::vector<VarRankBuffers> AllocateCase(World& world, const AlltoAllvPlan& plan,
                                         const VarWords& words, size_t hidden) {
  const RoutingSpec& spec = plan.spec;
  std::vector<VarRankBuffers> buffers(world.local.size());
  for (size_t local = 0; local < world.local.size(); ++local) {
    const RankLayout& layout = plan.layouts[local];
    VarRankBuffers& b = buffers[local];
    b.device = world.local[local].device;
    YALI_PERF_CUDA(cudaSetDevice(b.device));
    const std::vector<int64_t> values =
        ReferenceWords(layout, words, spec.nranks, spec.LocalExperts(), hidden);
    YALI_PERF_CUDA(cudaMalloc(&b.words, words.total * sizeof(int64_t)));
    YALI_PERF_CUDA(cudaMalloc(&b.expected, words.total * sizeof(int64_t)));
    YALI_PERF_CUDA(cudaMemcpy(b.words, values.data(), words.total * sizeof(int64_t),
                              cudaMemcpyHostToDevice));
    YALI_PERF_CUDA(cudaMemcpy(b.expected, values.data(), words.total * sizeof(int64_t),
                              cudaMemcpyHostToDevice));
    b.send_ids = UploadIds(layout.send_ids, spec.RowsPerRank());
    b.expert_ids = UploadIds(layout.expert_ids, plan.capacity_rows);
    b.rank_ids = UploadIds(layout.rank_ids, plan.capacity_rows);
    YALI_PERF_CUDA(cudaMallocHost(&b.split_host, 2 * spec.nranks * sizeof(int64_t)));
    b.send_counts.assign(spec.nranks, 0);
    b.recv_counts.assign(spec.nranks, 0);
    b.split_expected.assign(values.begin() + words.split_recv,
                            values.begin() + words.split_recv + spec.nranks);
  }
  return buffers;
}

void FreeCase(std::vector<VarRankBuffers>& buffers) {
  for (VarRankBuffers& b : buffers) {
    YALI_PERF_CUDA(cudaSetDevice(b.device));
    for (int64_t* device : {b.words, b.expected, b.send_ids, b.expert_ids, b.rank_ids})
      YALI_PERF_CUDA(cudaFree(device));
    YALI_PERF_CUDA(cudaFreeHost(b.split_host));
  }
  buffers.clear();
}

// One column of one line as a case of the harness.
class VarCase final : public CaseCalls {
 public:
  VarCase(const VarColumn& column, const AlltoAllvPlan& plan, const AlltoAllvRows& rows,
          const VarWords& words, std::vector<VarRankBuffers>& buffers)
      : column_(column),
        plan_(plan),
        rows_(rows),
        words_(words),
        buffers_(buffers),
        form_(BuffersOf(column.form, words, plan.spec.nranks, plan.spec.LocalExperts())) {}

  std::string Name() const override { return std::string("alltoallv ") + column_.name; }

  bool Precheck(World& world, Backend& backend, int local, std::string* refusal) override {
    // The forms themselves have no dry run (every library's refusal comes at the first call);
    // the split sizes' AlltoAll does.
    if (!column_.host_round_trip) return true;
    return backend.Precheck(local, SplitCall(local), refusal);
  }

  bool TryIssueAll(World& world, Backend& backend, std::string* refusal) override {
    if (column_.host_round_trip) {
      // torch's steps before an all_to_all_single with split sizes: the sizes' own all-to-all,
      // then .tolist() (a copy to the host and a wait for it), then the call.
      const size_t refused = IssueGrouped(
          world, backend,
          [&](int local, std::string* message) {
            return backend.Issue(local, SplitCall(local), world.local[local].stream, message);
          },
          refusal);
      if (refused > 0)
        return AllRefused(world, backend, refused, "the split sizes' AlltoAll", *refusal);
      const size_t n = static_cast<size_t>(world.nranks);
      for (size_t local = 0; local < world.local.size(); ++local) {
        VarRankBuffers& b = buffers_[local];
        YALI_PERF_CUDA(cudaSetDevice(b.device));
        YALI_PERF_CUDA(cudaMemcpyAsync(b.split_host, b.words + words_.rank_send,
                                       2 * n * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                       world.local[local].stream));
      }
      WaitForStreams(world, &backend, "the host round trip of the split sizes");
      for (size_t local = 0; local < world.local.size(); ++local) {
        VarRankBuffers& b = buffers_[local];
        for (size_t r = 0; r < n; ++r) {
          // Sizes that disagree with the routing would make the call itself misbehave (NCCL's
          // send/recv would wait for rows that never come): stop here, naming the culprit.
          if (b.split_host[n + r] != b.split_expected[r])
            Fatal(std::string(backend.Name()) + "'s AlltoAll of the split sizes gave rank " +
                  std::to_string(world.local[local].rank) + " " +
                  std::to_string(b.split_host[n + r]) + " elements from rank " +
                  std::to_string(r) + "; the routing says " + std::to_string(b.split_expected[r]));
          b.send_counts[r] = static_cast<size_t>(b.split_host[r]);
          b.recv_counts[r] = static_cast<size_t>(b.split_host[n + r]);
        }
      }
    }
    // After the split sizes' exchange has completed everywhere, a refusal of the call leaves
    // nothing waiting: like a refusal of a first phase.
    const size_t refused = IssueGrouped(
        world, backend,
        [&](int local, std::string* message) {
          return backend.IssueVar(local, Call(world, local), world.local[local].stream, message);
        },
        refusal);
    if (refused > 0) return AllRefused(world, backend, refused, column_.call, *refusal);
    return true;
  }

  void Prepare(World& world, Backend& backend, int local, bool poison) override {
    const RankSlot& slot = world.local[local];
    VarRankBuffers& b = buffers_[local];
    if (poison) {
      PoisonBuffer(RowsBuffer(form_.output, slot), RowsIn(form_.output) * RowBytes(), slot.stream);
      PoisonBuffer(b.words + form_.outputs.begin, form_.outputs.count * sizeof(int64_t),
                   slot.stream);
    }
    FillRows(RowsBuffer(form_.input, slot), Ids(form_.input, b), RowsIn(form_.input), rows_,
             slot.stream);
  }

  void Check(World& world, Backend& backend, int local, unsigned long long* counters) override {
    const RankSlot& slot = world.local[local];
    const VarRankBuffers& b = buffers_[local];
    CountWrongRows(RowsBuffer(form_.output, slot), Ids(form_.output, b), RowsIn(form_.output),
                   rows_, &counters[0], slot.stream);
    CountWrongWords(b.words + form_.outputs.begin, b.expected + form_.outputs.begin,
                    form_.outputs.count, &counters[0], slot.stream);
  }

 private:
  size_t RowBytes() const { return rows_.hidden * ElementSize(rows_.dtype); }

  void* RowsBuffer(RowsAt at, const RankSlot& slot) const {
    return at == RowsAt::kSendOrder ? slot.send : slot.recv;
  }

  size_t RowsIn(RowsAt at) const {
    return at == RowsAt::kSendOrder ? plan_.spec.RowsPerRank() : plan_.capacity_rows;
  }

  static const int64_t* Ids(RowsAt at, const VarRankBuffers& b) {
    switch (at) {
      case RowsAt::kSendOrder: return b.send_ids;
      case RowsAt::kExpertMajor: return b.expert_ids;
      case RowsAt::kRankMajor: return b.rank_ids;
    }
    return nullptr;
  }

  // The split sizes' exchange: each rank's element counts per destination, one int64 to each rank.
  LibraryCall SplitCall(int local) const {
    LibraryCall call;
    call.kind = CollId::kAlltoAll;
    call.send = buffers_[local].words + words_.rank_send;
    call.recv = buffers_[local].words + words_.split_recv;
    call.count = 1;
    call.dtype = DType::kInt64;
    return call;
  }

  VarCall Call(const World& world, int local) const {
    const RankSlot& slot = world.local[local];
    const VarRankBuffers& b = buffers_[local];
    VarCall call;
    call.form = column_.form;
    call.send = RowsBuffer(form_.input, slot);
    call.recv = RowsBuffer(form_.output, slot);
    call.dtype = rows_.dtype;
    call.nranks = world.nranks;
    call.send_counts = b.send_counts.data();
    call.recv_counts = b.recv_counts.data();
    call.device_send_counts =
        b.words + (column_.form == VarForm::kDeviceCounts ? words_.rank_send : words_.expert_send);
    call.recv_capacity = plan_.capacity_rows * rows_.hidden;
    if (column_.form == VarForm::kDeviceCounts) {
      call.device_recv_counts = b.words + words_.dev_counts;
      call.device_recv_offsets = b.words + words_.dev_displs;
    } else if (column_.form == VarForm::kExpertDispatch) {
      call.device_recv_counts = b.words + words_.dispatch_counts;
      call.device_recv_offsets = b.words + words_.dispatch_offsets;
    }
    call.row_bytes = RowBytes();
    call.local_experts = plan_.spec.LocalExperts();
    call.align_rows = plan_.align_rows;
    call.capacity_rows = plan_.capacity_rows;
    return call;
  }

  // `refused` of the local ranks refused `what`: false when all did (nothing is left waiting);
  // fatal when only some did, since the others' calls wait for them.
  static bool AllRefused(World& world, Backend& backend, size_t refused, const char* what,
                         const std::string& refusal) {
    if (refused == world.local.size()) return false;
    Fatal(std::string(backend.Name()) + " refused " + what + " on " + std::to_string(refused) +
          " of " + std::to_string(world.local.size()) +
          " local rank(s) after launching it elsewhere (the launched calls cannot complete): " +
          refusal);
  }

  const VarColumn& column_;
  const AlltoAllvPlan& plan_;
  const AlltoAllvRows rows_;
  const VarWords words_;
  std::vector<VarRankBuffers>& buffers_;
  const FormBuffers form_;
};

RoutingSpec SpecFor(const AlltoAllvArgs& args, int nranks, TokenDist dist, size_t tokens) {
  RoutingSpec spec;
  spec.nranks = nranks;
  spec.tokens = tokens;
  spec.topk = args.topk;
  spec.experts = args.experts;
  spec.dist = dist;
  spec.zipf_s = args.zipf_s;
  spec.hot_share = args.hot_share;
  spec.seed = args.seed;
  return spec;
}

// The bytes per rank of the larger of a case's buffers: the rows it sends, the capacity it
// receives into.
size_t CaseBytes(const AlltoAllvPlan& plan, size_t row_bytes) {
  return std::max(plan.spec.RowsPerRank(), plan.capacity_rows) * row_bytes;
}

Backend* FindBackend(const std::vector<Backend*>& backends, const char* name) {
  for (Backend* backend : backends)
    if (std::string(backend->Name()) == name) return backend;
  return nullptr;
}

VarCell MeasuredCell(const CaseResult& result, const TimingOptions& timing, size_t bytes) {
  VarCell cell;
  cell.state = VarCell::State::kMeasured;
  cell.timing = timing.mode;
  cell.time_us = result.time_us;
  cell.algbw_gbs = AlgorithmBandwidth(bytes, result.time_us);
  cell.checked = result.checked;
  cell.wrong = result.wrong;
  cell.iters = result.counts.iters;
  cell.warmup = result.counts.warmup;
  cell.samples_us = result.samples_us;
  cell.stats = ComputeStats(result.samples_us);
  return cell;
}

}  // namespace

bool CheckAlltoAllvWorld(const AlltoAllvArgs& args, int nranks, std::string* error) {
  if (args.experts % nranks != 0) {
    *error = "--experts " + std::to_string(args.experts) + " is not a multiple of the " +
             std::to_string(nranks) + " ranks (every rank holds the same number of experts)";
    return false;
  }
  if (args.experts / nranks > YALI_MAX_LOCAL_EXPERTS) {
    *error = "--experts " + std::to_string(args.experts) + " puts " +
             std::to_string(args.experts / nranks) + " experts on each of " +
             std::to_string(nranks) + " ranks; YALI takes at most " +
             std::to_string(YALI_MAX_LOCAL_EXPERTS) + " (YALI_MAX_LOCAL_EXPERTS)";
    return false;
  }
  return true;
}

size_t AlltoAllvBufferBytes(const PerfArgs& args, int nranks) {
  const AlltoAllvArgs& a = args.alltoallv;
  size_t largest = 0;
  for (DType dtype : args.dtypes)
    for (TokenDist dist : a.dists)
      for (size_t tokens : a.tokens) {
        const AlltoAllvPlan plan = BuildPlan(SpecFor(a, nranks, dist, tokens), a.align_rows, {});
        largest = std::max(largest, CaseBytes(plan, a.hidden * ElementSize(dtype)));
      }
  return largest;
}

std::string AlltoAllvPreamble(const PerfArgs& args, int nranks) {
  const AlltoAllvArgs& a = args.alltoallv;
  std::string text = Format(
      "# collective alltoallv: %d experts (%d per rank), top-%d, hidden %zu, align %zu, seed "
      "%llu; one line per --tokens value (per rank); algbw = bytes each rank sends / time\n",
      a.experts, a.experts / nranks, a.topk, a.hidden, a.align_rows,
      static_cast<unsigned long long>(a.seed));
  for (const VarColumn& column : VarColumns())
    text += Format("#   %-11s %s: %s\n", column.name, column.impl, column.call);
  text += "# host_counts and nccl_p2p are timed with their host round trip (torch's "
          "all_to_all_single with split sizes); the other columns take counts in device memory\n";
  if (args.timing == TimingMode::kGraph)
    text += "# -G: dispatch, combine and dev_counts are captured into CUDA graphs; host_counts and "
            "nccl_p2p are timed eagerly with events (they read counts on the host every call: a "
            "captured graph would replay the capture's counts)\n";
  for (const VarRatio& ratio : VarRatios())
    text += Format("# ratio %s = time of %s / time of %s\n", ratio.name, ratio.over, ratio.under);
  return text;
}

uint64_t RunAlltoAllv(World& world, const std::vector<Backend*>& backends,
                      const std::map<std::string, std::string>& absent, const PerfArgs& args,
                      const RunInfo& info, bool printer,
                      const std::function<void(const Backend&)>& use_buffers_of) {
  const AlltoAllvArgs& a = args.alltoallv;
  const TimingOptions base = TimingOptionsFor(args);
  std::vector<int> local_ranks;
  for (const RankSlot& slot : world.local) local_ranks.push_back(slot.rank);
  const std::vector<VarColumn>& columns = VarColumns();
  std::vector<VarLine> lines;
  std::vector<uint64_t> wrong_per_column(columns.size(), 0);
  std::vector<bool> measured_column(columns.size(), false);
  std::vector<bool> reason_printed(columns.size(), false);
  auto note = [&](const std::string& text) {
    if (!printer) return;
    std::printf("# %s\n", text.c_str());
    std::fflush(stdout);
  };

  for (int run = 1; run <= args.repeat; ++run) {
    if (args.repeat > 1) note("run " + std::to_string(run) + " of " + std::to_string(args.repeat));
    for (DType dtype : args.dtypes) {
      const size_t row_bytes = a.hidden * ElementSize(dtype);
      for (TokenDist dist : a.dists) {
        if (printer) {
          std::fputs(VarBlockHeading(a, dist, dtype, world.nranks).c_str(), stdout);
          std::fflush(stdout);
        }
        for (size_t tokens : a.tokens) {
          const RoutingSpec spec = SpecFor(a, world.nranks, dist, tokens);
          const AlltoAllvPlan plan = BuildPlan(spec, a.align_rows, local_ranks);
          if (CaseBytes(plan, row_bytes) > world.buffer_bytes) {
            if (run == 1)
              note(Format("%zu tokens: skipped, needs %zu B per buffer, %zu B fit on the GPUs",
                          tokens, CaseBytes(plan, row_bytes), world.buffer_bytes));
            continue;
          }
          VarLine line;
          line.dtype = dtype;
          line.dist = dist;
          line.tokens = tokens;
          line.run = run;
          line.rows_per_rank = spec.RowsPerRank();
          line.bytes_per_rank = line.rows_per_rank * row_bytes;
          line.max_recv_rows = plan.max_recv_rows;
          line.capacity_rows = plan.capacity_rows;
          line.skew = ReceiveSkew(plan);

          AlltoAllvRows rows;
          rows.dtype = dtype;
          rows.hidden = a.hidden;
          rows.rows_per_rank = spec.RowsPerRank();
          rows.seed = RowSeed(spec, dtype);
          const VarWords words(world.nranks, spec.LocalExperts());
          std::vector<VarRankBuffers> buffers = AllocateCase(world, plan, words, a.hidden);
          for (size_t c = 0; c < columns.size(); ++c) {
            const VarColumn& column = columns[c];
            VarCell cell;
            Backend* backend = FindBackend(backends, column.impl);
            if (backend == nullptr) {
              auto why = absent.find(column.impl);
              cell.note = why != absent.end() ? why->second : "not run";
              line.cells.push_back(cell);
              continue;
            }
            TimingOptions timing = base;
            if (column.host_round_trip && timing.mode == TimingMode::kGraph)
              timing.mode = TimingMode::kEvents;
            use_buffers_of(*backend);
            VarCase calls(column, plan, rows, words, buffers);
            const CaseResult result = RunCase(world, *backend, calls, timing);
            if (result.skipped) {
              cell.state = VarCell::State::kSkipped;
              cell.note = result.skip_reason;
              if (!reason_printed[c]) {
                reason_printed[c] = true;
                note(std::string(column.impl) + " " + column.name + ": skipped (" +
                     result.skip_reason + ")");
              }
            } else {
              cell = MeasuredCell(result, timing, line.bytes_per_rank);
              wrong_per_column[c] += result.wrong;
              measured_column[c] = true;
            }
            line.cells.push_back(cell);
          }
          FreeCase(buffers);
          if (printer) {
            std::fputs(VarTableRow(line).c_str(), stdout);
            std::fflush(stdout);
          }
          lines.push_back(line);
        }
      }
    }
  }

  uint64_t total_wrong = 0;
  for (uint64_t wrong : wrong_per_column) total_wrong += wrong;
  if (printer) {
    std::printf("#\n");
    for (size_t c = 0; c < columns.size(); ++c) {
      const std::string who = std::string(columns[c].impl) + " " + columns[c].name;
      if (!measured_column[c]) {
        std::printf("# Out of bounds values (%s) : N/A (not measured)\n", who.c_str());
      } else if (args.check) {
        std::printf("# Out of bounds values (%s) : %llu %s\n", who.c_str(),
                    static_cast<unsigned long long>(wrong_per_column[c]),
                    wrong_per_column[c] == 0 ? "OK" : "FAILED");
      } else {
        std::printf("# Out of bounds values (%s) : N/A (-c 0)\n", who.c_str());
      }
    }
    std::printf("#\n");
    std::fflush(stdout);
    if (!args.json_path.empty()) {
      std::ofstream file(args.json_path);
      file << FormatJson(info, {}, [&](JsonWriter& json) {
        json.Key("alltoallv");
        WriteVarJson(json, a, world.nranks, lines);
      });
      if (!file.good()) Fatal("cannot write the JSON file " + args.json_path);
    }
  }
  return total_wrong;
}

}  // namespace yali_perf
