#include "perf_args.h"
#include "tune_plan.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace yali_perf {
namespace {

// One option of the table below. `short_name` is 0 for long-only options.
struct OptionSpec {
  char short_name;
  const char* long_name;
  const char* alt_long_name;  // nccl-tests' spelling, where it differs from ours
  bool takes_value;
};

constexpr OptionSpec kOptions[] = {
    {'b', "minbytes", nullptr, true},       {'e', "maxbytes", nullptr, true},
    {'f', "stepfactor", nullptr, true},     {'i', "stepbytes", nullptr, true},
    {'g', "ngpus", nullptr, true},          {'n', "iters", nullptr, true},
    {'w', "warmup", "warmup_iters", true},  {'c', "check", nullptr, true},
    {'d', "dtype", "datatype", true},       {'o', "op", nullptr, true},
    {'G', "graphlaunches", "cudagraph", true}, {'J', "json", "output_file", true},
    {'a', "average", nullptr, true},        {'R', "registered", "local_register", true},
    {0, "impl", nullptr, true},             {0, "timing", nullptr, true},
    {0, "inplace", nullptr, true},          {0, "percentiles", nullptr, false},
    {0, "repeat", nullptr, true},           {0, "max-case-time", nullptr, true},
    {0, "tune", nullptr, false},            {0, "tune-out", nullptr, true},
    {0, "tune-colls", nullptr, true},
    {'C', "coll", "collective", true},     {'r', "root", nullptr, true},
    {'x', "cta-policy", "cta_policy", true},
    {0, "nccl-memory", nullptr, true},
    // -C alltoallv's shape (AlltoAllvArgs); kAlltoAllvOptions below names them.
    {0, "tokens", nullptr, true},           {0, "hidden", nullptr, true},
    {0, "topk", nullptr, true},             {0, "experts", nullptr, true},
    {0, "dist", nullptr, true},             {0, "zipf-s", nullptr, true},
    {0, "hot-share", nullptr, true},        {0, "align", nullptr, true},
    {0, "seed", nullptr, true},
    {'h', "help", nullptr, false},
};

// The options that only -C alltoallv reads.
constexpr const char* kAlltoAllvOptions[] = {"tokens", "dist",      "hidden", "topk", "experts",
                                             "zipf-s", "hot-share", "align",  "seed"};

// Bounds of --tokens (per rank), --align and --hidden: far beyond any MoE layer, small enough that
// the host can hold the reference (every process keeps the ids of every rank's rows: 8 bytes per
// row, tokens x topk x nranks rows) and that sizes stay well inside 64 bits.
constexpr size_t kMaxTokens = size_t(1) << 20;
constexpr size_t kMaxHidden = size_t(1) << 24;
// The library's limits on experts (yali.h: YALI_MAX_EXPERTS); the benchmark refuses more up
// front rather than time a refusal.
constexpr long kMaxExperts = 1024;

const OptionSpec* FindShort(char c) {
  for (const OptionSpec& spec : kOptions)
    if (spec.short_name != 0 && spec.short_name == c) return &spec;
  return nullptr;
}

const OptionSpec* FindLong(const std::string& name) {
  for (const OptionSpec& spec : kOptions) {
    if (name == spec.long_name) return &spec;
    if (spec.alt_long_name != nullptr && name == spec.alt_long_name) return &spec;
  }
  return nullptr;
}

bool ParseInt(const std::string& text, long min_value, long max_value, long* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long parsed = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  if (parsed < min_value || parsed > max_value) return false;
  *value = parsed;
  return true;
}

bool ParseDouble(const std::string& text, double* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double parsed = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  *value = parsed;
  return true;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream stream(text);
  while (std::getline(stream, part, ',')) parts.push_back(part);
  if (!text.empty() && text.back() == ',') parts.push_back("");
  return parts;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

template <typename T>
void AppendUnique(std::vector<T>* list, T value) {
  for (const T& existing : *list)
    if (existing == value) return;
  list->push_back(value);
}

// -d's names: nccl-tests' (DTypeName), NCCL's C names without the prefix, and the usual short
// spellings.
bool DTypeFromName(const std::string& name, DType* dtype) {
  static const struct {
    const char* name;
    DType dtype;
  } kNames[] = {
      {"int8", DType::kInt8},        {"char", DType::kInt8},         {"uint8", DType::kUint8},
      {"int32", DType::kInt32},      {"int", DType::kInt32},         {"uint32", DType::kUint32},
      {"int64", DType::kInt64},      {"uint64", DType::kUint64},     {"half", DType::kHalf},
      {"fp16", DType::kHalf},        {"float16", DType::kHalf},      {"float", DType::kFloat},
      {"fp32", DType::kFloat},       {"float32", DType::kFloat},     {"double", DType::kDouble},
      {"fp64", DType::kDouble},      {"float64", DType::kDouble},    {"bfloat16", DType::kBfloat16},
      {"bf16", DType::kBfloat16},    {"f8e4m3", DType::kF8e4m3},     {"fp8e4m3", DType::kF8e4m3},
      {"float8e4m3", DType::kF8e4m3}, {"e4m3", DType::kF8e4m3},      {"f8e5m2", DType::kF8e5m2},
      {"fp8e5m2", DType::kF8e5m2},   {"float8e5m2", DType::kF8e5m2}, {"e5m2", DType::kF8e5m2},
  };
  for (const auto& entry : kNames) {
    if (name == entry.name) {
      *dtype = entry.dtype;
      return true;
    }
  }
  return false;
}

bool ParseDTypeList(const std::string& text, std::vector<DType>* dtypes) {
  std::vector<DType> parsed;
  for (const std::string& raw : SplitCommas(text)) {
    std::string name = Lower(raw);
    DType dtype;
    if (name == "all") {
      for (DType d : AllDTypes()) AppendUnique(&parsed, d);
    } else if (DTypeFromName(name, &dtype)) {
      AppendUnique(&parsed, dtype);
    } else {
      return false;
    }
  }
  if (parsed.empty()) return false;
  *dtypes = parsed;
  return true;
}

// -C: names as CollName prints them, with or without '_' and '-' (all_reduce, reduce-scatter,
// rsag), plus bcast.
bool ParseCollList(const std::string& text, std::vector<CollId>* collectives) {
  std::vector<CollId> parsed;
  for (const std::string& raw : SplitCommas(text)) {
    std::string name;
    for (char c : Lower(raw))
      if (c != '_' && c != '-') name += c;
    if (name == "all") {
      for (CollId coll : AllCollectives()) AppendUnique(&parsed, coll);
      continue;
    }
    if (name == "bcast") name = "broadcast";
    bool found = false;
    for (CollId coll : NamedCollectives()) {
      std::string known;
      for (const char* c = CollName(coll); *c != '\0'; ++c)
        if (*c != '_') known += *c;
      if (name == known) {
        AppendUnique(&parsed, coll);
        found = true;
      }
    }
    if (!found) return false;
  }
  if (parsed.empty()) return false;
  *collectives = parsed;
  return true;
}

// --tune-colls: ParseCollList's names among TunableCollectives(), plus all and none. AllReduce is
// always in the result, first (the line's mandatory keys are its), the others in the tune's order.
bool ParseTuneColls(const std::string& text, std::vector<CollId>* collectives) {
  std::vector<CollId> named;
  const std::vector<std::string> words = SplitCommas(text);
  if (words.empty()) return false;
  for (const std::string& raw : words) {
    const std::string word = Lower(raw);
    if (word.empty()) return false;
    if (word == "all") {
      named = TunableCollectives();
    } else if (word != "none") {
      std::vector<CollId> one;
      if (!ParseCollList(raw, &one) || one.size() != 1) return false;
      bool tunable = false;
      for (CollId coll : TunableCollectives()) tunable = tunable || coll == one[0];
      if (!tunable) return false;
      AppendUnique(&named, one[0]);
    }
  }
  std::vector<CollId> ordered;
  for (CollId coll : TunableCollectives()) {
    bool wanted = coll == CollId::kAllReduce;
    for (CollId n : named) wanted = wanted || n == coll;
    if (wanted) ordered.push_back(coll);
  }
  *collectives = ordered;
  return true;
}

bool ParseOpList(const std::string& text, std::vector<RedOp>* ops) {
  std::vector<RedOp> parsed;
  for (const std::string& raw : SplitCommas(text)) {
    std::string name = Lower(raw);
    if (name == "all") {
      for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg})
        AppendUnique(&parsed, op);
    } else if (name == "sum") {
      AppendUnique(&parsed, RedOp::kSum);
    } else if (name == "prod") {
      AppendUnique(&parsed, RedOp::kProd);
    } else if (name == "max") {
      AppendUnique(&parsed, RedOp::kMax);
    } else if (name == "min") {
      AppendUnique(&parsed, RedOp::kMin);
    } else if (name == "avg") {
      AppendUnique(&parsed, RedOp::kAvg);
    } else {
      return false;
    }
  }
  if (parsed.empty()) return false;
  *ops = parsed;
  return true;
}

