// The printed table and the JSON file (schema "yali-perf/1"). Host-only, so that the formats are
// unit-tested without a GPU.
#ifndef YALI_PERF_REPORT_H_
#define YALI_PERF_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "json_writer.h"
#include "perf_args.h"
#include "sample_stats.h"

namespace yali_perf {

struct GpuInfo {
  int rank = 0;
  int device = 0;
  std::string name;
  std::string pci_bus_id;
};

// A case that did not run: the library refused it, or yali-perf does not run the combination
// (avg on an integer type, in-place alltoall: every_size, with bytes and count null in the JSON).
struct SkipRecord {
  bool every_size = false;
  std::string impl;  // "yali", "nccl", or "all"
  std::string collective;
  DType dtype = DType::kFloat;
  std::string redop;  // "sum", ..., or "none"
  int root = -1;      // -1: the collective has no root
  size_t bytes = 0;
  size_t count = 0;
  std::string placement;  // "out-of-place", "in-place", or empty (both; JSON null)
  int run = 1;
  std::string reason;
};

// -e max: the largest message of one collective that ran on one library.
struct LargestRecord {
  std::string collective;
  std::string impl;
  DType dtype = DType::kFloat;
  size_t bytes = 0;
  size_t count = 0;
  uint64_t wrong = 0;
  bool checked = false;
};

struct RunInfo {
  std::string collective;  // "allreduce", or the -C list: "allreduce,allgather"
  std::string date;        // ISO 8601, UTC
  std::string hostname;
  std::string command;
  int nranks = 0;
  bool multi_process = false;
  TimingMode timing = TimingMode::kEvents;
  int iters = 0;   // -n as given; a result's own count may be smaller (--max-case-time)
  int warmup = 0;  // -w as given, likewise
  int graph_launches = 0;
  int repeat = 1;               // --repeat
  double max_case_seconds = 0;  // --max-case-time; 0: none (JSON null)
  int registered = 0;           // -R: 0 plain, 1 registered with every library, 2 each at its best
  int nccl_cta_policy = -1;     // -x: NCCL's CTAPolicy; -1 not set (JSON null)
  bool nccl_own_memory = true;  // --nccl-memory (JSON "nccl_memory": "own" or "shared")
  int average = 1;              // -a (nccl-tests' numbers: 0 rank 0, 1 mean, 2 min, 3 max)
  // The NCCL_*, YALI_*, CUDA_* and TORCH_* variables in force (NAME=value, sorted; JSON
  // "environment"): what either library ran under besides its defaults (NCCL_NVLS_ENABLE=0, a
  // YALI_ALGO, a tuning file), so that a table can say so.
  std::vector<std::string> environment;
  // -R 1 with NCCL: why NCCL's registration of these buffers may do nothing (JSON
  // "nccl_registration_note"; empty: none).
  std::string nccl_registration_note;
  std::vector<GpuInfo> gpus;
  int yali_version = -1;  // -1: not loaded (JSON null)
  int nccl_version = -1;  // -1: not built or not run (JSON null)
  std::vector<SkipRecord> skipped;  // JSON "skipped"
  // -e max: JSON "max_message" (the buffer size and each collective's largest message that ran).
  bool max_bytes_auto = false;
  size_t buffer_bytes = 0;
  std::vector<LargestRecord> largest;
};

// One measured case: one row of the JSON "results", half a row of the table.
struct ResultRecord {
  std::string impl;
  std::string collective = "allreduce";
  DType dtype = DType::kFloat;
  RedOp op = RedOp::kSum;
  bool has_op = true;  // false for the collectives that only move data: redop "none"
  int root = -1;       // -1: the collective has no root (JSON null)
  size_t bytes = 0;
  size_t count = 0;
  bool in_place = false;
  int run = 1;     // which pass of --repeat measured it, from 1
  int iters = 0;   // timed iterations actually made (in graph mode: calls per graph)
  int warmup = 0;  // warmup calls actually made
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  bool checked = false;
  uint64_t wrong = 0;
  bool algo_known = false;
  std::string algo;
  int ctas = 0;
  std::vector<double> samples_us;
  SampleStats stats;
  double host_issue_us = 0;  // CaseResult::host_issue_us; 0: not measured (JSON null)
};

// algbw in GB/s (1e9 bytes per second, as nccl-tests).
double AlgorithmBandwidth(size_t bytes, double time_us);

// The two header lines of the table.
std::string TableHeader();

// The redop column and the JSON "redop": the op, or "none" for a collective that only moves data.
std::string RedOpLabel(const ResultRecord& record);

// One table row: out-of-place and in-place halves (either may be null: printed as "-"), the
// algorithm label ("skipped" for a case the library refused), and the nccl/yali time ratios
// (negative: "-").
std::string TableRow(const std::string& impl, size_t bytes, size_t count, DType dtype,
                     const std::string& redop,
                     const ResultRecord* out_of_place, const ResultRecord* in_place,
                     const std::string& algo_label, double ratio_out_of_place,
                     double ratio_in_place);

// "twoshot/32", or "-" when the library did not say.
std::string AlgoLabel(const ResultRecord& record);

// The --percentiles table. When the records span several collectives or roots, a comment line
// names each block ("# allgather", "# broadcast, root 1").
std::string PercentileTable(const std::vector<ResultRecord>& records);

// The comment line above a block of rows of one collective and root: "# allgather (busbw = algbw
// * (n-1)/n)", "# broadcast, root 1 (busbw = algbw * 1)".
std::string BlockHeading(CollId coll, int root);

// The whole JSON document. `extra`, when given, writes more keys into the top-level object after
// "results" (yali-perf --tune adds its "tune" object there).
std::string FormatJson(const RunInfo& info, const std::vector<ResultRecord>& records,
                       const std::function<void(JsonWriter&)>& extra = nullptr);

// Samples kept in the JSON per result (the first ones); stats_us always covers all of them.
constexpr size_t kMaxJsonSamples = 1000;

// A result's "stats_us" object: mean, std, min, max, p50, p90, p95, p99, n.
void WriteSampleStats(JsonWriter& json, const SampleStats& stats);

}  // namespace yali_perf

#endif  // YALI_PERF_REPORT_H_
