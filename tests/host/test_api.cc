// Host tests of the public C API: everything that must work on a machine with the CUDA toolkit but
// no GPU (CI). Argument errors are reported before any CUDA call, so none of these tests needs a
// device; the last test checks that the CUDA driver was never even loaded.
//
// Anything that needs a real communicator is in tests/gpu/.
#include <yali/yali.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>

#include "harness.h"

namespace {

// True when `name` occurs in `text` as a whole identifier (so "rank" does not match inside "nranks"
// and "comm" does not match inside "yaliCommInitRank").
bool containsWord(const std::string& text, const std::string& name) {
  auto isIdent = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  for (size_t pos = text.find(name); pos != std::string::npos; pos = text.find(name, pos + 1)) {
    bool startOk = pos == 0 || !isIdent(text[pos - 1]);
    size_t end = pos + name.size();
    bool endOk = end == text.size() || !isIdent(text[end]);
    if (startOk && endOk) return true;
  }
  return false;
}

std::string lastError() {
  const char* s = yaliGetLastError(nullptr);
  return s == nullptr ? std::string("(null)") : std::string(s);
}

// Checks that a call failed with `expected` and that yaliGetLastError(NULL) names the call and the
// argument.
#define EXPECT_ERROR(expr, expected, callName, argName)                                         \
  do {                                                                                          \
    yaliResult_t r_ = (expr);                                                                   \
    std::string msg_ = lastError();                                                             \
    CHECK_MSG(r_ == (expected), "%s returned %d (%s), expected %d (%s); last error: %s", #expr,   \
              (int)r_, yaliGetErrorString(r_), (int)(expected), yaliGetErrorString(expected),   \
              msg_.c_str());                                                                    \
    CHECK_MSG(msg_.find(callName) != std::string::npos,                                          \
              "after %s, yaliGetLastError(NULL) does not name the call %s: \"%s\"", #expr,       \
              callName, msg_.c_str());                                                          \
    if ((argName)[0] != '\0') {                                                                 \
      CHECK_MSG(containsWord(msg_, argName),                                                    \
                "after %s, yaliGetLastError(NULL) does not name the argument '%s': \"%s\"",     \
                #expr, argName, msg_.c_str());                                                  \
    }                                                                                           \
  } while (0)

yaliUniqueId validId() {
  yaliUniqueId id;
  std::memset(&id, 0, sizeof id);
  yaliResult_t r = yaliGetUniqueId(&id);
  if (r != yaliSuccess) {
    ::yali_test::reportFailure(__FILE__, __LINE__,
                               std::string("yaliGetUniqueId failed: ") + lastError());
    throw ::yali_test::RequireFailed();
  }
  return id;
}

bool cudaDriverLoaded() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libcuda.so") != std::string::npos) return true;
  }
  return false;
}

bool gDriverLoadedAtStart = false;

const yaliResult_t kAllResults[] = {yaliSuccess,        yaliUnhandledCudaError, yaliSystemError,
                                    yaliInternalError,  yaliInvalidArgument,    yaliInvalidUsage,
                                    yaliRemoteError,    yaliInProgress,         yaliTimeout};

}  // namespace

// ---- Errors and version -------------------------------------------------------------------------

TEST(error_strings_nonempty_and_distinct) {
  static_assert(sizeof(kAllResults) / sizeof(kAllResults[0]) == yaliNumResults,
                "kAllResults must list every yaliResult_t value");
  std::set<std::string> seen;
  for (yaliResult_t r : kAllResults) {
    const char* s = yaliGetErrorString(r);
    CHECK_MSG(s != nullptr, "yaliGetErrorString(%d) is NULL", (int)r);
    if (s == nullptr) continue;
    CHECK_MSG(s[0] != '\0', "yaliGetErrorString(%d) is empty", (int)r);
    CHECK_MSG(seen.insert(s).second, "yaliGetErrorString(%d) = \"%s\" repeats another code's", (int)r,
              s);
  }
}

TEST(error_string_out_of_range_not_null) {
  const int bad[] = {yaliNumResults, -1, 1000, 0x7fffffff};
  for (int v : bad) {
    const char* s = yaliGetErrorString((yaliResult_t)v);
    CHECK_MSG(s != nullptr, "yaliGetErrorString(%d) is NULL", v);
  }
}