// --tokens: a comma list of counts (4096, 4K) and ranges A:B, which double from A up to B (like
// the size sweep's -f 2).
bool ParseTokenList(const std::string& text, std::vector<size_t>* tokens) {
  std::vector<size_t> parsed;
  for (const std::string& item : SplitCommas(text)) {
    const size_t colon = item.find(':');
    size_t first = 0;
    size_t last = 0;
    if (!ParseSize(item.substr(0, colon), &first)) return false;
    last = first;
    if (colon != std::string::npos && !ParseSize(item.substr(colon + 1), &last)) return false;
    if (first < 1 || last < first || last > kMaxTokens) return false;
    for (size_t count = first; count <= last; count *= 2) AppendUnique(&parsed, count);
  }
  if (parsed.empty()) return false;
  *tokens = parsed;
  return true;
}

bool ParseDistList(const std::string& text, std::vector<TokenDist>* dists) {
  std::vector<TokenDist> parsed;
  for (const std::string& raw : SplitCommas(text)) {
    const std::string name = Lower(raw);
    bool found = false;
    for (TokenDist dist : {TokenDist::kUniform, TokenDist::kZipf, TokenDist::kHot}) {
      if (name != "all" && name != TokenDistName(dist)) continue;
      AppendUnique(&parsed, dist);
      found = true;
    }
    if (!found) return false;
  }
  if (parsed.empty()) return false;
  *dists = parsed;
  return true;
}

bool ParseImplList(const std::string& text, bool* run_yali, bool* run_nccl) {
  bool yali = false;
  bool nccl = false;
  for (const std::string& raw : SplitCommas(text)) {
    std::string name = Lower(raw);
    if (name == "yali") {
      yali = true;
    } else if (name == "nccl") {
      nccl = true;
    } else if (name == "all" || name == "both") {
      yali = nccl = true;
    } else {
      return false;
    }
  }
  if (!yali && !nccl) return false;
  *run_yali = yali;
  *run_nccl = nccl;
  return true;
}

bool ParseTimingMode(const std::string& text, TimingMode* mode) {
  std::string name = Lower(text);
  if (name == "events") {
    *mode = TimingMode::kEvents;
  } else if (name == "graph") {
    *mode = TimingMode::kGraph;
  } else if (name == "throughput") {
    *mode = TimingMode::kThroughput;
  } else if (name == "latency") {
    *mode = TimingMode::kLatency;
  } else {
    return false;
  }
  return true;
}

std::string OptionLabel(const OptionSpec& spec) {
  std::string label;
  if (spec.short_name != 0) label = std::string("-") + spec.short_name + "/";
  return label + "--" + spec.long_name;
}

