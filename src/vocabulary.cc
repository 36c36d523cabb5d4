#include "vocabulary.h"

namespace yali {

const char* dataTypeName(DataType t) {
  static const char* const kNames[kNumDataTypes] = {"int8",    "uint8",   "int32",    "uint32",
                                                    "int64",   "uint64",  "float16",  "float32",
                                                    "float64", "bfloat16", "fp8_e4m3", "fp8_e5m2"};
  const int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? kNames[i] : "unknown";
}

const char* redOpName(RedOp op) {
  static const char* const kNames[kNumRedOps] = {"sum", "prod", "max", "min", "avg"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumRedOps ? kNames[i] : "unknown";
}

const char* collectiveName(Collective c) {
  static const char* const kNames[kNumCollectives] = {"allreduce", "reducescatter", "allgather", "broadcast",
                                                      "reduce",    "gather",        "scatter",   "alltoall",
                                                      "alltoallv"};
  const int i = static_cast<int>(c);
  return i >= 0 && i < kNumCollectives ? kNames[i] : "unknown";
}

}  // namespace yali