TEST(result_codes_match_nccl) {
  // The header promises NCCL's numbers; programs that switch libraries by renaming rely on them.
  CHECK_EQ(yaliSuccess, 0);
  CHECK_EQ(yaliUnhandledCudaError, 1);
  CHECK_EQ(yaliSystemError, 2);
  CHECK_EQ(yaliInternalError, 3);
  CHECK_EQ(yaliInvalidArgument, 4);
  CHECK_EQ(yaliInvalidUsage, 5);
  CHECK_EQ(yaliRemoteError, 6);
  CHECK_EQ(yaliInProgress, 7);
  CHECK_EQ(yaliFloat16, 6);
  CHECK_EQ(yaliFloat32, 7);
  CHECK_EQ(yaliBfloat16, 9);
  CHECK_EQ(yaliSum, 0);
  CHECK_EQ(yaliProd, 1);
  CHECK_EQ(yaliMax, 2);
  CHECK_EQ(yaliMin, 3);
  CHECK_EQ(yaliAvg, 4);
}

TEST(version_matches_header) {
  int v = -12345;
  CHECK_EQ(yaliGetVersion(&v), yaliSuccess);
  CHECK_EQ(v, YALI_VERSION_CODE);
  CHECK_EQ(YALI_VERSION_CODE, YALI_MAJOR * 10000 + YALI_MINOR * 100 + YALI_PATCH);
}

TEST(version_null_pointer) {
  EXPECT_ERROR(yaliGetVersion(nullptr), yaliInvalidArgument, "yaliGetVersion", "version");
}

TEST(last_error_is_per_thread) {
  // A fresh thread has no failure yet: an empty string, never NULL.
  std::string fresh = "(not run)";
  std::thread([&] {
    const char* s = yaliGetLastError(nullptr);
    fresh = s == nullptr ? "(null)" : s;
  }).join();
  CHECK_MSG(fresh.empty(), "yaliGetLastError(NULL) on a new thread is \"%s\", expected \"\"",
            fresh.c_str());

  // A failure on another thread does not replace this thread's last failure.
  CHECK_EQ(yaliGetVersion(nullptr), yaliInvalidArgument);
  std::string other;
  std::thread([&] {
    yaliComm_t comms[2];
    (void)yaliCommInitAll(comms, 0, nullptr);
    other = lastError();
  }).join();
  std::string mine = lastError();
  CHECK_MSG(mine.find("yaliGetVersion") != std::string::npos,
            "this thread's last error changed after another thread failed: \"%s\"", mine.c_str());
  CHECK_MSG(other.find("yaliCommInitAll") != std::string::npos,
            "the other thread's last error does not name yaliCommInitAll: \"%s\"", other.c_str());
}

// ---- Unique ids ----------------------------------------------------------------------------------

TEST(unique_id_null_pointer) {
  EXPECT_ERROR(yaliGetUniqueId(nullptr), yaliInvalidArgument, "yaliGetUniqueId", "uniqueId");
}

TEST(unique_ids_differ) {
  // Works without a GPU (this machine may have none) and never repeats.
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    yaliUniqueId id;
    std::memset(&id, 0, sizeof id);
    yaliResult_t r = yaliGetUniqueId(&id);
    CHECK_MSG(r == yaliSuccess, "yaliGetUniqueId #%d returned %d: %s", i, (int)r,
              lastError().c_str());
    if (r != yaliSuccess) return;
    std::string bytes(id.internal, sizeof id.internal);
    CHECK_MSG(bytes != std::string(sizeof id.internal, '\0'), "id #%d is all zero bytes", i);
    CHECK_MSG(seen.insert(bytes).second, "yaliGetUniqueId #%d repeated an earlier id", i);
  }
}

// ---- yaliCommInitRank argument errors (checked before any CUDA call) ------------------------------

TEST(init_rank_null_comm) {
  yaliUniqueId id = validId();
  EXPECT_ERROR(yaliCommInitRank(nullptr, 2, id, 0), yaliInvalidArgument, "yaliCommInitRank",
               "comm");
}

