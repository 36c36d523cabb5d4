#include "alltoallv_report.h"

#include "report.h"
#include "text_format.h"

namespace yali_perf {
namespace {

// The column whose algbw the table prints ("disp algbw"; the JSON has every column's): YALI's MoE
// call.
constexpr const char* kBandwidthColumn = "dispatch";

// The widths of the table, shared by the header and the rows so that they stay aligned.
std::string SizeColumns(const char* tokens, const char* rows, const char* bytes,
                        const char* max_recv, const char* skew) {
  return Format("#%6s %10s %14s %10s %9s", tokens, rows, bytes, max_recv, skew);
}

std::string CellColumns(const std::string& time, const std::string& wrong) {
  return Format("  %10s %6s", time.c_str(), wrong.c_str());
}

std::string Ratio(double ratio) { return ratio < 0 ? "-" : Format("%.3f", ratio); }

const char* CellState(VarCell::State state) {
  switch (state) {
    case VarCell::State::kNotRun: return "not_run";
    case VarCell::State::kSkipped: return "skipped";
    case VarCell::State::kMeasured: return "measured";
  }
  return "?";
}

void WriteCell(JsonWriter& json, const VarColumn& column, const VarCell& cell) {
  const bool measured = cell.state == VarCell::State::kMeasured;
  json.BeginObject();
  json.Key("impl"); json.String(column.impl);
  json.Key("form"); json.String(VarFormName(column.form));
  json.Key("call"); json.String(column.call);
  json.Key("host_round_trip"); json.Bool(column.host_round_trip);
  json.Key("status"); json.String(CellState(cell.state));
  json.Key("reason");
  if (measured) json.Null(); else json.String(cell.note);
  json.Key("timing");
  if (measured) json.String(TimingModeName(cell.timing)); else json.Null();
  json.Key("iters");
  if (measured) json.Int(cell.iters); else json.Null();
  json.Key("warmup");
  if (measured) json.Int(cell.warmup); else json.Null();
  json.Key("time_us");
  if (measured) json.Double(cell.time_us); else json.Null();
  json.Key("algbw_gbs");
  if (measured) json.Double(cell.algbw_gbs); else json.Null();
  json.Key("wrong");
  if (measured && cell.checked) json.UInt(cell.wrong); else json.Null();
  json.Key("stats_us");
  if (measured) WriteSampleStats(json, cell.stats); else json.Null();
  json.Key("samples_us");
  if (!measured) {
    json.Null();
  } else if (cell.samples_us.size() > kMaxJsonSamples) {
    json.DoubleArray(std::vector<double>(cell.samples_us.begin(),
                                         cell.samples_us.begin() + kMaxJsonSamples));
  } else {
    json.DoubleArray(cell.samples_us);
  }
  json.EndObject();
}

}  // namespace

double LineRatio(const VarLine& line, const VarRatio& ratio) {
  const int over = VarColumnIndex(ratio.over);
  const int under = VarColumnIndex(ratio.under);
  if (over < 0 || under < 0 || static_cast<size_t>(over) >= line.cells.size() ||
      static_cast<size_t>(under) >= line.cells.size())
    return -1;
  const VarCell& a = line.cells[over];
  const VarCell& b = line.cells[under];
  if (a.state != VarCell::State::kMeasured || b.state != VarCell::State::kMeasured ||
      !(b.time_us > 0))
    return -1;
  return a.time_us / b.time_us;
}

std::string VarBlockHeading(const AlltoAllvArgs& args, TokenDist dist, DType dtype, int nranks) {
  std::string shape = TokenDistName(dist);
  if (dist == TokenDist::kZipf) shape += Format(" (s %.2f)", args.zipf_s);
  if (dist == TokenDist::kHot)
    shape += Format(" (rank %d's experts weigh %.2f)", kHotRank, args.hot_share);
  const size_t row_bytes = args.hidden * ElementSize(dtype);
  return Format("# alltoallv, %s, %s: %d experts (%d per rank), top-%d, hidden %zu (%zu B rows), "
                "align %zu\n",
                shape.c_str(), DTypeName(dtype), args.experts, args.experts / nranks, args.topk,
                args.hidden, row_bytes, args.align_rows);
}

std::string VarTableHeader() {
  // No spaces inside a heading, so that every line splits into the same fields.
  std::string first = SizeColumns("tokens", "rows", "bytes", "recv", "skew");
  std::string second = SizeColumns("/rank", "sent/rank", "(B)/rank", "(rows,max)", "(max/avg)");
  for (const VarColumn& column : VarColumns()) {
    first += Format("  %-17s", column.name);
    second += CellColumns("(us)", "#wrong");
  }
  first += Format("  %10s", "disp_algbw");
  second += Format("  %10s", "(GB/s)");
  for (const VarRatio& ratio : VarRatios()) {
    first += Format(" %9s", ratio.name);
    second += Format(" %9s", "");
  }
  return first + "\n" + second + "\n";
}

std::string VarTableRow(const VarLine& line) {
  std::string text = Format(" %6zu %10zu %14zu %10zu %9.2f", line.tokens, line.rows_per_rank,
                            line.bytes_per_rank, line.max_recv_rows, line.skew);
  for (const VarCell& cell : line.cells) {
    switch (cell.state) {
      case VarCell::State::kNotRun: text += CellColumns("-", "-"); break;
      case VarCell::State::kSkipped: text += CellColumns("skipped", "-"); break;
      case VarCell::State::kMeasured:
        text += CellColumns(Format("%.2f", cell.time_us),
                            cell.checked ? std::to_string(cell.wrong) : "N/A");
        break;
    }
  }
  const int bandwidth = VarColumnIndex(kBandwidthColumn);
  const bool measured = bandwidth >= 0 && static_cast<size_t>(bandwidth) < line.cells.size() &&
                        line.cells[bandwidth].state == VarCell::State::kMeasured;
  const std::string algbw = measured ? Format("%.2f", line.cells[bandwidth].algbw_gbs) : "-";
  text += Format("  %10s", algbw.c_str());
  for (const VarRatio& ratio : VarRatios())
    text += Format(" %9s", Ratio(LineRatio(line, ratio)).c_str());
  return text + "\n";
}

void WriteVarJson(JsonWriter& json, const AlltoAllvArgs& args, int nranks,
                  const std::vector<VarLine>& lines) {
  json.BeginObject();
  json.Key("hidden"); json.UInt(args.hidden);
  json.Key("topk"); json.Int(args.topk);
  json.Key("experts"); json.Int(args.experts);
  json.Key("local_experts"); json.Int(args.experts / nranks);
  json.Key("align_rows"); json.UInt(args.align_rows);
  json.Key("seed"); json.UInt(args.seed);
  json.Key("zipf_s"); json.Double(args.zipf_s);
  json.Key("hot_share"); json.Double(args.hot_share);
  json.Key("hot_rank"); json.Int(kHotRank);
  json.Key("algbw");
  json.String("bytes_per_rank / time: the rows each rank sends, its own included");
  json.Key("lines");
  json.BeginArray();
  for (const VarLine& line : lines) {
    json.BeginObject();
    json.Key("dtype"); json.String(DTypeName(line.dtype));
    json.Key("distribution"); json.String(TokenDistName(line.dist));
    json.Key("tokens"); json.UInt(line.tokens);
    json.Key("run"); json.Int(line.run);
    json.Key("row_bytes"); json.UInt(args.hidden * ElementSize(line.dtype));
    json.Key("rows_per_rank"); json.UInt(line.rows_per_rank);
    json.Key("bytes_per_rank"); json.UInt(line.bytes_per_rank);
    json.Key("max_recv_rows"); json.UInt(line.max_recv_rows);
    json.Key("capacity_rows"); json.UInt(line.capacity_rows);
    json.Key("skew"); json.Double(line.skew);
    json.Key("columns");
    json.BeginObject();
    const std::vector<VarColumn>& columns = VarColumns();
    for (size_t c = 0; c < columns.size() && c < line.cells.size(); ++c) {
      json.Key(columns[c].name);
      WriteCell(json, columns[c], line.cells[c]);
    }
    json.EndObject();
    json.Key("ratios");
    json.BeginObject();
    for (const VarRatio& ratio : VarRatios()) {
      const double value = LineRatio(line, ratio);
      json.Key(ratio.name);
      if (value < 0) json.Null(); else json.Double(value);
    }
    json.EndObject();
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
}

}  // namespace yali_perf
