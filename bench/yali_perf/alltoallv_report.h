// -C alltoallv's table and JSON. Host-only, so that the formats are unit-tested without a GPU
// (tests/test_perf_alltoallv.cc).
//
// One line per (dtype, distribution, tokens value, pass): the exchange's size, then for each
// column of VarColumns() (a form on a library) its time and #wrong, the dispatch's algbw and the
// VarRatios(). algbw = bytes each rank sends / time: every rank sends tokens x topk rows whatever
// the routing (its rows for its own experts included, as nccl-tests counts alltoall's own block);
// what a skewed routing changes is what the busiest rank receives (the skew column).
#ifndef YALI_PERF_ALLTOALLV_REPORT_H_
#define YALI_PERF_ALLTOALLV_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "alltoallv_plan.h"
#include "json_writer.h"
#include "perf_args.h"
#include "sample_stats.h"

namespace yali_perf {

// One column of one line: one form on one library.
struct VarCell {
  enum class State {
    kNotRun,    // its library is not in this run (--impl, NCCL not built); `note` says which
    kSkipped,   // its library refused the call (nothing ran); `note` is the refusal
    kMeasured,
  };
  State state = State::kNotRun;
  std::string note;
  TimingMode timing = TimingMode::kEvents;  // how it was timed (-G: the host-count forms eagerly)
  double time_us = 0;
  double algbw_gbs = 0;
  bool checked = false;
  uint64_t wrong = 0;
  int iters = 0;
  int warmup = 0;
  std::vector<double> samples_us;
  SampleStats stats;
};

struct VarLine {
  DType dtype = DType::kBfloat16;
  TokenDist dist = TokenDist::kUniform;
  size_t tokens = 0;  // per rank
  int run = 1;        // the pass of --repeat
  size_t rows_per_rank = 0;   // rows each rank sends (tokens x topk)
  size_t bytes_per_rank = 0;  // rows_per_rank x row bytes
  size_t max_recv_rows = 0;   // rows the busiest rank receives
  size_t capacity_rows = 0;   // the dispatch's capacityRows
  double skew = 1;            // ReceiveSkew
  std::vector<VarCell> cells;  // one per VarColumns(), in its order
};

// Column `over`'s time / column `under`'s; negative when either was not measured.
double LineRatio(const VarLine& line, const VarRatio& ratio);

// The comment line above a block of lines: "# alltoallv, zipf (s 1.00), bfloat16: 256 experts
// (32 per rank), top-8, hidden 7168 (14336 B rows), align 1".
std::string VarBlockHeading(const AlltoAllvArgs& args, TokenDist dist, DType dtype, int nranks);

// The table's two header lines.
std::string VarTableHeader();

std::string VarTableRow(const VarLine& line);

// The JSON's "alltoallv" object: the shape of the run, what each column calls, and every line
// with each column's time, algbw, #wrong, counts and statistics.
void WriteVarJson(JsonWriter& json, const AlltoAllvArgs& args, int nranks,
                  const std::vector<VarLine>& lines);

}  // namespace yali_perf

#endif  // YALI_PERF_ALLTOALLV_REPORT_H_