TEST(init_rank_bad_nranks) {
  yaliUniqueId id = validId();
  const int bad[] = {0, -1, 9, 1 << 20};
  for (int n : bad) {
    yaliComm_t comm = nullptr;
    EXPECT_ERROR(yaliCommInitRank(&comm, n, id, 0), yaliInvalidArgument, "yaliCommInitRank",
                 "nranks");
  }
}

TEST(init_rank_bad_rank) {
  yaliUniqueId id = validId();
  struct {
    int nranks, rank;
  } bad[] = {{2, -1}, {2, 2}, {4, 4}, {8, 8}, {4, -100}, {2, 1 << 30}};
  for (auto b : bad) {
    yaliComm_t comm = nullptr;
    EXPECT_ERROR(yaliCommInitRank(&comm, b.nranks, id, b.rank), yaliInvalidArgument,
                 "yaliCommInitRank", "rank");
  }
}

TEST(init_rank_id_from_nowhere) {
  // An id not produced by yaliGetUniqueId: all zeros, and random bytes.
  yaliUniqueId zero;
  std::memset(&zero, 0, sizeof zero);
  yaliComm_t comm = nullptr;
  EXPECT_ERROR(yaliCommInitRank(&comm, 2, zero, 0), yaliInvalidArgument, "yaliCommInitRank",
               "uniqueId");

  yaliUniqueId garbage;
  unsigned long long x = 0x243F6A8885A308D3ull;  // a fixed xorshift stream: reproducible bytes
  for (size_t i = 0; i < sizeof garbage.internal; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    garbage.internal[i] = (char)(x >> 56);
  }
  EXPECT_ERROR(yaliCommInitRank(&comm, 2, garbage, 1), yaliInvalidArgument, "yaliCommInitRank",
               "uniqueId");

  // A real id with one byte in the middle changed is also "from nowhere" only if the library keeps
  // a checksum; that is not part of the contract, so it is not tested.
}

// ---- yaliCommInitAll argument errors --------------------------------------------------------------

TEST(init_all_null_comms) {
  EXPECT_ERROR(yaliCommInitAll(nullptr, 2, nullptr), yaliInvalidArgument, "yaliCommInitAll",
               "comms");
}

TEST(init_all_bad_ndev) {
  yaliComm_t comms[16];
  const int bad[] = {0, -1, 9, 16};
  for (int n : bad) {
    EXPECT_ERROR(yaliCommInitAll(comms, n, nullptr), yaliInvalidArgument, "yaliCommInitAll",
                 "ndev");
  }
}

TEST(init_all_bad_devlist) {
  yaliComm_t comms[8];
  const int dup[] = {0, 0};
  EXPECT_ERROR(yaliCommInitAll(comms, 2, dup), yaliInvalidArgument, "yaliCommInitAll", "devlist");
  const int dupLater[] = {1, 0, 2, 1};
  EXPECT_ERROR(yaliCommInitAll(comms, 4, dupLater), yaliInvalidArgument, "yaliCommInitAll",
               "devlist");
  // The message says how to allow it (for testing; the GPU suite's --share-gpus runs that).
  EXPECT_ERROR(yaliCommInitAll(comms, 2, dup), yaliInvalidArgument, "yaliCommInitAll",
               "YALI_ALLOW_SHARED_GPU");
  const int negative[] = {-1, 0};
  EXPECT_ERROR(yaliCommInitAll(comms, 2, negative), yaliInvalidArgument, "yaliCommInitAll",
               "devlist");
  const int negativeLast[] = {0, 1, -3};
  EXPECT_ERROR(yaliCommInitAll(comms, 3, negativeLast), yaliInvalidArgument, "yaliCommInitAll",
               "devlist");
}

// ---- Calls with a NULL comm -----------------------------------------------------------------------

TEST(null_comm_allreduce) {
  // Plausible, aligned (fake) buffers: the NULL comm must be reported before anything looks at them.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  EXPECT_ERROR(yaliAllReduce(fake, fake, 16, yaliFloat32, yaliSum, nullptr, nullptr),
               yaliInvalidArgument, "yaliAllReduce", "comm");
  EXPECT_ERROR(yaliAllReduce(fake, fake, 0, yaliBfloat16, yaliMax, nullptr, nullptr),
               yaliInvalidArgument, "yaliAllReduce", "comm");
}