// --tune fixes what it measures (tune.h): its own sizes, out-of-place sum, CUDA events, the
// slowest rank, every candidate checked. An option that would change one of these is refused
// rather than ignored, so that a table is never silently measured differently from what was asked.
bool CheckTuneOptions(const PerfArgs& parsed, const std::vector<const OptionSpec*>& given,
                      std::string* error) {
  for (const OptionSpec* spec : given) {
    const std::string name = spec->long_name;
    const char* why = nullptr;
    if (name == "minbytes" || name == "maxbytes" || name == "stepfactor" || name == "stepbytes") {
      why = "--tune picks its own message sizes";
    } else if ((name == "graphlaunches" || name == "timing") &&
               parsed.timing != TimingMode::kEvents) {
      why = "--tune times with CUDA events (--timing events)";
    } else if (name == "average" && parsed.average != RankAggregate::kMax) {
      why = "--tune takes the slowest rank's time (-a 3)";
    } else if (name == "coll" && !(parsed.collectives.size() == 1 &&
                                   parsed.collectives[0] == CollId::kAllReduce)) {
      why = "--tune names its collectives with --tune-colls";
    } else if (name == "root") {
      why = "--tune measures the rooted collectives with root 0";
    } else if (name == "inplace" && parsed.placements != PlacementSet::kOutOfPlace) {
      why = "--tune measures out-of-place only (--inplace 0)";
    } else if (name == "op" && !(parsed.ops.size() == 1 && parsed.ops[0] == RedOp::kSum)) {
      why = "--tune measures sum only";
    } else if (name == "impl" && parsed.run_nccl) {
      why = "--tune measures YALI only";
    } else if (name == "check" && !parsed.check) {
      why = "--tune checks every candidate (a wrong result rejects it)";
    } else if (name == "percentiles") {
      why = "--tune prints no percentile table";
    } else if (name == "repeat" && parsed.repeat != 1) {
      why = "--tune measures each candidate once";
    } else if (name == "max-case-time") {
      why = "--tune times every candidate with the same -n and -w";
    } else if (name == "cta-policy") {
      why = "--tune measures YALI only (-x sets NCCL's CTA policy)";
    } else if (name == "nccl-memory") {
      why = "--tune measures YALI only (--nccl-memory sets NCCL's buffers)";
    } else if (name == "registered" && parsed.registered) {
      // The direct rows' step registers the buffers itself, and only for that step.
      why = "--tune registers its buffers itself, for the *_direct_min steps only (-R 0)";
    }
    if (why != nullptr) {
      *error = "option " + OptionLabel(*spec) + " does not apply to --tune: " + why;
      return false;
    }
  }
  // One of the floating types it has always measured: the table's crossovers are in bytes and
  // serve every type, so the types that training reduces in are the ones to time.
  const DType tuned = parsed.dtypes[0];
  if (parsed.dtypes.size() != 1 ||
      !(tuned == DType::kFloat || tuned == DType::kHalf || tuned == DType::kBfloat16)) {
    *error = "--tune measures one dtype (-d float, half or bfloat16)";
    return false;
  }
  return true;
}

bool IsAlltoAllvOption(const OptionSpec& spec) {
  for (const char* name : kAlltoAllvOptions)
    if (std::string(spec.long_name) == name) return true;
  return false;
}

// -C alltoallv sizes its cases in tokens and runs every form once per line: the options of the
// byte sweep and of the other collectives are refused rather than ignored, and its own options
// are refused without it.
bool CheckAlltoAllvOptions(const PerfArgs& parsed, const std::vector<const OptionSpec*>& given,
                           std::string* error) {
  const bool alltoallv = std::find(parsed.collectives.begin(), parsed.collectives.end(),
                                   CollId::kAlltoAllv) != parsed.collectives.end();
  if (alltoallv && parsed.collectives.size() > 1) {
    *error = "-C alltoallv runs alone: its cases are sized in tokens (--tokens), not by -b/-e, and "
             "it has a table of its own";
    return false;
  }
  const AlltoAllvArgs& a = parsed.alltoallv;
  bool zipf_given = false;
  bool hot_given = false;
  for (const OptionSpec* spec : given) {
    const std::string name = spec->long_name;
    zipf_given = zipf_given || name == "zipf-s";
    hot_given = hot_given || name == "hot-share";
    if (!alltoallv) {
      if (IsAlltoAllvOption(*spec)) {
        *error = "option " + OptionLabel(*spec) + " applies to -C alltoallv only";
        return false;
      }
      continue;
    }
    const char* why = nullptr;
    if (name == "minbytes" || name == "maxbytes" || name == "stepfactor" || name == "stepbytes") {
      why = "its sizes are --tokens x --hidden x dtype";
    } else if (name == "op") {
      why = "it reduces nothing";
    } else if (name == "root") {
      why = "it has no root";
    } else if (name == "inplace") {
      why = "it never runs in place (yali.h)";
    } else if (name == "percentiles") {
      why = "its per-iteration statistics are in the JSON (-J)";
    } else if (name == "registered" && parsed.registered == 2) {
      why = "NCCL's side is grouped send/recv, which symmetric windows do not serve (-R 0 or 1)";
    }
    if (why != nullptr) {
      *error = "option " + OptionLabel(*spec) + " does not apply to -C alltoallv: " + why;
      return false;
    }
  }
  if (!alltoallv) return true;
  auto has = [&](TokenDist dist) {
    return std::find(a.dists.begin(), a.dists.end(), dist) != a.dists.end();
  };
  if (zipf_given && !has(TokenDist::kZipf)) {
    *error = "--zipf-s needs --dist zipf";
    return false;
  }
  if (hot_given && !has(TokenDist::kHot)) {
    *error = "--hot-share needs --dist hot";
    return false;
  }
  if (a.topk > a.experts) {
    *error = "--topk " + std::to_string(a.topk) + " is more than --experts " +
             std::to_string(a.experts) + " (each token picks distinct experts)";
    return false;
  }
  return true;
}

}  // namespace

bool RunsAlltoAllv(const PerfArgs& args) {
  return args.collectives.size() == 1 && args.collectives[0] == CollId::kAlltoAllv;
}

