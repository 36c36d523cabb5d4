#include "nccl_abi/routing.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <algorithm>

#include "core/hash.h"
#include "core/pattern.h"
#include "vocabulary.h"

namespace yali::nccl_abi {

// The two vocabularies are one: a value is the same type, op or result in both, so a cast converts.
// A header where that stopped being true must not build.
#define YALI_SAME(nccl, yali) static_assert(static_cast<int>(nccl) == static_cast<int>(yali), #nccl " != " #yali)
YALI_SAME(ncclInt8, yaliInt8);
YALI_SAME(ncclUint8, yaliUint8);
YALI_SAME(ncclInt32, yaliInt32);
YALI_SAME(ncclUint32, yaliUint32);
YALI_SAME(ncclInt64, yaliInt64);
YALI_SAME(ncclUint64, yaliUint64);
YALI_SAME(ncclFloat16, yaliFloat16);
YALI_SAME(ncclFloat32, yaliFloat32);
YALI_SAME(ncclFloat64, yaliFloat64);
YALI_SAME(ncclBfloat16, yaliBfloat16);
YALI_SAME(ncclFloat8e4m3, yaliFloat8e4m3);
YALI_SAME(ncclFloat8e5m2, yaliFloat8e5m2);
YALI_SAME(ncclSum, yaliSum);
YALI_SAME(ncclProd, yaliProd);
YALI_SAME(ncclMax, yaliMax);
YALI_SAME(ncclMin, yaliMin);
YALI_SAME(ncclAvg, yaliAvg);
YALI_SAME(ncclNumOps, yaliNumOps);
YALI_SAME(ncclSuccess, yaliSuccess);
YALI_SAME(ncclUnhandledCudaError, yaliUnhandledCudaError);
YALI_SAME(ncclSystemError, yaliSystemError);
YALI_SAME(ncclInternalError, yaliInternalError);
YALI_SAME(ncclInvalidArgument, yaliInvalidArgument);
YALI_SAME(ncclInvalidUsage, yaliInvalidUsage);
YALI_SAME(ncclRemoteError, yaliRemoteError);
YALI_SAME(ncclInProgress, yaliInProgress);
YALI_SAME(NCCL_UNIQUE_ID_BYTES, YALI_UNIQUE_ID_BYTES);
#undef YALI_SAME

namespace {

std::string lowerTrimmed(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out = s.substr(b, e - b);
  for (char& ch : out) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

bool parseRegisterSetting(const char* value) {
  return value != nullptr && value[0] != '\0' && strcmp(value, "0") != 0;
}

CollectiveMask parseDisableList(const char* text, std::string* unknown) {
  CollectiveMask mask = 0;
  if (unknown != nullptr) unknown->clear();
  if (text == nullptr) return 0;
  std::string rest = text;
  while (true) {
    size_t comma = rest.find(',');
    std::string word = lowerTrimmed(rest.substr(0, comma));
    if (word == "all") {
      mask |= kAllNcclCollectives | kSendRecvMask;
    } else if (word == "sendrecv") {
      mask |= kSendRecvMask;
    } else if (!word.empty()) {
      bool known = false;
      for (int c = 0; c <= yaliCollAlltoAll; ++c) {
        if (word == collectiveName(static_cast<Collective>(c))) {
          mask |= 1u << c;
          known = true;
        }
      }
      if (!known && unknown != nullptr) *unknown += (unknown->empty() ? "" : ",") + word;
    }
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
  }
  return mask;
}

std::vector<std::string> envPluginCandidates(const char* setting) {
  if (setting != nullptr && strcasecmp(setting, "none") == 0) return {};
  if (setting == nullptr || setting[0] == '\0') return {"libnccl-env.so"};
  std::vector<std::string> names;
  // tryOpenLib: a name that is a prefix of STATIC_PLUGIN (strncasecmp over the name's length) opens
  // the program itself.
  names.push_back(strncasecmp(setting, "STATIC_PLUGIN", strlen(setting)) == 0 ? "" : setting);
  const size_t n = strlen(setting);
  const bool libraryName = strncmp(setting, "lib", 3) == 0 && n >= 3 && strcmp(setting + n - 3, ".so") == 0;
  if (strchr(setting, '/') == nullptr && !libraryName) names.push_back(std::string("libnccl-env-") + setting + ".so");
  return names;
}

namespace {

// A numeric NCCL setting as NCCL reads it and then keeps it: ncclLoadParam (misc/param.cc) reads
// an int64_t with strtoll, base 0 ("01", " 1", "0x1", "1abc" are 1, "abc" is 0; empty or an
// overflow, errno, is unset), and envConfigOverride (init.cc) keeps it in an `int`, so 4294967297
// is 1 and 4294967296 is 0. False when unset.
bool ncclIntSetting(const char* env, int* out) {
  if (env == nullptr || env[0] == '\0') return false;
  const int savedErrno = errno;
  errno = 0;
  const long long value = strtoll(env, nullptr, 0);
  const bool read = errno == 0;
  errno = savedErrno;
  *out = static_cast<int>(static_cast<uint32_t>(static_cast<unsigned long long>(value)));
  return read;
}

}  // namespace

bool blockingOf(const ncclConfig_t* config, bool inherited, const char* env) {
  // NCCL's order (init.cc): the environment overrides the config, which overrides the default.
  // NCCL_COMM_BLOCKING read as NCCL reads it (ncclIntSetting); only 0 and 1 override
  // (envConfigOverride).
  int value = 0;
  if (ncclIntSetting(env, &value) && (value == 0 || value == 1)) return value == 1;
  if (config == nullptr) return inherited;
  // parseCommConfig: a config older than 2.14 gets the default's blocking; unset means 1.
  if (config->version < NCCL_VERSION(2, 14, 0) || config->blocking == NCCL_CONFIG_UNDEF_INT) return true;
  return config->blocking != 0;
}

bool splitShareOf(const ncclConfig_t* config, bool inherited, const char* env) {
  // NCCL's order (init.cc): NCCL_COMM_SPLIT_SHARE_RESOURCES, read as NCCL reads it
  // (ncclIntSetting), overrides unless it is NCCL_CONFIG_UNDEF_INT (envConfigOverride), and a value
  // other than 0 and 1 then becomes 0 (parseCommConfig); a NULL config copies the parent's; a config
  // of its own means 0 unless it sets splitShare (or predates the field, NCCL reading no further
  // than config->size; a value other than 0 and 1 there fails the creation).
  int value = 0;
  if (ncclIntSetting(env, &value) && value != NCCL_CONFIG_UNDEF_INT) return value == 1;
  if (config == nullptr) return inherited;
  if (config->size <= offsetof(ncclConfig_t, splitShare)) return false;
  return config->splitShare != NCCL_CONFIG_UNDEF_INT && config->splitShare != 0;
}

bool yaliTakes(int nranks, std::string* why) {
  if (nranks >= 2 && nranks <= kMaxRanks) return true;
  if (why != nullptr)
    *why = std::to_string(nranks) + (nranks == 1 ? " rank" : " ranks") + " (YALI takes 2 to " +
           std::to_string(kMaxRanks) + ")";
  return false;
}

RankRecord makeRecord(const std::string& node, CollectiveMask disabled, bool registerYali, bool nonBlocking) {
  RankRecord r;
  memset(&r, 0, sizeof(r));
  r.layout = RankRecord::kLayout;
  r.disabled = disabled;
  r.registerYali = registerYali ? 1 : 0;
  r.nonBlocking = nonBlocking ? 1 : 0;
  strncpy(r.node, node.c_str(), sizeof(r.node) - 1);
  return r;
}

SetUpVerdict decideSetUp(const std::vector<RankRecord>& records) {
  SetUpVerdict v;
  const int n = static_cast<int>(records.size());
  if (n < 2) {  // more than 8 may still be several nodes of 2 to 8: decided below
    yaliTakes(n, &v.why);
    return v;
  }
  const RankRecord& first = records[0];
  for (int r = 0; r < n; ++r) {
    // A zeroed record: the rank takes part in the exchange to say "not ok" (comm.cc, setUpYali).
    if (records[r].layout == 0) {
      v.why = "rank " + std::to_string(r) + "'s set-up failed before the exchange of records (its log says why)";
      return v;
    }
    if (records[r].layout != RankRecord::kLayout) {
      v.why = "rank " + std::to_string(r) + " runs another libyali-nccl (set-up layout " +
              std::to_string(records[r].layout) + ")";
      return v;
    }
  }
  for (int r = 0; r < n; ++r) {
    if (records[r].disabled != first.disabled) {
      v.why = "YALI_NCCL_DISABLE differs between rank 0 and rank " + std::to_string(r);
      return v;
    }
  }
  if ((first.disabled & kAllNcclCollectives) == kAllNcclCollectives) {
    v.why = "YALI_NCCL_DISABLE disables every collective";
    return v;
  }
  for (int r = 0; r < n; ++r) {
    // An empty identity means this rank could not tell its node: never assume it shares one.
    if (records[r].node[0] == '\0') {
      v.why = "rank " + std::to_string(r) + " could not tell its node";
      return v;
    }
  }
  v.layout = describeNodes(records);
  v.disabled = first.disabled;
  if (v.layout.nodes == 1) {
    if (!yaliTakes(n, &v.why)) return v;
    v.yali = true;
    v.registerYali = true;
    for (const RankRecord& r : records) v.registerYali = v.registerYali && r.registerYali != 0;
    return v;
  }
  const std::string nodes = std::to_string(v.layout.nodes) + " nodes";
  if (v.layout.localSize == 0) {
    const auto sizeOf = [&](int node) { return std::count(v.layout.nodeOf.begin(), v.layout.nodeOf.end(), node); };
    int other = 1;
    while (sizeOf(v.layout.nodeOf[other]) == sizeOf(0)) ++other;
    v.why = nodes + " of different sizes (" + std::to_string(sizeOf(0)) + " ranks on rank 0's, " +
            std::to_string(sizeOf(v.layout.nodeOf[other])) + " on rank " + std::to_string(other) + "'s): flat NCCL";
    return v;
  }
  std::string why;
  if (!yaliTakes(v.layout.localSize, &why)) {
    v.why = nodes + " of " + why + " each: flat NCCL";
    return v;
  }
  for (int r = 0; r < n; ++r) {
    if (records[r].nonBlocking != 0) {  // RankRecord::nonBlocking says why
      v.why = nodes + ", and rank " + std::to_string(r) +
              "'s communicator is non-blocking: flat NCCL (the hierarchical path takes blocking communicators only)";
      return v;
    }
  }
  // YALI registration is left out: the hierarchical steps run YALI on the program's buffers only
  // for AllReduce, at offsets that differ between its steps.
  v.yali = true;
  v.hierarchical = true;
  return v;
}

NodeLayout describeNodes(const std::vector<RankRecord>& records) {
  NodeLayout layout;
  const int n = static_cast<int>(records.size());
  std::vector<int> firstRank;  // of each node
  std::vector<int> sizes;
  layout.nodeOf.resize(n);
  layout.localRankOf.resize(n);
  for (int r = 0; r < n; ++r) {
    int node = 0;
    while (node < layout.nodes &&
           strncmp(records[firstRank[node]].node, records[r].node, sizeof(records[r].node)) != 0)
      ++node;
    if (node == layout.nodes) {
      ++layout.nodes;
      firstRank.push_back(r);
      sizes.push_back(0);
    }
    layout.nodeOf[r] = node;
    layout.localRankOf[r] = sizes[node]++;
  }
  layout.localSize = n > 0 ? sizes[0] : 0;
  for (int s : sizes)
    if (s != layout.localSize) layout.localSize = 0;
  return layout;
}

SplitKeys splitKeys(const NodeLayout& layout, int rank) {
  return {layout.nodeOf[rank], rank, layout.localRankOf[rank], layout.nodeOf[rank]};
}

HierRoute decideHierRoute(const NodeLayout& layout, Route route, const HierCall& call) {
  if (call.collective != yaliCollAllReduce && call.collective != yaliCollAllGather &&
      call.collective != yaliCollReduceScatter)
    return HierRoute::kNotHierarchical;
  if (route != Route::kYali) return HierRoute::kRefused;
  // No group test here (routing.h): a call inside ncclGroupStart/End is routed as outside one.
  if (call.count == 0 ||
      (call.collective == yaliCollAllReduce && allReduceSplit(call.count, layout.localSize).shard == 0))
    return HierRoute::kTooSmall;
  if (call.capturing && hierScratchBytes(layout, call) > call.scratchBytes) return HierRoute::kCaptureNoScratch;
  return HierRoute::kHierarchical;
}

const char* hierRouteReason(HierRoute route) {
  switch (route) {
    case HierRoute::kHierarchical: return "hierarchical";
    case HierRoute::kNotHierarchical: return "no hierarchical form of this collective";
    case HierRoute::kRefused: return "refused";
    case HierRoute::kTooSmall: return "no elements, or (AllReduce) fewer than ranks per node";
    case HierRoute::kCaptureNoScratch: return "CUDA graph capture, and no scratch buffer large enough yet";
  }
  return "?";
}

size_t hierScratchBytes(const NodeLayout& layout, const HierCall& call) {
  if (call.collective == yaliCollAllReduce) return 0;
  return call.count * call.elementSize * layout.nodeOf.size();
}

AllReduceSplit allReduceSplit(size_t count, int localSize) {
  const size_t l = static_cast<size_t>(localSize);
  return {count / l, count % l};
}

int scratchSlot(const NodeLayout& layout, int rank) {
  return layout.localRankOf[rank] * layout.nodes + layout.nodeOf[rank];
}

std::vector<CopyRun> copyRuns(const NodeLayout& layout) {
  std::vector<CopyRun> runs;
  const int n = static_cast<int>(layout.nodeOf.size());
  for (int r = 0; r < n; ++r) {
    const int slot = scratchSlot(layout, r);
    if (!runs.empty() && runs.back().program + runs.back().blocks == r &&
        runs.back().scratch + runs.back().blocks == slot)
      ++runs.back().blocks;
    else
      runs.push_back({slot, r, 1});
  }
  return runs;
}

Route decideRoute(bool hasYali, CollectiveMask disabled, const CallShape& call) {
  if (!hasYali) return Route::kNoYaliComm;
  if (disabled & (1u << call.collective)) return Route::kDisabled;
  if (!validDataType(call.type)) return Route::kUnknownType;
  const bool reduces = collectiveShape(static_cast<Collective>(call.collective)).reduces;
  if (reduces) {
    if (call.op < 0 || call.op >= ncclNumOps) return Route::kCustomOp;
    if (!opSupports(static_cast<RedOp>(call.op), static_cast<DataType>(call.type))) return Route::kOpForType;
  }
  return Route::kYali;
}

const char* routeReason(Route route) {
  switch (route) {
    case Route::kYali: return "YALI";
    case Route::kNoYaliComm: return "no YALI communicator";
    case Route::kDisabled: return "YALI_NCCL_DISABLE";
    case Route::kCustomOp: return "not a built-in op";
    case Route::kUnknownType: return "a data type YALI does not have";
    case Route::kOpForType: return "an op YALI does not take for this type";
  }
  return "?";
}

StreamOrder::Slot& StreamOrder::slotOf(unsigned long long context, int* index) {
  *index = context == 0 ? 0 : 1;
  Slot& s = slots_[*index];
  if (context != 0 && s.context != context) {  // a new capture
    s = Slot{};
    s.context = context;
  }
  return s;
}

StreamOrder::Before StreamOrder::before(const void* stream, unsigned long long context, uint64_t thread) {
  Before b;
  Slot& s = slotOf(context, &b.slot);
  if (!s.have || (stream == s.last && (!perThread(stream) || thread == s.thread))) return b;
  if (!s.everyCall && !perThread(s.last)) {  // a user on cudaStreamPerThread recorded at once (after)
    // The context's first change of stream: its last user was not marked; everything queued on
    // that stream so far (it, and perhaps later work of the program's) is.
    b.record = true;
    b.recordOn = s.last;
    s.everyCall = true;
  }
  b.wait = true;
  return b;
}

bool StreamOrder::after(const void* stream, unsigned long long context, int* slot, uint64_t thread) {
  int index = 0;
  Slot& s = slotOf(context, &index);
  if (slot != nullptr) *slot = index;
  s.have = true;
  s.last = stream;
  s.thread = thread;
  return s.everyCall || perThread(stream);
}

StagingLayout stagingLayout(yaliCollective_t collective, int rank, int root, int nranks, size_t count,
                            size_t elementSize) {
  // The output after the input, aligned as cudaMalloc aligns (YALI's vector paths want 16 bytes).
  constexpr size_t kAlign = 256;
  const Extents e = extentsOf(static_cast<Collective>(collective), rank, root, nranks);
  StagingLayout l;
  l.sendBytes = e.sendPieces * count * elementSize;
  l.recvBytes = e.recvPieces * count * elementSize;
  l.recvOffset = (l.sendBytes + kAlign - 1) / kAlign * kAlign;
  l.totalBytes = l.recvOffset + l.recvBytes;
  return l;
}

ncclResult_t toNcclResult(yaliResult_t result) {
  if (result >= yaliSuccess && result <= yaliInProgress) return static_cast<ncclResult_t>(result);
  if (result == yaliTimeout) return ncclRemoteError;
  return ncclInternalError;
}

int sizeClass(size_t bytes) {
  int c = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++c;
  }
  return c;
}

// ---- Group order ---------------------------------------------------------------------------------

uint64_t commKeyOfIds(const void* ids, size_t bytes) { return mix64(fnv1a(ids, bytes) ^ bytes); }

uint64_t childCommKey(uint64_t parentKey, uint64_t childIndex, int color) {
  return mix64(mix64(parentKey ^ mix64(childIndex)) ^ static_cast<uint64_t>(static_cast<int64_t>(color)));
}

}  // namespace yali::nccl_abi