TEST(null_comm_queries) {
  int v = -7;
  EXPECT_ERROR(yaliCommCount(nullptr, &v), yaliInvalidArgument, "yaliCommCount", "comm");
  EXPECT_ERROR(yaliCommCuDevice(nullptr, &v), yaliInvalidArgument, "yaliCommCuDevice", "comm");
  EXPECT_ERROR(yaliCommUserRank(nullptr, &v), yaliInvalidArgument, "yaliCommUserRank", "comm");
  CHECK_MSG(v == -7, "a failed query wrote its output (%d)", v);
  yaliResult_t async = yaliInProgress;
  EXPECT_ERROR(yaliCommGetAsyncError(nullptr, &async), yaliInvalidArgument,
               "yaliCommGetAsyncError", "comm");
  const int* flag = &v;
  EXPECT_ERROR(yaliCommGetFailureFlag(nullptr, &flag), yaliInvalidArgument, "yaliCommGetFailureFlag", "comm");
  CHECK_MSG(flag == &v, "a failed yaliCommGetFailureFlag wrote its output");
  static const uint64_t word = 0;
  EXPECT_ERROR(yaliCommWatchFailureWord(nullptr, &word), yaliInvalidArgument, "yaliCommWatchFailureWord", "comm");
}

TEST(null_comm_destroy_abort) {
  EXPECT_ERROR(yaliCommDestroy(nullptr), yaliInvalidArgument, "yaliCommDestroy", "comm");
  EXPECT_ERROR(yaliCommAbort(nullptr), yaliInvalidArgument, "yaliCommAbort", "comm");
}

TEST(null_comm_algo_info) {
  yaliAlgoInfo_t info;
  std::memset(&info, 0, sizeof info);
  EXPECT_ERROR(yaliAllReduceAlgoInfo(nullptr, nullptr, nullptr, 1024, yaliFloat32, yaliSum, &info),
               yaliInvalidArgument, "yaliAllReduceAlgoInfo", "comm");
  // With (fake) buffers: the comm is still what is reported, before anything looks at them.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  EXPECT_ERROR(yaliAllReduceAlgoInfo(nullptr, fake, fake, 1024, yaliBfloat16, yaliMax, &info),
               yaliInvalidArgument, "yaliAllReduceAlgoInfo", "comm");
}

TEST(null_comm_register) {
  // Plausible (fake) buffer and handle: the NULL comm must be reported first, without CUDA.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  void* handle = nullptr;
  EXPECT_ERROR(yaliCommRegister(nullptr, fake, 4096, &handle), yaliInvalidArgument,
               "yaliCommRegister", "comm");
  EXPECT_ERROR(yaliCommDeregister(nullptr, fake), yaliInvalidArgument, "yaliCommDeregister", "comm");
}

TEST(not_a_comm_register) {
  // A pointer that no yaliCommInit* returned (here: host memory of this test): refused by the
  // handle registry, never dereferenced as a comm.
  alignas(64) static char notAComm[4096];
  std::memset(notAComm, 0x5A, sizeof notAComm);
  yaliComm_t bogus = reinterpret_cast<yaliComm_t>(notAComm);
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  void* handle = nullptr;
  EXPECT_ERROR(yaliCommRegister(bogus, fake, 4096, &handle), yaliInvalidArgument, "yaliCommRegister",
               "comm");
  EXPECT_ERROR(yaliCommDeregister(bogus, fake), yaliInvalidArgument, "yaliCommDeregister", "comm");
}

// ---- Every collective: values, names, NULL and foreign comms -------------------------------------

TEST(datatypes_match_nccl) {
  // NCCL 2.28's ncclDataType_t numbers, aliases included: programs switch libraries by renaming.
  CHECK_EQ(yaliInt8, 0);
  CHECK_EQ(yaliChar, 0);
  CHECK_EQ(yaliUint8, 1);
  CHECK_EQ(yaliInt32, 2);
  CHECK_EQ(yaliInt, 2);
  CHECK_EQ(yaliUint32, 3);
  CHECK_EQ(yaliInt64, 4);
  CHECK_EQ(yaliUint64, 5);
  CHECK_EQ(yaliFloat16, 6);
  CHECK_EQ(yaliHalf, 6);
  CHECK_EQ(yaliFloat32, 7);
  CHECK_EQ(yaliFloat, 7);
  CHECK_EQ(yaliFloat64, 8);
  CHECK_EQ(yaliDouble, 8);
  CHECK_EQ(yaliBfloat16, 9);
  CHECK_EQ(yaliFloat8e4m3, 10);
  CHECK_EQ(yaliFloat8e5m2, 11);
  CHECK_EQ(yaliNumTypes, 12);
  CHECK_EQ(yaliNumOps, 5);
}