bool ParseSize(const std::string& text, size_t* bytes) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 20) return false;
  errno = 0;
  unsigned long long value = std::strtoull(text.substr(0, digits).c_str(), nullptr, 10);
  if (errno != 0) return false;
  std::string suffix = Lower(text.substr(digits));
  // Accept the unit letter alone or followed by "b" / "ib": 4K, 4KB, 4KiB are all 4096.
  unsigned shift = 0;
  if (!suffix.empty() && suffix != "b") {
    switch (suffix[0]) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      default: return false;
    }
    std::string rest = suffix.substr(1);
    if (!rest.empty() && rest != "b" && rest != "ib") return false;
  }
  if (shift > 0 && value > (std::numeric_limits<unsigned long long>::max() >> shift)) return false;
  *bytes = static_cast<size_t>(value << shift);
  return true;
}

bool ParsePerfArgs(int argc, const char* const* argv, PerfArgs* args, std::string* error) {
  PerfArgs parsed;
  parsed.tune_colls = TunableCollectives();
  bool factor_given = false;
  bool step_bytes_given = false;
  bool timing_given = false;
  bool graph_given = false;
  bool tune_out_given = false;
  bool tune_colls_given = false;
  bool dtype_given = false;
  std::vector<const OptionSpec*> given;  // in command-line order, for the --tune checks

  for (int index = 1; index < argc; ++index) {
    std::string arg = argv[index];
    const OptionSpec* spec = nullptr;
    std::string value;
    bool value_inline = false;
    if (arg.size() > 2 && arg[0] == '-' && arg[1] == '-') {
      std::string name = arg.substr(2);
      size_t equals = name.find('=');
      if (equals != std::string::npos) {
        value = name.substr(equals + 1);
        name = name.substr(0, equals);
        value_inline = true;
      }
      spec = FindLong(name);
      if (spec == nullptr) {
        *error = "unknown option '" + arg + "' (see -h)";
        return false;
      }
    } else if (arg.size() >= 2 && arg[0] == '-') {
      spec = FindShort(arg[1]);
      if (spec == nullptr) {
        *error = "unknown option '" + arg + "' (see -h)";
        return false;
      }
      if (arg.size() > 2) {
        value = arg.substr(2);
        value_inline = true;
      }
    } else {
      *error = "unexpected argument '" + arg + "' (options start with '-'; see -h)";
      return false;
    }

    if (spec->takes_value && !value_inline) {
      if (index + 1 >= argc) {
        *error = "option " + OptionLabel(*spec) + " needs a value";
        return false;
      }
      value = argv[++index];
    } else if (!spec->takes_value && value_inline) {
      *error = "option " + OptionLabel(*spec) + " takes no value";
      return false;
    }

    given.push_back(spec);
    const std::string label = OptionLabel(*spec);
    const std::string name = spec->long_name;
    long number = 0;
    auto bad = [&](const char* expected) {
      *error = "bad value '" + value + "' for " + label + ": expected " + expected;
      return false;
    };

    if (name == "maxbytes" && Lower(value) == "max") {
      parsed.max_bytes_auto = true;
    } else if (name == "minbytes" || name == "maxbytes" || name == "stepbytes") {
      size_t bytes = 0;
      if (!ParseSize(value, &bytes)) {
        return bad(name == "maxbytes" ? "a size such as 4096, 64K, 32M or 1G, or max"
                                      : "a size such as 4096, 64K, 32M or 1G");
      }
      if (name == "minbytes") parsed.min_bytes = bytes;
      if (name == "maxbytes") {
        parsed.max_bytes = bytes;
        parsed.max_bytes_auto = false;  // the last -e wins, as for every option
      }
      if (name == "stepbytes") {
        if (bytes == 0) return bad("a size > 0");
        parsed.step_bytes = bytes;
        step_bytes_given = true;
      }
    } else if (name == "stepfactor") {
      double factor = 0;
      if (!ParseDouble(value, &factor) || factor < 1.0 || factor > 1e6)
        return bad("a number >= 1 (1 means: add -i bytes instead)");
      parsed.step_factor = factor;
      factor_given = true;
    } else if (name == "ngpus") {
      if (!ParseInt(value, 1, 1024, &number)) return bad("an integer >= 1");
      parsed.ngpus = static_cast<int>(number);
    } else if (name == "iters") {
      if (!ParseInt(value, 1, 100000000, &number)) return bad("an integer >= 1");
      parsed.iters = static_cast<int>(number);
    } else if (name == "warmup") {
      if (!ParseInt(value, 0, 100000000, &number)) return bad("an integer >= 0");
      parsed.warmup = static_cast<int>(number);
    } else if (name == "check") {
      if (!ParseInt(value, 0, 1, &number)) return bad("0 or 1");
      parsed.check = number != 0;
    } else if (name == "dtype") {
      if (!ParseDTypeList(value, &parsed.dtypes))
        return bad("float|fp32, half|fp16, bfloat16|bf16, all, or a comma list");
      dtype_given = true;
    } else if (name == "op") {
      if (!ParseOpList(value, &parsed.ops)) return bad("sum, prod, max, min, avg, all, or a comma list");
    } else if (name == "coll") {
      if (!ParseCollList(value, &parsed.collectives))
        return bad("allreduce, reducescatter, allgather, broadcast, reduce, gather, scatter, "
                   "alltoall, rs_ag, sendrecv, all, or a comma list; or alltoallv");
    } else if (name == "root") {
      if (Lower(value) == "all" || value == "-1") {
        parsed.root = kEveryRoot;
      } else {
        if (!ParseInt(value, 0, 1 << 20, &number)) return bad("a rank >= 0, or all (or -1)");
        parsed.root = static_cast<int>(number);
      }
    } else if (name == "graphlaunches") {
      if (!ParseInt(value, 0, 100000000, &number)) return bad("an integer >= 0");
      parsed.graph_launches = static_cast<int>(number);
      graph_given = number > 0;
    } else if (name == "json") {
      if (value.empty()) return bad("a file name");
      parsed.json_path = value;
    } else if (name == "average") {
      if (!ParseInt(value, 0, 3, &number))
        return bad("0 (rank 0), 1 (mean), 2 (min) or 3 (max) over ranks, as nccl-tests numbers them");
      parsed.average = static_cast<RankAggregate>(number);
    } else if (name == "registered") {
      if (!ParseInt(value, 0, 2, &number))
        return bad("0 (unregistered buffers), 1 (registered) or 2 (NCCL on symmetric windows)");
      parsed.registered = static_cast<int>(number);
    } else if (name == "cta-policy") {
      // nccl-tests' numbers, or NCCL's names (NCCL_CTA_POLICY_DEFAULT, _EFFICIENCY, _ZERO).
      const char* names[] = {"default", "efficiency", "zero"};
      parsed.nccl_cta_policy = -1;
      for (int i = 0; i < 3; ++i)
        if (value == names[i] || value == std::to_string(i)) parsed.nccl_cta_policy = i;
      if (parsed.nccl_cta_policy < 0) return bad("0 (default), 1 (efficiency) or 2 (zero)");
    } else if (name == "nccl-memory") {
      if (value == "own") parsed.nccl_own_memory = true;
      else if (value == "shared") parsed.nccl_own_memory = false;
      else return bad("own (NCCL on its own ncclMemAlloc buffers, as nccl-tests) or shared (on YALI's cudaMalloc buffers)");
    } else if (name == "impl") {
      if (!ParseImplList(value, &parsed.run_yali, &parsed.run_nccl))
        return bad("yali, nccl, or yali,nccl");
      parsed.impl_given = true;
    } else if (name == "timing") {
      if (!ParseTimingMode(value, &parsed.timing)) return bad("events, throughput, latency or graph");
      timing_given = true;
    } else if (name == "inplace") {
      if (!ParseInt(value, 0, 2, &number))
        return bad("0 (out-of-place only), 1 (in-place only) or 2 (both)");
      parsed.placements = static_cast<PlacementSet>(number);
    } else if (name == "percentiles") {
      parsed.percentiles = true;
    } else if (name == "repeat") {
      if (!ParseInt(value, 1, 100000, &number)) return bad("an integer >= 1");
      parsed.repeat = static_cast<int>(number);
    } else if (name == "max-case-time") {
      double seconds = 0;
      if (!ParseDouble(value, &seconds) || !std::isfinite(seconds) || seconds <= 0)
        return bad("seconds > 0, such as 0.02 (leave the option out for no limit)");
      parsed.max_case_seconds = seconds;
    } else if (name == "tune") {
      parsed.tune = true;
    } else if (name == "tune-out") {
      if (value.empty()) return bad("a file name");
      parsed.tune_out = value;
      tune_out_given = true;
    } else if (name == "tune-colls") {
      if (!ParseTuneColls(value, &parsed.tune_colls))
        return bad("allreduce, reducescatter, allgather, broadcast, reduce, gather, scatter, "
                   "alltoall, all or none, or a comma list (allreduce is always tuned)");
      tune_colls_given = true;
    } else if (name == "tokens") {
      if (!ParseTokenList(value, &parsed.alltoallv.tokens))
        return bad("tokens per rank: a count such as 4096 or 4K, a range A:B (doubling), or a "
                   "comma list");
    } else if (name == "hidden") {
      size_t hidden = 0;
      if (!ParseSize(value, &hidden) || hidden < 1 || hidden > kMaxHidden)
        return bad("elements per row, >= 1, such as 7168");
      parsed.alltoallv.hidden = hidden;
    } else if (name == "topk") {
      if (!ParseInt(value, 1, kMaxExperts, &number)) return bad("an integer >= 1");
      parsed.alltoallv.topk = static_cast<int>(number);
    } else if (name == "experts") {
      if (!ParseInt(value, 1, kMaxExperts, &number))
        return bad("an integer from 1 to 1024 (YALI_MAX_EXPERTS), a multiple of the ranks");
      parsed.alltoallv.experts = static_cast<int>(number);
    } else if (name == "dist") {
      if (!ParseDistList(value, &parsed.alltoallv.dists))
        return bad("uniform, zipf, hot, all, or a comma list");
    } else if (name == "zipf-s") {
      double exponent = 0;
      if (!ParseDouble(value, &exponent) || !std::isfinite(exponent) || exponent < 0 ||
          exponent > 16)
        return bad("an exponent from 0 (uniform) to 16, such as 1.0");
      parsed.alltoallv.zipf_s = exponent;
    } else if (name == "hot-share") {
      double share = 0;
      if (!ParseDouble(value, &share) || !(share > 0) || !(share < 1))
        return bad("a fraction strictly between 0 and 1, such as 0.5");
      parsed.alltoallv.hot_share = share;
    } else if (name == "align") {
      size_t align = 0;
      if (!ParseSize(value, &align) || align < 1 || align > kMaxTokens)
        return bad("rows, >= 1, such as 1 or 128 (a grouped GEMM's tile)");
      parsed.alltoallv.align_rows = align;
    } else if (name == "seed") {
      unsigned long long seed = 0;
      char* end = nullptr;
      errno = 0;
      seed = std::strtoull(value.c_str(), &end, 0);
      if (value.empty() || value[0] == '-' || errno != 0 || end == nullptr || *end != '\0')
        return bad("an unsigned integer");
      parsed.alltoallv.seed = seed;
    } else if (name == "help") {
      parsed.help = true;
    }
  }

  // First: the sweep's own checks below mean nothing to alltoallv, which refuses its options.
  if (!CheckAlltoAllvOptions(parsed, given, error)) return false;

  // -G N (N > 0) asks for graph timing; an explicit different --timing is a contradiction.
  if (graph_given) {
    if (timing_given && parsed.timing != TimingMode::kGraph) {
      *error = std::string("-G ") + std::to_string(parsed.graph_launches) +
               " needs --timing graph (it was --timing " + TimingModeName(parsed.timing) + ")";
      return false;
    }
    parsed.timing = TimingMode::kGraph;
  } else if (parsed.timing == TimingMode::kGraph) {
    parsed.graph_launches = 1;
  }

  // nccl-tests' rule: a factor > 1 multiplies; otherwise the step is additive. Our default factor
  // is 4, so -i alone (without -f) switches to additive steps.
  if (step_bytes_given && !factor_given) parsed.step_factor = 1.0;
  if (!parsed.max_bytes_auto && parsed.min_bytes > parsed.max_bytes) {
    *error = "-b (" + std::to_string(parsed.min_bytes) + ") is larger than -e (" +
             std::to_string(parsed.max_bytes) + ")";
    return false;
  }
  if (parsed.step_factor <= 1.0 && parsed.step_bytes == 0) {
    *error = "the sweep needs -f > 1 or -i > 0";
    return false;
  }
  if (tune_out_given && !parsed.tune) {
    *error = "--tune-out needs --tune";
    return false;
  }
  if (tune_colls_given && !parsed.tune) {
    *error = "--tune-colls needs --tune";
    return false;
  }
  if (!parsed.nccl_own_memory && parsed.registered == 2) {
    *error = "--nccl-memory shared does not go with -R 2: NCCL's symmetric windows need its own "
             "ncclMemAlloc memory";
    return false;
  }
  if (parsed.tune && !CheckTuneOptions(parsed, given, error)) return false;
  // MoE layers exchange bf16 activations: alltoallv's default type.
  if (RunsAlltoAllv(parsed) && !dtype_given) parsed.dtypes = {DType::kBfloat16};
  *args = parsed;
  return true;
}

