#include "nccl_abi/routing.h"

#include <ctype.h>
#include <string.h>

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

CollectiveMask parseDisableList(const char* text, std::string* unknown) {
  CollectiveMask mask = 0;
  if (unknown != nullptr) unknown->clear();
  if (text == nullptr) return 0;
  std::string rest = text;
  while (true) {
    size_t comma = rest.find(',');
    std::string word = lowerTrimmed(rest.substr(0, comma));
    if (word == "all") {
      mask |= kAllNcclCollectives;
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

bool yaliTakes(int nranks, std::string* why) {
  if (nranks >= 2 && nranks <= kMaxRanks) return true;
  if (why != nullptr)
    *why = std::to_string(nranks) + (nranks == 1 ? " rank" : " ranks") + " (YALI takes 2 to " +
           std::to_string(kMaxRanks) + ")";
  return false;
}

RankRecord makeRecord(const std::string& node, CollectiveMask disabled, bool registerYali) {
  RankRecord r;
  memset(&r, 0, sizeof(r));
  r.layout = RankRecord::kLayout;
  r.disabled = disabled;
  r.registerYali = registerYali ? 1 : 0;
  strncpy(r.node, node.c_str(), sizeof(r.node) - 1);
  return r;
}

SetUpVerdict decideSetUp(const std::vector<RankRecord>& records) {
  SetUpVerdict v;
  const int n = static_cast<int>(records.size());
  if (!yaliTakes(n, &v.why)) return v;
  const RankRecord& first = records[0];
  for (int r = 0; r < n; ++r) {
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
    // An empty identity means this rank could not tell its node: never assume it is ours.
    if (records[r].node[0] == '\0' || strncmp(records[r].node, first.node, sizeof(first.node)) != 0) {
      v.why = "rank " + std::to_string(r) + " is on another node than rank 0 (multi-node communicators are "
              "NCCL only in this phase)";
      return v;
    }
  }
  v.yali = true;
  v.disabled = first.disabled;
  v.registerYali = true;
  for (const RankRecord& r : records) v.registerYali = v.registerYali && r.registerYali != 0;
  return v;
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

}  // namespace yali::nccl_abi