namespace {

struct CollName {
  yaliCollective_t coll;
  const char* name;
};
const CollName kCollNames[] = {
    {yaliCollAllReduce, "allreduce"}, {yaliCollReduceScatter, "reducescatter"},
    {yaliCollAllGather, "allgather"}, {yaliCollBroadcast, "broadcast"},
    {yaliCollReduce, "reduce"},       {yaliCollGather, "gather"},
    {yaliCollScatter, "scatter"},     {yaliCollAlltoAll, "alltoall"},
    {yaliCollAlltoAllv, "alltoallv"}};

// Every collective entry point, called with `comm` and plausible (fake, aligned) arguments: the
// send buffer at `b`, the receive buffer 1 MiB further.
char* second(void* b) { return static_cast<char*>(b) + (1 << 20); }
struct CollCall {
  const char* name;
  yaliResult_t (*call)(yaliComm_t comm, void* buf, size_t count);
};
const CollCall kCollCalls[] = {
    {"yaliAllReduce",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliAllReduce(b, second(b), n, yaliFloat32, yaliSum, c, nullptr);
     }},
    {"yaliReduceScatter",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliReduceScatter(b, second(b), n, yaliInt8, yaliMax, c, nullptr);
     }},
    {"yaliAllGather",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliAllGather(b, second(b), n, yaliFloat64, c, nullptr);
     }},
    {"yaliBroadcast",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliBroadcast(b, second(b), n, yaliUint8, 0, c, nullptr);
     }},
    {"yaliBcast",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliBcast(b, n, yaliFloat8e4m3, 0, c, nullptr);
     }},
    {"yaliReduce",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliReduce(b, second(b), n, yaliBfloat16, yaliProd, 0, c, nullptr);
     }},
    {"yaliGather",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliGather(b, second(b), n, yaliInt64, 0, c, nullptr);
     }},
    {"yaliScatter",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliScatter(b, second(b), n, yaliUint32, 0, c, nullptr);
     }},
    {"yaliAlltoAll",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliAlltoAll(b, second(b), n, yaliFloat8e5m2, c, nullptr);
     }},
    // AlltoAllv's forms: `n` as every count (host), the capacity (device), the rows per expert.
    {"yaliAlltoAllv",
     [](yaliComm_t c, void* b, size_t n) {
       const size_t counts[8] = {n, n, n, n, n, n, n, n};
       return yaliAlltoAllv(b, counts, nullptr, second(b), counts, nullptr, yaliBfloat16, c, nullptr);
     }},
    {"yaliAlltoAllvDeviceCounts",
     [](yaliComm_t c, void* b, size_t n) {
       return yaliAlltoAllvDeviceCounts(b, static_cast<const int64_t*>(b), nullptr, second(b), n, nullptr, nullptr,
                                        yaliFloat32, c, nullptr);
     }},
    {"yaliExpertDispatch",
     [](yaliComm_t c, void* b, size_t n) {
       const yaliExpertLayout_t layout = {14336, 4, 8, n, 0};
       return yaliExpertDispatch(b, static_cast<const int64_t*>(b), second(b), nullptr, nullptr, &layout, c, nullptr);
     }},
    {"yaliExpertCombine",
     [](yaliComm_t c, void* b, size_t n) {
       const yaliExpertLayout_t layout = {14336, 4, 8, n, 0};
       return yaliExpertCombine(second(b), static_cast<const int64_t*>(b), b, &layout, c, nullptr);
     }},
};

}  // namespace