namespace {

// Sizes from args.min_bytes by args' step, up to `max_bytes` inclusive.
std::vector<size_t> SweepTo(const PerfArgs& args, size_t max_bytes) {
  // Bounded so that a tiny additive step over a large range cannot make the run endless.
  constexpr size_t kMaxSizes = 100000;
  std::vector<size_t> sizes;
  size_t size = args.min_bytes;
  while (size <= max_bytes && sizes.size() < kMaxSizes) {
    sizes.push_back(size);
    size_t next;
    if (args.step_factor > 1.0) {
      double scaled = static_cast<double>(size) * args.step_factor;
      if (scaled >= static_cast<double>(std::numeric_limits<size_t>::max())) break;
      next = static_cast<size_t>(scaled);
      if (next <= size) next = size + 1;  // a factor like 1.1 on size 0 or 1 must still move
    } else {
      if (size > std::numeric_limits<size_t>::max() - args.step_bytes) break;
      next = size + args.step_bytes;
    }
    size = next;
  }
  return sizes;
}

}  // namespace

std::vector<size_t> SizeSweep(const PerfArgs& args) {
  return SweepTo(args, args.max_bytes_auto ? std::numeric_limits<size_t>::max() : args.max_bytes);
}

std::vector<size_t> SizeSweepUpTo(const PerfArgs& args, size_t limit) {
  if (!args.max_bytes_auto) return SweepTo(args, std::min(args.max_bytes, limit));
  std::vector<size_t> sizes = SweepTo(args, limit);
  // -b above the limit leaves the limit alone: the one size that fits.
  if (sizes.empty() || sizes.back() < limit) sizes.push_back(limit);
  return sizes;
}

