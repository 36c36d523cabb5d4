#include "report.h"
#include "text_format.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "coll_shape.h"
#include "json_writer.h"

namespace yali_perf {
namespace {


std::string PlacementColumns(const ResultRecord* record) {
  if (record == nullptr) return Format("  %9s %8s %8s %7s", "-", "-", "-", "-");
  std::string wrong = record->checked ? std::to_string(record->wrong) : "N/A";
  return Format("  %9.2f %8.2f %8.2f %7s", record->time_us, record->algbw_gbs, record->busbw_gbs,
                wrong.c_str());
}

std::string Ratio(double ratio) { return ratio < 0 ? "-" : Format("%.3f", ratio); }

}  // namespace

void WriteSampleStats(JsonWriter& json, const SampleStats& stats) {
  json.BeginObject();
  json.Key("mean"); json.Double(stats.mean);
  json.Key("std"); json.Double(stats.std);
  json.Key("min"); json.Double(stats.min);
  json.Key("max"); json.Double(stats.max);
  json.Key("p50"); json.Double(stats.p50);
  json.Key("p90"); json.Double(stats.p90);
  json.Key("p95"); json.Double(stats.p95);
  json.Key("p99"); json.Double(stats.p99);
  json.Key("n"); json.UInt(stats.n);
  json.EndObject();
}

double AlgorithmBandwidth(size_t bytes, double time_us) {
  if (time_us <= 0) return 0;
  return static_cast<double>(bytes) / (time_us * 1e-6) / 1e9;
}

std::string TableHeader() {
  std::string first = Format("#%6s %12s %12s %9s %6s  %9s %8s %8s %7s  %9s %8s %8s %7s  %-18s %8s %8s",
                             "impl", "size", "count", "type", "redop", "time", "algbw", "busbw",
                             "#wrong", "time", "algbw", "busbw", "#wrong", "algo", "nccl/", "nccl/");
  std::string second = Format("#%6s %12s %12s %9s %6s  %9s %8s %8s %7s  %9s %8s %8s %7s  %-18s %8s %8s",
                              "", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "",
                              "(us)", "(GB/s)", "(GB/s)", "", "(name/ctas)", "yali", "yali");
  // The arrows span the four columns of each placement (35 characters).
  std::string third = Format("#%6s %12s %12s %9s %6s  %-35s  %-35s  %-18s %8s %8s", "", "", "", "",
                             "", "<---------- out-of-place --------->",
                             "<------------ in-place ----------->", "", "(oop)", "(ip)");
  return first + "\n" + second + "\n" + third + "\n";
}

std::string RedOpLabel(const ResultRecord& record) {
  return record.has_op ? RedOpName(record.op) : "none";
}

std::string TableRow(const std::string& impl, size_t bytes, size_t count, DType dtype,
                     const std::string& redop, const ResultRecord* out_of_place,
                     const ResultRecord* in_place, const std::string& algo_label,
                     double ratio_out_of_place, double ratio_in_place) {
  return Format(" %6s %12zu %12zu %9s %6s", impl.c_str(), bytes, count, DTypeName(dtype),
                redop.c_str()) +
         PlacementColumns(out_of_place) + PlacementColumns(in_place) +
         Format("  %-18s %8s %8s\n", algo_label.c_str(), Ratio(ratio_out_of_place).c_str(),
                Ratio(ratio_in_place).c_str());
}

std::string AlgoLabel(const ResultRecord& record) {
  if (!record.algo_known) return "-";
  return record.algo + "/" + std::to_string(record.ctas);
}

std::string PercentileTable(const std::vector<ResultRecord>& records) {
  std::string text =
      "#\n# Per-iteration times (us), each iteration's slowest rank:\n" +
      Format("#%6s %12s %9s %6s %13s %4s %7s %9s %9s %9s %9s %9s %9s %9s %9s\n", "impl", "size",
             "type", "redop", "placement", "run", "n", "min", "p50", "p90", "p95", "p99", "max",
             "mean", "std");
  // Block headings only when there is more than one block (or a root to name), so that a plain
  // allreduce run prints the table it always did.
  bool headings = false;
  for (const ResultRecord& r : records)
    headings = headings || r.root >= 0 || r.collective != records[0].collective;
  std::string block;
  for (const ResultRecord& r : records) {
    const SampleStats& s = r.stats;
    const std::string this_block =
        "# " + r.collective + (r.root >= 0 ? ", root " + std::to_string(r.root) : "") + "\n";
    if (headings && this_block != block) text += this_block;
    block = this_block;
    text += Format(" %6s %12zu %9s %6s %13s %4d %7zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f"
                   " %9.2f\n",
                   r.impl.c_str(), r.bytes, DTypeName(r.dtype), RedOpLabel(r).c_str(),
                   r.in_place ? "in-place" : "out-of-place", r.run, s.n, s.min, s.p50, s.p90,
                   s.p95, s.p99, s.max, s.mean, s.std);
  }
  return text;
}

std::string BlockHeading(CollId coll, int root) {
  std::string text = std::string("# ") + CollDescription(coll);
  if (CollHasRoot(coll)) text += ", root " + std::to_string(root);
  return text + " (busbw = algbw * " + BusFactorText(coll) + ")\n";
}

std::string FormatJson(const RunInfo& info, const std::vector<ResultRecord>& records,
                       const std::function<void(JsonWriter&)>& extra) {
  JsonWriter json;
  json.BeginObject();
  json.Key("schema"); json.String("yali-perf/1");
  json.Key("collective"); json.String(info.collective);
  json.Key("date"); json.String(info.date);
  json.Key("hostname"); json.String(info.hostname);
  json.Key("command"); json.String(info.command);
  json.Key("nranks"); json.Int(info.nranks);
  json.Key("launch_mode"); json.String(info.multi_process ? "multi" : "single");
  json.Key("timing"); json.String(TimingModeName(info.timing));
  json.Key("iters"); json.Int(info.iters);
  json.Key("warmup"); json.Int(info.warmup);
  json.Key("graph_launches"); json.Int(info.graph_launches);
  json.Key("repeat"); json.Int(info.repeat);
  json.Key("max_case_time_s");
  if (info.max_case_seconds > 0) json.Double(info.max_case_seconds); else json.Null();
  json.Key("registered"); json.Int(info.registered);
  json.Key("average"); json.Int(info.average);
  json.Key("nccl_cta_policy");
  if (info.nccl_cta_policy >= 0) json.Int(info.nccl_cta_policy); else json.Null();
  json.Key("nccl_memory"); json.String(info.nccl_own_memory ? "own" : "shared");
  json.Key("environment");
  json.BeginArray();
  for (const std::string& v : info.environment) json.String(v);
  json.EndArray();
  json.Key("nccl_registration_note");
  if (info.nccl_registration_note.empty()) json.Null(); else json.String(info.nccl_registration_note);
  json.Key("gpus");
  json.BeginArray();
  for (const GpuInfo& gpu : info.gpus) {
    json.BeginObject();
    json.Key("rank"); json.Int(gpu.rank);
    json.Key("device"); json.Int(gpu.device);
    json.Key("name"); json.String(gpu.name);
    json.Key("pci_bus_id"); json.String(gpu.pci_bus_id);
    json.EndObject();
  }
  json.EndArray();
  json.Key("yali_version");
  if (info.yali_version >= 0) json.Int(info.yali_version); else json.Null();
  json.Key("nccl_version");
  if (info.nccl_version >= 0) json.Int(info.nccl_version); else json.Null();
  json.Key("results");
  json.BeginArray();
  for (const ResultRecord& r : records) {
    json.BeginObject();
    json.Key("impl"); json.String(r.impl);
    json.Key("collective"); json.String(r.collective);
    json.Key("dtype"); json.String(DTypeName(r.dtype));
    json.Key("redop"); json.String(RedOpLabel(r));
    json.Key("root");
    if (r.root >= 0) json.Int(r.root); else json.Null();
    json.Key("bytes"); json.UInt(r.bytes);
    json.Key("count"); json.UInt(r.count);
    json.Key("placement"); json.String(r.in_place ? "in-place" : "out-of-place");
    json.Key("run"); json.Int(r.run);
    json.Key("iters"); json.Int(r.iters);
    json.Key("warmup"); json.Int(r.warmup);
    json.Key("time_us"); json.Double(r.time_us);
    json.Key("host_issue_us");
    if (r.host_issue_us > 0) json.Double(r.host_issue_us); else json.Null();
    json.Key("algbw_gbs"); json.Double(r.algbw_gbs);
    json.Key("busbw_gbs"); json.Double(r.busbw_gbs);
    json.Key("wrong");
    if (r.checked) json.UInt(r.wrong); else json.Null();
    json.Key("algo");
    if (r.algo_known) json.String(r.algo); else json.Null();
    json.Key("ctas");
    if (r.algo_known) json.Int(r.ctas); else json.Null();
    json.Key("stats_us");
    WriteSampleStats(json, r.stats);
    json.Key("samples_us");
    if (r.samples_us.size() > kMaxJsonSamples) {
      json.DoubleArray(std::vector<double>(r.samples_us.begin(),
                                           r.samples_us.begin() + kMaxJsonSamples));
    } else {
      json.DoubleArray(r.samples_us);
    }
    json.EndObject();
  }
  json.EndArray();
  json.Key("skipped");
  json.BeginArray();
  for (const SkipRecord& k : info.skipped) {
    json.BeginObject();
    json.Key("impl"); json.String(k.impl);
    json.Key("collective"); json.String(k.collective);
    json.Key("dtype"); json.String(DTypeName(k.dtype));
    json.Key("redop"); json.String(k.redop);
    json.Key("root");
    if (k.root >= 0) json.Int(k.root); else json.Null();
    json.Key("bytes");
    if (k.every_size) json.Null(); else json.UInt(k.bytes);
    json.Key("count");
    if (k.every_size) json.Null(); else json.UInt(k.count);
    json.Key("placement");
    if (k.placement.empty()) json.Null(); else json.String(k.placement);
    json.Key("run"); json.Int(k.run);
    json.Key("reason"); json.String(k.reason);
    json.EndObject();
  }
  json.EndArray();
  if (info.max_bytes_auto) {
    json.Key("max_message");
    json.BeginObject();
    json.Key("buffer_bytes"); json.UInt(info.buffer_bytes);
    json.Key("largest");
    json.BeginArray();
    for (const LargestRecord& l : info.largest) {
      json.BeginObject();
      json.Key("collective"); json.String(l.collective);
      json.Key("impl"); json.String(l.impl);
      json.Key("dtype"); json.String(DTypeName(l.dtype));
      json.Key("bytes"); json.UInt(l.bytes);
      json.Key("count"); json.UInt(l.count);
      json.Key("wrong");
      if (l.checked) json.UInt(l.wrong); else json.Null();
      json.EndObject();
    }
    json.EndArray();
    json.EndObject();
  }
  if (extra) extra(json);
  json.EndObject();
  return json.text();
}

}  // namespace yali_perf