TEST(collective_enum_values) {
  CHECK_EQ(yaliCollAllReduce, 0);
  CHECK_EQ(yaliCollReduceScatter, 1);
  CHECK_EQ(yaliCollAllGather, 2);
  CHECK_EQ(yaliCollBroadcast, 3);
  CHECK_EQ(yaliCollReduce, 4);
  CHECK_EQ(yaliCollGather, 5);
  CHECK_EQ(yaliCollScatter, 6);
  CHECK_EQ(yaliCollAlltoAll, 7);
  CHECK_EQ(yaliCollAlltoAllv, 8);
  CHECK_EQ(yaliNumCollectives, 9);
}

TEST(collective_names) {
  static_assert(sizeof(kCollNames) / sizeof(kCollNames[0]) == yaliNumCollectives,
                "kCollNames must list every yaliCollective_t value");
  for (const CollName& c : kCollNames) {
    const char* s = yaliCollectiveName(c.coll);
    CHECK_MSG(s != nullptr && std::strcmp(s, c.name) == 0,
              "yaliCollectiveName(%d) = %s, expected \"%s\"", (int)c.coll,
              ::yali_test::quoted(s).c_str(), c.name);
  }
  for (int bad : {-1, (int)yaliNumCollectives, 1000, 0x7fffffff}) {
    const char* s = yaliCollectiveName((yaliCollective_t)bad);
    CHECK_MSG(s != nullptr && std::strcmp(s, "unknown") == 0,
              "yaliCollectiveName(%d) = %s, expected \"unknown\"", bad,
              ::yali_test::quoted(s).c_str());
  }
}

TEST(null_comm_collectives) {
  // Plausible (fake, aligned) buffers: the NULL comm is what must be reported, before anything
  // looks at them (or at CUDA: zz_no_cuda_driver_loaded checks that), for any count.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  for (const CollCall& c : kCollCalls) {
    for (size_t count : {(size_t)16, (size_t)0, (size_t)1 << 20}) {
      EXPECT_ERROR(c.call(nullptr, fake, count), yaliInvalidArgument, c.name, "comm");
    }
  }
}

TEST(not_a_comm_collectives) {
  // A pointer that no yaliCommInit* returned: refused by the handle registry, never dereferenced.
  alignas(64) static char notAComm[4096];
  std::memset(notAComm, 0x5A, sizeof notAComm);
  yaliComm_t bogus = reinterpret_cast<yaliComm_t>(notAComm);
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  for (const CollCall& c : kCollCalls) {
    EXPECT_ERROR(c.call(bogus, fake, 16), yaliInvalidArgument, c.name, "comm");
  }
  yaliAlgoInfo_t info;
  for (const CollName& c : kCollNames) {
    EXPECT_ERROR(
        yaliAlgoInfo(bogus, c.coll, nullptr, nullptr, 1024, yaliFloat32, yaliSum, 0, &info),
        yaliInvalidArgument, "yaliAlgoInfo", "comm");
  }
}

TEST(null_comm_collective_algo_info) {
  yaliAlgoInfo_t info;
  std::memset(&info, 0x33, sizeof info);
  const yaliAlgoInfo_t before = info;
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  for (const CollName& c : kCollNames) {
    EXPECT_ERROR(
        yaliAlgoInfo(nullptr, c.coll, nullptr, nullptr, 1024, yaliFloat32, yaliSum, 0, &info),
        yaliInvalidArgument, "yaliAlgoInfo", "comm");
    EXPECT_ERROR(yaliAlgoInfo(nullptr, c.coll, fake, fake, 0, yaliUint64, yaliMin, 3, &info),
                 yaliInvalidArgument, "yaliAlgoInfo", "comm");
  }
  // With other bad arguments too (an unknown collective, no info), whichever the message names:
  // yaliInvalidArgument, never success, never a crash, and *info untouched.
  yaliResult_t r = yaliAlgoInfo(nullptr, (yaliCollective_t)yaliNumCollectives, nullptr, nullptr, 1,
                                yaliFloat32, yaliSum, 0, &info);
  CHECK_MSG(r == yaliInvalidArgument, "yaliAlgoInfo(NULL comm, collective 8) returned %d", (int)r);
  r = yaliAlgoInfo(nullptr, yaliCollAllGather, nullptr, nullptr, 1, yaliFloat32, yaliSum, 0,
                   nullptr);
  CHECK_MSG(r == yaliInvalidArgument, "yaliAlgoInfo(NULL comm, info NULL) returned %d", (int)r);
  CHECK_MSG(std::memcmp(&info, &before, sizeof info) == 0,
            "a failed yaliAlgoInfo wrote its output");
}