CallCounts CallCountsWithinTimeLimit(int iters, int warmup, double max_case_seconds,
                                     double seconds_per_call, double calls_per_iteration) {
  CallCounts counts;
  counts.iters = iters;
  counts.warmup = warmup;
  if (!(max_case_seconds > 0)) return counts;
  counts.warmup = std::max(warmup, kTimeLimitProbeCalls);  // the probe calls are made regardless
  // An estimate of zero (a clock too coarse for the call) cannot exceed any limit.
  if (!(seconds_per_call > 0) || !(calls_per_iteration > 0)) return counts;
  const double fitting = max_case_seconds / (seconds_per_call * calls_per_iteration);
  if (fitting >= iters) return counts;
  counts.iters = std::min(iters, std::max(kMinItersWithinTimeLimit, static_cast<int>(fitting)));
  // The warmup shrinks by the factor that would have fitted -n into the limit (not by the floored
  // count's factor), rounded up so that a -w > 0 keeps at least one call beyond the probe's.
  const double scale = fitting / iters;
  const int scaled_warmup = static_cast<int>(std::ceil(warmup * scale));
  counts.warmup = std::max(kTimeLimitProbeCalls, std::min(warmup, scaled_warmup));
  return counts;
}

double CallsPerIteration(TimingMode mode, int graph_launches) {
  switch (mode) {
    case TimingMode::kEvents: return 2.0;
    case TimingMode::kGraph: return 1.0 + std::max(1, graph_launches);
    case TimingMode::kThroughput: return 1.0;
    case TimingMode::kLatency: return 1.0;
  }
  return 1.0;
}

const std::vector<DType>& AllDTypes() {
  static const std::vector<DType> kAll = {
      DType::kInt8,  DType::kUint8,  DType::kInt32,    DType::kUint32,
      DType::kInt64, DType::kUint64, DType::kHalf,     DType::kFloat,
      DType::kDouble, DType::kBfloat16, DType::kF8e4m3, DType::kF8e5m2};
  return kAll;
}

bool IsFloating(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
    case DType::kHalf:
    case DType::kBfloat16:
    case DType::kDouble:
    case DType::kF8e4m3:
    case DType::kF8e5m2: return true;
    case DType::kInt8:
    case DType::kUint8:
    case DType::kInt32:
    case DType::kUint32:
    case DType::kInt64:
    case DType::kUint64: return false;
  }
  return false;
}

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kUint8:
    case DType::kF8e4m3:
    case DType::kF8e5m2: return 1;
    case DType::kHalf:
    case DType::kBfloat16: return 2;
    case DType::kInt32:
    case DType::kUint32:
    case DType::kFloat: return 4;
    case DType::kInt64:
    case DType::kUint64:
    case DType::kDouble: return 8;
  }
  return 1;
}

double DTypeEpsilon(DType dtype) {
  switch (dtype) {
    case DType::kFloat: return 1.0 / (1 << 23);
    case DType::kHalf: return 1.0 / (1 << 10);
    case DType::kBfloat16: return 1.0 / (1 << 7);
    case DType::kDouble: return 1.0 / 4503599627370496.0;  // 2^-52
    case DType::kF8e4m3: return 1.0 / (1 << 3);
    case DType::kF8e5m2: return 1.0 / (1 << 2);
    case DType::kInt8:
    case DType::kUint8:
    case DType::kInt32:
    case DType::kUint32:
    case DType::kInt64:
    case DType::kUint64: return 0.0;
  }
  return 1.0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat: return "float";
    case DType::kHalf: return "half";
    case DType::kBfloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUint8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kUint32: return "uint32";
    case DType::kInt64: return "int64";
    case DType::kUint64: return "uint64";
    case DType::kDouble: return "double";
    case DType::kF8e4m3: return "f8e4m3";
    case DType::kF8e5m2: return "f8e5m2";
  }
  return "?";
}

const std::vector<CollId>& AllCollectives() {
  static const std::vector<CollId> kAll = {
      CollId::kAllReduce, CollId::kReduceScatter, CollId::kAllGather,
      CollId::kBroadcast, CollId::kReduce,        CollId::kGather,
      CollId::kScatter,   CollId::kAlltoAll,      CollId::kRsAg,
      CollId::kSendRecv};
  return kAll;
}

const std::vector<CollId>& NamedCollectives() {
  static const std::vector<CollId> kNamed = [] {
    std::vector<CollId> named = AllCollectives();
    named.push_back(CollId::kAlltoAllv);
    return named;
  }();
  return kNamed;
}

const char* CollName(CollId coll) {
  switch (coll) {
    case CollId::kAlltoAllv: return "alltoallv";
    case CollId::kAllReduce: return "allreduce";
    case CollId::kReduceScatter: return "reducescatter";
    case CollId::kAllGather: return "allgather";
    case CollId::kBroadcast: return "broadcast";
    case CollId::kReduce: return "reduce";
    case CollId::kGather: return "gather";
    case CollId::kScatter: return "scatter";
    case CollId::kAlltoAll: return "alltoall";
    case CollId::kRsAg: return "rs_ag";
    case CollId::kSendRecv: return "sendrecv";
  }
  return "?";
}

const char* VarFormName(VarForm form) {
  switch (form) {
    case VarForm::kHostCounts: return "host_counts";
    case VarForm::kDeviceCounts: return "device_counts";
    case VarForm::kExpertDispatch: return "dispatch";
    case VarForm::kExpertCombine: return "combine";
  }
  return "?";
}

const char* TokenDistName(TokenDist dist) {
  switch (dist) {
    case TokenDist::kUniform: return "uniform";
    case TokenDist::kZipf: return "zipf";
    case TokenDist::kHot: return "hot";
  }
  return "?";
}

const char* RedOpName(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
    case RedOp::kAvg: return "avg";
  }
  return "?";
}

const char* TimingModeName(TimingMode mode) {
  switch (mode) {
    case TimingMode::kEvents: return "events";
    case TimingMode::kGraph: return "graph";
    case TimingMode::kThroughput: return "throughput";
    case TimingMode::kLatency: return "latency";
  }
  return "?";
}