TEST(null_comm_collectives_bad_arguments_too) {
  // A NULL comm with other bad arguments as well (unknown type, avg on an integer type, a root out
  // of range): still refused with yaliInvalidArgument naming the call, whichever argument the
  // message names first.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  char* f = static_cast<char*>(fake);
  EXPECT_ERROR(
      yaliAllReduce(f, f + 64, 16, (yaliDataType_t)yaliNumTypes, yaliSum, nullptr, nullptr),
      yaliInvalidArgument, "yaliAllReduce", "");
  EXPECT_ERROR(yaliReduceScatter(f, f + 64, 16, yaliInt32, yaliAvg, nullptr, nullptr),
               yaliInvalidArgument, "yaliReduceScatter", "");
  EXPECT_ERROR(yaliReduce(f, f + 64, 16, yaliUint8, yaliAvg, 0, nullptr, nullptr),
               yaliInvalidArgument, "yaliReduce", "");
  EXPECT_ERROR(yaliBroadcast(f, f + 64, 16, yaliFloat32, -1, nullptr, nullptr), yaliInvalidArgument,
               "yaliBroadcast", "");
  EXPECT_ERROR(yaliBcast(f, 16, yaliFloat32, 1 << 30, nullptr, nullptr), yaliInvalidArgument,
               "yaliBcast", "");
  EXPECT_ERROR(yaliGather(f, f + 64, SIZE_MAX / 2, yaliFloat32, 0, nullptr, nullptr),
               yaliInvalidArgument, "yaliGather", "");
  EXPECT_ERROR(yaliScatter(f, f + 64, 16, (yaliDataType_t)-1, 0, nullptr, nullptr),
               yaliInvalidArgument, "yaliScatter", "");
  EXPECT_ERROR(yaliAlltoAll(f, f, 16, yaliFloat32, nullptr, nullptr), yaliInvalidArgument,
               "yaliAlltoAll", "");
  EXPECT_ERROR(yaliAllGather(nullptr, nullptr, 16, yaliFloat32, nullptr, nullptr),
               yaliInvalidArgument, "yaliAllGather", "");
  // Point-to-point: the comm first, whatever else is wrong (a bad peer, a NULL buffer, count 0).
  EXPECT_ERROR(yaliSend(f, 16, yaliFloat32, 1, nullptr, nullptr), yaliInvalidArgument, "yaliSend", "comm");
  EXPECT_ERROR(yaliRecv(f, 16, yaliFloat32, 1, nullptr, nullptr), yaliInvalidArgument, "yaliRecv", "comm");
  EXPECT_ERROR(yaliSend(nullptr, 0, yaliFloat32, -1, nullptr, nullptr), yaliInvalidArgument, "yaliSend", "comm");
  EXPECT_ERROR(yaliRecv(nullptr, 16, (yaliDataType_t)99, 1 << 20, nullptr, nullptr), yaliInvalidArgument,
               "yaliRecv", "comm");
}

TEST(collectives_in_a_group_with_null_comm) {
  // Inside a group, argument errors are returned by the call itself (yali.h); the group's end
  // (success, or the refused calls' error) still closes it.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  for (const CollCall& c : kCollCalls) {
    EXPECT_ERROR(c.call(nullptr, fake, 16), yaliInvalidArgument, c.name, "comm");
  }
  const yaliResult_t end = yaliGroupEnd();
  CHECK_MSG(end == yaliSuccess || end == yaliInvalidArgument,
            "yaliGroupEnd after refused calls returned %d (%s): %s", (int)end,
            yaliGetErrorString(end), lastError().c_str());
  // Balanced: one more end is unmatched.
  EXPECT_ERROR(yaliGroupEnd(), yaliInvalidUsage, "yaliGroupEnd", "");
}

// ---- Groups ---------------------------------------------------------------------------------------

TEST(group_end_without_start) {
  EXPECT_ERROR(yaliGroupEnd(), yaliInvalidUsage, "yaliGroupEnd", "");
}