std::string PerfUsage(const char* program) {
  std::ostringstream out;
  out << "usage: " << program << " [options]\n"
      << "Collective bandwidth and correctness, YALI and NCCL side by side on the same buffers\n"
      << "(nccl-tests' flags, sizes and busbw).\n"
      << "\n"
      << "  -C, --coll <list>          allreduce (default), reducescatter, allgather, broadcast,\n"
      << "                             reduce, gather, scatter, alltoall, rs_ag (allreduce via\n"
      << "                             reducescatter+allgather on the same buffer), sendrecv\n"
      << "                             (each rank sends to rank+1 and receives from rank-1, one\n"
      << "                             group of send/recv), all, or a comma list; or alltoallv\n"
      << "                             alone (below: not in all, its sizes are tokens, not bytes)\n"
      << "  -r, --root <rank|all>      root of broadcast, reduce, gather, scatter (default 0);\n"
      << "                             all (or -1): every rank in turn, one row each\n"
      << "  -b, --minbytes <size>      smallest message (default 4K; K/M/G suffixes); the size\n"
      << "                             column is nccl-tests': the larger of a rank's input and\n"
      << "                             output, the count column what the call is passed\n"
      << "  -e, --maxbytes <size|max>  largest message (default 1G); max: up to the largest\n"
      << "                             message whose buffers fit on every GPU (free memory less\n"
      << "                             $YALI_PERF_MEM_HEADROOM, default max(2G, 1/32 of the GPU),\n"
      << "                             for the libraries), ending at that size; the largest size\n"
      << "                             that ran is reported per collective and library\n"
      << "  -f, --stepfactor <x>       multiply the size by x each step (default 4)\n"
      << "  -i, --stepbytes <size>     add this many bytes each step (used when -f is 1 or\n"
      << "                             when -i is given without -f; default 1M)\n"
      << "  -g, --ngpus <n>            GPUs driven by this process (default: all visible GPUs\n"
      << "                             in a single process; 1 under a launcher)\n"
      << "  -n, --iters <n>            timed iterations (default 20)\n"
      << "  -w, --warmup <n>           warmup iterations (default 5)\n"
      << "  -c, --check <0|1>          check results, count #wrong (default 1)\n"
      << "  -d, --dtype <list>         int8, uint8, int32, uint32, int64, uint64, half, float,\n"
      << "                             double, bfloat16, f8e4m3, f8e5m2, all (default float)\n"
      << "  -o, --op <list>            sum, prod, max, min, avg, all (default sum); collectives\n"
      << "                             that only move data run once (redop none); avg is for\n"
      << "                             floating types only (skipped with a note for integers)\n"
      << "  -G, --graphlaunches <n>    capture -n calls in a CUDA graph, launch it n times\n"
      << "                             (implies --timing graph)\n"
      << "  -J, --json <file>          write the results as JSON (schema yali-perf/1)\n"
      << "  -a, --average <0|1|2|3>    time over ranks, nccl-tests' numbers: 0 rank 0, 1 mean (default),\n"
      << "                             2 min, 3 max\n"
      << "  -R, --registered <0|1|2>   1: register every rank's send and receive buffers with\n"
      << "                             each library (yaliCommRegister, ncclCommRegister) before\n"
      << "                             the first case, for zero-copy paths (default 0); 2: each\n"
      << "                             library at its best: YALI as with 1, NCCL's registered as\n"
      << "                             symmetric windows (ncclCommWindowRegister, NCCL 2.27 or\n"
      << "                             later). NCCL runs on memory of its own (--nccl-memory)\n"
      << "  -x, --cta-policy <0|1|2>   NCCL's comms made with this CTA policy (ncclConfig_t):\n"
      << "                             0 default, 1 efficiency, 2 zero (copy-engine collectives\n"
      << "                             where NCCL has them: with -R 2; NCCL 2.28 or later);\n"
      << "                             default: not set\n"
      << "  --nccl-memory <own|shared> NCCL's buffers: own (default), from ncclMemAlloc, as\n"
      << "                             nccl-tests gives them (NCCL registers them in graphs and\n"
      << "                             with -R 1); shared: YALI's cudaMalloc buffers, as PyTorch's\n"
      << "                             default allocator hands NCCL (NCCL's registration takes no\n"
      << "                             cudaMalloc memory)\n"
      << "      --impl <list>          yali, nccl, or yali,nccl (default both)\n"
      << "      --timing <mode>        events (default), graph, throughput, latency\n"
      << "      --inplace <0|1|2>      0 out-of-place, 1 in-place, 2 both (default 2); in place\n"
      << "                             is NCCL's per collective (alltoall and sendrecv have none)\n"
      << "      --percentiles          print a table of per-iteration percentiles at the end\n"
      << "      --repeat <n>           run the whole sweep n times in this process; results are\n"
      << "                             numbered by pass (\"run\" in the JSON; default 1)\n"
      << "      --max-case-time <s>    spend about s seconds at most in the timed calls of each\n"
      << "                             case (size, dtype, op, library, placement): -n and -w\n"
      << "                             shrink to fit a per-call time measured in the warmup,\n"
      << "                             never below " << kMinItersWithinTimeLimit
      << " iterations; the JSON records the counts\n"
      << "                             used (default: no limit)\n"
      << "      --tune                 measure YALI's crossovers on this machine (two-shot\n"
      << "                             geometry, min slot, LL geometry, LL/two-shot threshold,\n"
      << "                             then the exchanges' LL and direct thresholds: see\n"
      << "                             --tune-colls) and write a tuning table for\n"
      << "                             YALI_TUNING_FILE; takes -g, -n, -w, one -d, -J\n"
      << "      --tune-out <file>      where --tune writes the table (default yali-tuning.txt)\n"
      << "      --tune-colls <list>    the collectives --tune measures: allreduce (always), then\n"
      << "                             each named exchange's LL/staged crossover and, for\n"
      << "                             allgather, broadcast, scatter and alltoall, the direct\n"
      << "                             crossover on registered buffers; a comma list of\n"
      << "                             reducescatter, allgather, broadcast, reduce, gather,\n"
      << "                             scatter, alltoall, or all (default) or none\n"
      << "  -h, --help                 this text\n"
      << "\n"
      << "-C alltoallv: the Mixture-of-Experts exchange (yaliExpertDispatch/Combine,\n"
      << "yaliAlltoAllvDeviceCounts, yaliAlltoAllv) against NCCL's grouped send/recv, as\n"
      << "torch's all_to_all_single does it. Every rank routes its tokens, each to --topk\n"
      << "distinct experts, and sends one row per (token, choice); one line per --tokens value\n"
      << "and distribution.\n"
      << "Takes -d (default bfloat16), -n, -w, -c, -G, -J, -a, -R, --impl, --timing, --repeat,\n"
      << "--max-case-time, and:\n"
      << "      --tokens <list>        tokens per rank (default 4096): counts (4K), ranges A:B\n"
      << "                             (doubling), or a comma list\n"
      << "      --hidden <n>           elements per row (default 7168)\n"
      << "      --topk <k>             experts per token (default 8)\n"
      << "      --experts <n>          experts in all, a multiple of the ranks (default 256)\n"
      << "      --dist <list>          uniform (default), zipf (expert of popularity i weighs\n"
      << "                             1/(i+1)^s, popularity a seeded permutation), hot (rank 0's\n"
      << "                             experts share --hot-share of the weight), all, or a list\n"
      << "      --zipf-s <s>           zipf's exponent (default 1.0)\n"
      << "      --hot-share <f>        hot's share, between 0 and 1 (default 0.5)\n"
      << "      --align <rows>         each expert's segment of the dispatch's output starts at a\n"
      << "                             multiple of this many rows (default 1)\n"
      << "      --seed <n>             routing and row data (default 1)\n"
      << "With -G, dispatch, combine and the device-count form are captured into graphs; the\n"
      << "host-count forms (yaliAlltoAllv, NCCL) read counts on the host every call, so they are\n"
      << "timed eagerly, each call with its host round trip (counts exchanged, copied, synced).\n"
      << "\n"
      << "Launch: one process drives -g GPUs; or one process per GPU under mpirun, srun or\n"
      << "torchrun (rank and size read from the environment; processes meet through files in\n"
      << "$YALI_PERF_RENDEZVOUS_DIR, default /tmp; job id $YALI_PERF_JOBID). Waits are bounded by\n"
      << "$YALI_PERF_TIMEOUT_S (default 120).\n"
      << "A case a library refuses (invalid argument) is a row marked skipped, with the reason.\n";
  return out.str();
}

}  // namespace yali_perf