TEST(group_nesting) {
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  CHECK_EQ(yaliGroupEnd(), yaliSuccess);
  CHECK_EQ(yaliGroupEnd(), yaliSuccess);
  // Balanced again: one more End is unmatched.
  EXPECT_ERROR(yaliGroupEnd(), yaliInvalidUsage, "yaliGroupEnd", "");
  // Nesting is per thread (like NCCL): a group opened here is not closed from another thread.
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  yaliResult_t otherEnd = yaliSuccess;
  std::thread([&] { otherEnd = yaliGroupEnd(); }).join();
  CHECK_MSG(otherEnd == yaliInvalidUsage, "yaliGroupEnd on a thread with no open group returned %d",
            (int)otherEnd);
  CHECK_EQ(yaliGroupEnd(), yaliSuccess);
}

// yaliGroupSimulateEnd closes groups as yaliGroupEnd does: balanced with yaliGroupStart, nested
// (either end at either level), per thread. That it drops the group's calls needs a comm, and so a
// GPU (tests/gpu/cases_collectives.cc, coll_groups).
TEST(group_simulate_end_closes_groups_like_group_end) {
  EXPECT_ERROR(yaliGroupSimulateEnd(), yaliInvalidUsage, "yaliGroupSimulateEnd", "");
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  CHECK_EQ(yaliGroupSimulateEnd(), yaliSuccess);
  EXPECT_ERROR(yaliGroupEnd(), yaliInvalidUsage, "yaliGroupEnd", "");
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  CHECK_EQ(yaliGroupSimulateEnd(), yaliSuccess);
  CHECK_EQ(yaliGroupEnd(), yaliSuccess);
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  CHECK_EQ(yaliGroupEnd(), yaliSuccess);
  CHECK_EQ(yaliGroupSimulateEnd(), yaliSuccess);
  EXPECT_ERROR(yaliGroupSimulateEnd(), yaliInvalidUsage, "yaliGroupSimulateEnd", "");
  // Calls refused inside the group leave nothing to drop; the group still closes.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(1) << 20);
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  for (const CollCall& c : kCollCalls) {
    EXPECT_ERROR(c.call(nullptr, fake, 16), yaliInvalidArgument, c.name, "comm");
  }
  CHECK_EQ(yaliGroupSimulateEnd(), yaliSuccess);
  EXPECT_ERROR(yaliGroupEnd(), yaliInvalidUsage, "yaliGroupEnd", "");
  // Per thread: a group opened here is not closed from another thread.
  CHECK_EQ(yaliGroupStart(), yaliSuccess);
  yaliResult_t otherEnd = yaliSuccess;
  std::thread([&] { otherEnd = yaliGroupSimulateEnd(); }).join();
  CHECK_EQ(otherEnd, yaliInvalidUsage);
  CHECK_EQ(yaliGroupSimulateEnd(), yaliSuccess);
}

// ---- Runs last: none of the above may have loaded the CUDA driver --------------------------------

TEST(zz_no_cuda_driver_loaded) {
  // yaliGetUniqueId and every argument check must work without touching CUDA (the multi-process
  // launcher calls yaliGetUniqueId in a parent that then forks). Touching CUDA loads libcuda.so.
  if (gDriverLoadedAtStart) {
    std::printf("    note: libcuda.so was already loaded when main() started; check not possible\n");
    return;
  }
  CHECK_MSG(!cudaDriverLoaded(),
            "libcuda.so is mapped into this process: some call above touched CUDA");
}

namespace {
void onAlarm(int) {
  // A call that should fail at once is blocking (for example, it went on to wait for peers).
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "TIMEOUT: host test %s did not finish in 60 s\n",
                        ::yali_test::currentTestName());
  if (n > 0) (void)!write(1, buf, (size_t)n);
  _exit(1);
}
}  // namespace

int main(int argc, char** argv) {
  gDriverLoadedAtStart = cudaDriverLoaded();
  std::signal(SIGALRM, onAlarm);
  // Each test is fast; a per-test alarm names the one that hangs.
  ::yali_test::beforeEachTest() = [](const char*) { alarm(60); };
  return ::yali_test::runAllTests(argc, argv);
}
