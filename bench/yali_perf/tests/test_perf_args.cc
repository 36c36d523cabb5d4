// Host tests of yali-perf's GPU-free parts: the option parser and size sweep, the launcher
// environment, statistics, the report formats, --tune's plan and table (read back with the
// library's own parser), and the file-based host exchange (with forked processes). No CUDA call
// is made. Prints "N passed, N failed" last; non-zero exit on failure.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "coll_shape.h"
#include "host_exchange.h"
#include "json_writer.h"
#include "launch_env.h"
#include "perf_args.h"
#include "perf_test_support.h"
#include "report.h"
#include "sample_stats.h"
#include "tune_plan.h"
#include "tuning/selector.h"  // the library's tuning-file parser (yali_host_logic)

using namespace yali_perf;

namespace {

using namespace yali_perf_test;

bool ParseFails(const std::vector<std::string>& words, const std::string& error_part) {
  PerfArgs args;
  std::string error;
  if (Parse(words, &args, &error)) return false;
  if (error.find(error_part) == std::string::npos) {
    std::printf("  error '%s' lacks '%s'\n", error.c_str(), error_part.c_str());
    return false;
  }
  return true;
}

bool Near(double a, double b) { return a - b < 1e-9 && b - a < 1e-9; }

size_t SizeOf(const std::string& text) {
  size_t bytes = 0;
  return ParseSize(text, &bytes) ? bytes : static_cast<size_t>(-1);
}

// ---- Options ------------------------------------------------------------------------------------

void TestParseSize() {
  EXPECT(SizeOf("4096") == 4096);
  EXPECT(SizeOf("0") == 0);
  EXPECT(SizeOf("4K") == 4096);
  EXPECT(SizeOf("4k") == 4096);
  EXPECT(SizeOf("4KB") == 4096);
  EXPECT(SizeOf("4KiB") == 4096);
  EXPECT(SizeOf("32M") == 32u << 20);
  EXPECT(SizeOf("1G") == size_t(1) << 30);
  EXPECT(SizeOf("2GB") == size_t(2) << 30);
  EXPECT(SizeOf("1T") == size_t(1) << 40);
  EXPECT(SizeOf("100B") == 100);
  for (const char* bad : {"", "K", "4X", "4KX", "-1", "1.5M", " 4K", "4 K", "4KBB"})
    Expect(SizeOf(bad) == static_cast<size_t>(-1), std::string("ParseSize rejects '") + bad + "'",
           __LINE__);
  EXPECT(SizeOf("99999999999999999999999") == static_cast<size_t>(-1));
  EXPECT(SizeOf("17179869184G") == static_cast<size_t>(-1));  // overflows 64 bits
}

void TestDefaults() {
  PerfArgs args;
  EXPECT(ParseOk({}, &args));
  EXPECT(args.min_bytes == 4096 && args.max_bytes == size_t(1) << 30);
  EXPECT(args.step_factor == 4.0);
  EXPECT(args.iters == 20 && args.warmup == 5 && args.check);
  EXPECT(args.dtypes.size() == 1 && args.dtypes[0] == DType::kFloat);
  EXPECT(args.ops.size() == 1 && args.ops[0] == RedOp::kSum);
  EXPECT(args.run_yali && args.run_nccl && !args.impl_given);
  EXPECT(args.timing == TimingMode::kEvents && args.graph_launches == 0);
  EXPECT(args.placements == PlacementSet::kBoth);
  EXPECT(args.average == RankAggregate::kMean);
  EXPECT(args.ngpus == 0 && args.json_path.empty() && !args.help);
  EXPECT(args.repeat == 1 && args.max_case_seconds == 0);
  EXPECT(!args.registered);
  // AllReduce alone, root 0 (nccl-tests' default), a fixed -e: the behaviour before -C.
  EXPECT(args.collectives == std::vector<CollId>({CollId::kAllReduce}));
  EXPECT(args.root == 0 && !args.max_bytes_auto);
}

void TestNcclTestsFlags() {
  PerfArgs args;
  EXPECT(ParseOk({"-b", "8", "-e", "128M", "-f", "2", "-g", "4", "-n", "50", "-w", "10", "-c", "0",
                  "-d", "bf16", "-o", "max", "-J", "out.json", "-a", "3"},
                 &args));
  EXPECT(args.min_bytes == 8 && args.max_bytes == 128u << 20 && args.step_factor == 2.0);
  EXPECT(args.ngpus == 4 && args.iters == 50 && args.warmup == 10 && !args.check);
  EXPECT(args.dtypes.size() == 1 && args.dtypes[0] == DType::kBfloat16);
  EXPECT(args.ops.size() == 1 && args.ops[0] == RedOp::kMax);
  EXPECT(args.json_path == "out.json" && args.average == RankAggregate::kMax);

  // Attached values and long forms, including nccl-tests' spellings.
  EXPECT(ParseOk({"-b4K", "-e1M", "--iters=7", "--warmup_iters", "3", "--datatype=half",
                  "--stepfactor", "8"},
                 &args));
  EXPECT(args.min_bytes == 4096 && args.max_bytes == 1u << 20 && args.iters == 7 &&
         args.warmup == 3 && args.step_factor == 8.0);
  EXPECT(args.dtypes[0] == DType::kHalf);
  EXPECT(ParseOk({"-h"}, &args) && args.help);
  EXPECT(ParseOk({"--help"}, &args) && args.help);
}

void TestLists() {
  PerfArgs args;
  EXPECT(ParseOk({"-d", "all", "-o", "all"}, &args));
  EXPECT(args.dtypes == AllDTypes() && args.ops.size() == 5);
  // Every NCCL type, in nccl-tests' order and with its -d names.
  const std::vector<std::string> names = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                          "half", "float", "double", "bfloat16", "f8e4m3",
                                          "f8e5m2"};
  const std::vector<size_t> element_sizes = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  EXPECT(args.dtypes.size() == names.size());
  for (size_t i = 0; i < names.size() && i < args.dtypes.size(); ++i) {
    Expect(DTypeName(args.dtypes[i]) == names[i] && ElementSize(args.dtypes[i]) == element_sizes[i],
           "-d all type " + std::to_string(i) + " is " + names[i], __LINE__);
    PerfArgs one;
    Expect(ParseOk({"-d", names[i]}, &one) && one.dtypes.size() == 1 &&
               one.dtypes[0] == args.dtypes[i],
           "-d " + names[i] + " parses back", __LINE__);
  }
  EXPECT(ParseOk({"-d", "fp16,FP32,fp16", "-o", "sum,avg,prod"}, &args));
  EXPECT(args.dtypes.size() == 2 && args.dtypes[0] == DType::kHalf &&
         args.dtypes[1] == DType::kFloat);
  EXPECT(args.ops.size() == 3 && args.ops[1] == RedOp::kAvg && args.ops[2] == RedOp::kProd);
  EXPECT(ParseOk({"-d", "float32,bfloat16"}, &args) && args.dtypes.size() == 2);
  // Aliases: NCCL's C names without the prefix, and short spellings.
  EXPECT(ParseOk({"-d", "char,int,fp64,e4m3,FP8E5M2,bf16"}, &args));
  EXPECT(args.dtypes == std::vector<DType>({DType::kInt8, DType::kInt32, DType::kDouble,
                                            DType::kF8e4m3, DType::kF8e5m2, DType::kBfloat16}));
  EXPECT(ParseFails({"-d", "int16"}, "-d/--dtype"));
  EXPECT(ParseFails({"-d", "float,"}, "-d/--dtype"));
  EXPECT(ParseFails({"-o", "xor"}, "-o/--op"));

  EXPECT(!IsFloating(DType::kInt8) && !IsFloating(DType::kUint64) && IsFloating(DType::kDouble) &&
         IsFloating(DType::kF8e4m3) && IsFloating(DType::kHalf));
  EXPECT(DTypeEpsilon(DType::kDouble) == 1.0 / 4503599627370496.0 &&
         DTypeEpsilon(DType::kF8e4m3) == 0.125 && DTypeEpsilon(DType::kF8e5m2) == 0.25 &&
         DTypeEpsilon(DType::kInt32) == 0.0);
}

void TestCollectiveArgs() {
  PerfArgs args;
  EXPECT(ParseOk({"-C", "reducescatter,allgather"}, &args));
  EXPECT(args.collectives ==
         std::vector<CollId>({CollId::kReduceScatter, CollId::kAllGather}));
  // Command-line order, duplicates dropped; '_' and '-' ignored; bcast is broadcast.
  EXPECT(ParseOk({"--coll=alltoall,all_reduce,Reduce-Scatter,alltoall,bcast,rsag"}, &args));
  EXPECT(args.collectives == std::vector<CollId>({CollId::kAlltoAll, CollId::kAllReduce,
                                                  CollId::kReduceScatter, CollId::kBroadcast,
                                                  CollId::kRsAg}));
  EXPECT(ParseOk({"--collective", "rs_ag"}, &args) &&
         args.collectives == std::vector<CollId>({CollId::kRsAg}));
  EXPECT(ParseOk({"-C", "all"}, &args) && args.collectives == AllCollectives());
  EXPECT(AllCollectives().size() == 10);
  const std::vector<std::string> names = {"allreduce", "reducescatter", "allgather",
                                          "broadcast", "reduce",        "gather",
                                          "scatter",   "alltoall",      "rs_ag",
                                          "sendrecv"};
  for (size_t i = 0; i < names.size(); ++i) {
    Expect(CollName(AllCollectives()[i]) == names[i], "collective " + names[i], __LINE__);
    PerfArgs one;
    Expect(ParseOk({"-C", names[i]}, &one) && one.collectives.size() == 1 &&
               one.collectives[0] == AllCollectives()[i],
           "-C " + names[i] + " parses back", __LINE__);
  }
  // The library collectives have yaliCollective_t's values (the backends cast them).
  EXPECT(static_cast<int>(CollId::kAllReduce) == 0 && static_cast<int>(CollId::kReduceScatter) == 1 &&
         static_cast<int>(CollId::kAllGather) == 2 && static_cast<int>(CollId::kBroadcast) == 3 &&
         static_cast<int>(CollId::kReduce) == 4 && static_cast<int>(CollId::kGather) == 5 &&
         static_cast<int>(CollId::kScatter) == 6 && static_cast<int>(CollId::kAlltoAll) == 7);
  // sendrecv: nccl-tests' ring of point-to-point calls, in -C all; its spellings like the others'.
  EXPECT(ParseOk({"-C", "sendrecv"}, &args) &&
         args.collectives == std::vector<CollId>({CollId::kSendRecv}));
  EXPECT(ParseOk({"-C", "send_recv,SendRecv,allreduce,send-recv"}, &args) &&
         args.collectives == std::vector<CollId>({CollId::kSendRecv, CollId::kAllReduce}));
  EXPECT(std::string(CollName(CollId::kSendRecv)) == "sendrecv");
  // Not a yaliCollective_t (yaliAlgoInfo describes none): a value past the library's and rs_ag's.
  EXPECT(static_cast<int>(CollId::kSendRecv) == 10);
  EXPECT(ParseFails({"-C", "hypercube"}, "-C/--coll"));
  EXPECT(ParseFails({"-C", "send"}, "-C/--coll"));
  EXPECT(ParseFails({"-C", "allreduce,"}, "-C/--coll"));
  EXPECT(ParseFails({"-C"}, "needs a value"));

  EXPECT(ParseOk({"-r", "3"}, &args) && args.root == 3);
  EXPECT(ParseOk({"--root=all"}, &args) && args.root == kEveryRoot);
  EXPECT(ParseOk({"-r", "-1"}, &args) && args.root == kEveryRoot);  // nccl-tests' spelling
  EXPECT(ParseOk({"-r", "2", "-r", "0"}, &args) && args.root == 0);
  for (const char* bad : {"-2", "x", "1.5", ""})
    Expect(ParseFails({"-r", bad}, "for -r/--root"), std::string("-r rejects '") + bad + "'",
           __LINE__);

  // --tune names its collectives with --tune-colls; -C may only repeat the default allreduce.
  EXPECT(ParseOk({"--tune", "-C", "allreduce"}, &args));
  EXPECT(ParseFails({"--tune", "-C", "allgather"}, "-C/--coll does not apply to --tune"));
  EXPECT(ParseFails({"--tune", "-C", "all"}, "does not apply to --tune"));
  EXPECT(ParseFails({"--tune", "-r", "0"}, "-r/--root does not apply to --tune"));

  const std::string usage = PerfUsage("yali-perf");
  for (const char* needle : {"-C, --coll <list>", "-r, --root <rank|all>", "rs_ag", "alltoall",
                             "sendrecv", "-e, --maxbytes <size|max>", "f8e4m3",
                             "YALI_PERF_MEM_HEADROOM", "skipped"})
    Expect(usage.find(needle) != std::string::npos, std::string("usage has ") + needle, __LINE__);
  // Every line of -h fits 100 columns (the table's readers use terminals).
  std::istringstream lines(usage);
  bool narrow = true;
  for (std::string line; std::getline(lines, line);) narrow = narrow && line.size() <= 100;
  EXPECT(narrow);
}

void TestMaxBytes() {
  PerfArgs args;
  EXPECT(ParseOk({"-e", "max"}, &args) && args.max_bytes_auto);
  EXPECT(ParseOk({"--maxbytes=MAX", "-b", "1G"}, &args) && args.max_bytes_auto);
  // -b may exceed the default -e when -e is max; the last -e wins.
  EXPECT(ParseOk({"-b", "4G", "-e", "max"}, &args) && args.max_bytes_auto);
  EXPECT(ParseOk({"-e", "max", "-e", "64M"}, &args) && !args.max_bytes_auto &&
         args.max_bytes == 64u << 20);
  EXPECT(ParseFails({"-e", "maximum"}, "or max"));
  EXPECT(ParseFails({"-b", "max"}, "-b/--minbytes"));
  EXPECT(ParseFails({"--tune", "-e", "max"}, "does not apply to --tune"));

  // The sweep up to what fits: -b, x4 steps, then the limit itself.
  EXPECT(ParseOk({"-b", "1M", "-e", "max"}, &args));
  const size_t limit = (size_t(37) << 30) + 12345 * 4096;
  std::vector<size_t> sizes = SizeSweepUpTo(args, limit);
  EXPECT(sizes.front() == 1u << 20 && sizes.back() == limit);
  EXPECT(sizes.size() == 9 && sizes[7] == size_t(16) << 30);  // 1M, 4M, .. 16G, then the limit
  // A step that lands on the limit is not repeated.
  EXPECT(SizeSweepUpTo(args, 16u << 20) == std::vector<size_t>({1u << 20, 4u << 20, 16u << 20}));
  // -b above the limit: the limit alone.
  EXPECT(ParseOk({"-b", "1G", "-e", "max"}, &args));
  EXPECT(SizeSweepUpTo(args, 256u << 20) == std::vector<size_t>({256u << 20}));
  // Without -e max the limit only cuts the sweep.
  EXPECT(ParseOk({"-b", "1M", "-e", "64M"}, &args));
  EXPECT(SizeSweepUpTo(args, 20u << 20) == std::vector<size_t>({1u << 20, 4u << 20, 16u << 20}));
  EXPECT(SizeSweepUpTo(args, size_t(1) << 40) == SizeSweep(args));
}

// The shapes against nccl-tests 2.19.6's src/<collective>.cu (GetCollByteCount, GetBw).
void TestCollShapes() {
  auto same = [](const CollShape& s, size_t count, size_t send, size_t recv, size_t send_off,
                 size_t recv_off, size_t bytes) {
    return s.count == count && s.send_count == send && s.recv_count == recv &&
           s.send_in_place_offset == send_off && s.recv_in_place_offset == recv_off &&
           s.bytes == bytes;
  };
  // AllReduce, Broadcast, Reduce: count = size / element size, one buffer in and out.
  for (CollId coll : {CollId::kAllReduce, CollId::kBroadcast, CollId::kReduce})
    Expect(same(ShapeFor(coll, 4096, 4, 8), 1024, 1024, 1024, 0, 0, 4096),
           std::string(CollName(coll)) + " shape", __LINE__);
  EXPECT(same(ShapeFor(CollId::kAllReduce, 4097, 4, 3), 1024, 1024, 1024, 0, 0, 4096));
  // ReduceScatter: per-rank blocks of count/n rounded down to 16 bytes; recv in place at
  // send + rank * block; the size column is the input.
  EXPECT(same(ShapeFor(CollId::kReduceScatter, 4096, 4, 8), 128, 1024, 128, 0, 128, 4096));
  EXPECT(same(ShapeFor(CollId::kReduceScatter, 4096, 4, 3), 340, 1020, 340, 0, 340, 4080));
  EXPECT(same(ShapeFor(CollId::kReduceScatter, 1000, 1, 3), 320, 960, 320, 0, 320, 960));
  EXPECT(same(ShapeFor(CollId::kReduceScatter, 1000, 8, 3), 40, 120, 40, 0, 40, 960));
  // AllGather and Gather: send in place at recv + rank * block; the size column is the output.
  for (CollId coll : {CollId::kAllGather, CollId::kGather})
    Expect(same(ShapeFor(coll, 4096, 2, 8), 256, 256, 2048, 256, 0, 4096),
           std::string(CollName(coll)) + " shape", __LINE__);
  // Scatter: recv in place at send + rank * block.
  EXPECT(same(ShapeFor(CollId::kScatter, 4096, 2, 8), 256, 2048, 256, 0, 256, 4096));
  // AlltoAll: n blocks in and out, no in-place offsets.
  EXPECT(same(ShapeFor(CollId::kAlltoAll, 4096, 4, 8), 128, 1024, 1024, 0, 0, 4096));
  // rs_ag: an AllReduce of n whole blocks, the reducescatter rows' sizes.
  EXPECT(same(ShapeFor(CollId::kRsAg, 4096, 4, 3), 1020, 1020, 1020, 0, 0, 4080));
  // Fewer elements than ranks: count 0, as nccl-tests.
  EXPECT(same(ShapeFor(CollId::kAllGather, 8, 4, 4), 0, 0, 0, 0, 0, 0));
  // SendRecv: count = size / element size, whole (no per-rank blocks, no 16-byte rounding), the
  // same count out and in; no in-place offsets (out of place only).
  EXPECT(same(ShapeFor(CollId::kSendRecv, 4096, 4, 8), 1024, 1024, 1024, 0, 0, 4096));
  EXPECT(same(ShapeFor(CollId::kSendRecv, 1000, 8, 3), 125, 125, 125, 0, 0, 1000));
  EXPECT(same(ShapeFor(CollId::kSendRecv, 4097, 4, 3), 1024, 1024, 1024, 0, 0, 4096));
  EXPECT(same(ShapeFor(CollId::kSendRecv, 6, 4, 2), 1, 1, 1, 0, 0, 4));
  EXPECT(same(ShapeFor(CollId::kSendRecv, 2, 4, 2), 0, 0, 0, 0, 0, 0));

  // busBW factors.
  EXPECT(Near(BusFactor(CollId::kAllReduce, 8), 1.75) && Near(BusFactor(CollId::kRsAg, 4), 1.5));
  for (CollId coll : {CollId::kReduceScatter, CollId::kAllGather, CollId::kAlltoAll,
                      CollId::kGather, CollId::kScatter})
    Expect(Near(BusFactor(coll, 8), 0.875) && std::string(BusFactorText(coll)) == "(n-1)/n",
           std::string(CollName(coll)) + " busbw factor", __LINE__);
  for (CollId coll : {CollId::kBroadcast, CollId::kReduce, CollId::kSendRecv})
    Expect(Near(BusFactor(coll, 8), 1.0) && std::string(BusFactorText(coll)) == "1",
           std::string(CollName(coll)) + " busbw factor", __LINE__);
  // nccl-tests' SendRecvGetBw: busbw = algbw whatever the world size.
  for (int n : {1, 2, 3, 8})
    Expect(Near(BusFactor(CollId::kSendRecv, n), 1.0),
           "sendrecv busbw factor at n=" + std::to_string(n), __LINE__);
  EXPECT(std::string(BusFactorText(CollId::kAllReduce)) == "2(n-1)/n");

  EXPECT(CollReduces(CollId::kReduce) && CollReduces(CollId::kRsAg) &&
         !CollReduces(CollId::kAllGather) && !CollReduces(CollId::kAlltoAll));
  EXPECT(CollHasRoot(CollId::kScatter) && !CollHasRoot(CollId::kAlltoAll));
  EXPECT(!CollHasInPlace(CollId::kAlltoAll) && CollHasInPlace(CollId::kScatter));
  // SendRecv only moves data, has no root, differs per rank and has no in-place form (nccl-tests
  // runs one on a single buffer and leaves it unchecked).
  EXPECT(!CollReduces(CollId::kSendRecv) && !CollHasRoot(CollId::kSendRecv) &&
         !CollSameOutputEverywhere(CollId::kSendRecv) && !CollHasInPlace(CollId::kSendRecv));
  EXPECT(CollNoInPlaceReason(CollId::kSendRecv).find("in-place sendrecv") != std::string::npos &&
         CollNoInPlaceReason(CollId::kSendRecv).find("out-of-place only") != std::string::npos);
  EXPECT(CollNoInPlaceReason(CollId::kAlltoAll) ==
         "NCCL defines no in-place alltoall and YALI refuses overlapping buffers for it: "
         "out-of-place only");
  for (int rank : {0, 1, 2})
    Expect(OutputCount(CollId::kSendRecv, ShapeFor(CollId::kSendRecv, 4096, 4, 3), rank, 0, 3) ==
               1024,
           "sendrecv output count on rank " + std::to_string(rank), __LINE__);
  EXPECT(CollSameOutputEverywhere(CollId::kBroadcast) && !CollSameOutputEverywhere(CollId::kReduce));
  const CollShape gather = ShapeFor(CollId::kGather, 4096, 4, 4);
  EXPECT(OutputCount(CollId::kGather, gather, 2, 2, 4) == 1024 &&
         OutputCount(CollId::kGather, gather, 1, 2, 4) == 0);
  EXPECT(OutputCount(CollId::kScatter, ShapeFor(CollId::kScatter, 4096, 4, 4), 1, 2, 4) == 256);
}

void TestYaliFlags() {
  PerfArgs args;
  EXPECT(ParseOk({"--impl", "yali"}, &args) && args.run_yali && !args.run_nccl && args.impl_given);
  EXPECT(ParseOk({"--impl", "nccl"}, &args) && !args.run_yali && args.run_nccl);
  EXPECT(ParseOk({"--impl=yali,nccl"}, &args) && args.run_yali && args.run_nccl);
  EXPECT(ParseFails({"--impl", "mpi"}, "--impl"));
  EXPECT(ParseOk({"--inplace", "0"}, &args) && args.placements == PlacementSet::kOutOfPlace);
  EXPECT(ParseOk({"--inplace", "1"}, &args) && args.placements == PlacementSet::kInPlace);
  EXPECT(ParseFails({"--inplace", "3"}, "--inplace"));
  EXPECT(ParseOk({"--timing", "latency"}, &args) && args.timing == TimingMode::kLatency);
  EXPECT(ParseOk({"--timing", "throughput"}, &args) && args.timing == TimingMode::kThroughput);
  EXPECT(ParseOk({"--percentiles"}, &args) && args.percentiles);
  EXPECT(ParseFails({"--timing", "wallclock"}, "--timing"));

  // Graph timing: -G N > 0 implies it; --timing graph alone launches once.
  EXPECT(ParseOk({"-G", "10"}, &args) && args.timing == TimingMode::kGraph &&
         args.graph_launches == 10);
  EXPECT(ParseOk({"--timing", "graph"}, &args) && args.graph_launches == 1);
  EXPECT(ParseOk({"--timing", "graph", "-G", "4"}, &args) && args.graph_launches == 4);
  EXPECT(ParseOk({"-G", "0"}, &args) && args.timing == TimingMode::kEvents);
  EXPECT(ParseFails({"-G", "3", "--timing", "events"}, "--timing graph"));
}

void TestRegistered() {
  PerfArgs args;
  EXPECT(ParseOk({"-R", "1"}, &args) && args.registered);
  EXPECT(ParseOk({"-R", "0"}, &args) && !args.registered);
  EXPECT(ParseOk({"-R1"}, &args) && args.registered);
  EXPECT(ParseOk({"--registered=1"}, &args) && args.registered);
  EXPECT(ParseOk({"--registered", "0"}, &args) && !args.registered);
  // nccl-tests' long spelling.
  EXPECT(ParseOk({"--local_register", "1"}, &args) && args.registered);
  // The last occurrence wins, as for every option.
  EXPECT(ParseOk({"-R", "1", "-R", "0"}, &args) && !args.registered);
  // 2: each library at its best (NCCL on symmetric windows), nccl-tests' value.
  EXPECT(ParseOk({"-R", "2"}, &args) && args.registered == 2);
  EXPECT(ParseOk({"--local_register=2"}, &args) && args.registered == 2);
  for (const char* bad : {"3", "-1", "yes", ""})
    Expect(ParseFails({"-R", bad},
                      "for -R/--registered: expected 0 (unregistered buffers), 1 (registered) or 2"),
           std::string("-R rejects '") + bad + "'", __LINE__);
  EXPECT(ParseFails({"-R"}, "option -R/--registered needs a value"));
  // --tune registers buffers itself (the *_direct_min steps only): -R 0 is accepted, -R 1 refused.
  EXPECT(ParseOk({"--tune", "-R", "0"}, &args) && args.tune && !args.registered);
  EXPECT(ParseFails({"--tune", "-R", "1"}, "-R/--registered does not apply to --tune"));
  EXPECT(ParseFails({"--registered=1", "--tune"}, "does not apply to --tune"));
  EXPECT(ParseFails({"--tune", "-R", "2"}, "-R/--registered does not apply to --tune"));
  // -C alltoallv's NCCL side is send/recv: -R 2 is refused there, 0 and 1 are not.
  EXPECT(ParseOk({"-C", "alltoallv", "-R", "1"}, &args) && args.registered == 1);
  EXPECT(ParseFails({"-C", "alltoallv", "-R", "2"}, "does not apply to -C alltoallv"));
  EXPECT(PerfUsage("yali-perf").find("-R, --registered <0|1|2>") != std::string::npos);
}

// -x: NCCL's CTA policy, by nccl-tests' number or NCCL's name; not set by default.
void TestCtaPolicy() {
  PerfArgs args;
  EXPECT(ParseOk({}, &args) && args.nccl_cta_policy == -1);
  EXPECT(ParseOk({"-x", "2"}, &args) && args.nccl_cta_policy == 2);
  EXPECT(ParseOk({"--cta_policy", "1"}, &args) && args.nccl_cta_policy == 1);
  EXPECT(ParseOk({"--cta-policy=zero"}, &args) && args.nccl_cta_policy == 2);
  EXPECT(ParseOk({"-x", "default"}, &args) && args.nccl_cta_policy == 0);
  EXPECT(ParseOk({"-x", "efficiency", "-R", "2"}, &args) && args.nccl_cta_policy == 1 &&
         args.registered == 2);
  for (const char* bad : {"3", "-1", "ZERO", ""})
    Expect(ParseFails({"-x", bad}, "for -x/--cta-policy: expected 0 (default), 1 (efficiency) or 2"),
           std::string("-x rejects '") + bad + "'", __LINE__);
  EXPECT(ParseFails({"--tune", "-x", "0"}, "-x/--cta-policy does not apply to --tune"));
  EXPECT(PerfUsage("yali-perf").find("-x, --cta-policy <0|1|2>") != std::string::npos);
}

// --nccl-memory: NCCL on its own ncclMemAlloc buffers (the default, as nccl-tests) or on YALI's
// cudaMalloc ones; shared cannot serve -R 2's symmetric windows.
void TestNcclMemory() {
  PerfArgs args;
  EXPECT(ParseOk({}, &args) && args.nccl_own_memory);
  EXPECT(ParseOk({"--nccl-memory", "shared"}, &args) && !args.nccl_own_memory);
  EXPECT(ParseOk({"--nccl-memory=own", "-R", "2"}, &args) && args.nccl_own_memory && args.registered == 2);
  EXPECT(ParseOk({"--nccl-memory", "shared", "-R", "1"}, &args) && !args.nccl_own_memory);
  for (const char* bad : {"cudamalloc", "OWN", ""})
    Expect(ParseFails({"--nccl-memory", bad}, "for --nccl-memory: expected own (NCCL on its own"),
           std::string("--nccl-memory rejects '") + bad + "'", __LINE__);
  EXPECT(ParseFails({"--nccl-memory", "shared", "-R", "2"}, "--nccl-memory shared does not go with -R 2"));
  EXPECT(ParseFails({"--tune", "--nccl-memory", "own"}, "--nccl-memory does not apply to --tune"));
  EXPECT(PerfUsage("yali-perf").find("--nccl-memory <own|shared>") != std::string::npos);
}

void TestRepeatAndTimeLimit() {
  PerfArgs args;
  EXPECT(ParseOk({"--repeat", "5", "--max-case-time", "0.02"}, &args));
  EXPECT(args.repeat == 5 && args.max_case_seconds == 0.02);
  EXPECT(ParseOk({"--repeat=2", "--max-case-time=1.5"}, &args));
  EXPECT(args.repeat == 2 && args.max_case_seconds == 1.5);
  for (const char* bad : {"0", "-1", "two", "1.5", ""})
    Expect(ParseFails({"--repeat", bad}, "--repeat: expected an integer >= 1"),
           std::string("--repeat rejects '") + bad + "'", __LINE__);
  for (const char* bad : {"0", "-0.5", "soon", "nan", "inf", "1s", ""})
    Expect(ParseFails({"--max-case-time", bad}, "--max-case-time: expected seconds > 0"),
           std::string("--max-case-time rejects '") + bad + "'", __LINE__);
  EXPECT(ParseFails({"--max-case-time"}, "option --max-case-time needs a value"));
  EXPECT(PerfUsage("yali-perf").find("--max-case-time <s>") != std::string::npos);
  EXPECT(PerfUsage("yali-perf").find("--repeat <n>") != std::string::npos);
}

void TestCallCountsWithinTimeLimit() {
  auto same = [](CallCounts c, int iters, int warmup) {
    return c.iters == iters && c.warmup == warmup;
  };
  // No limit: -n and -w as given, whatever the estimate.
  EXPECT(same(CallCountsWithinTimeLimit(100, 20, 0, 1.0, 2), 100, 20));
  // Fits: 100 x 2 calls x 10 us = 2 ms < 20 ms.
  EXPECT(same(CallCountsWithinTimeLimit(100, 20, 0.02, 10e-6, 2), 100, 20));
  // Too long: 20 ms / (2 x 200 us) = 50 iterations; the warmup shrinks by the same half.
  EXPECT(same(CallCountsWithinTimeLimit(100, 20, 0.02, 200e-6, 2), 50, 10));
  // Rounding: 20 ms / 300 us = 66.7 -> 66 iterations; warmup 20 x 0.667 = 13.3 -> 14.
  EXPECT(same(CallCountsWithinTimeLimit(100, 20, 0.02, 300e-6, 1), 66, 14));
  // Very long calls: never below the floor; the warmup keeps only the probe's calls.
  EXPECT(same(CallCountsWithinTimeLimit(100, 20, 0.02, 10e-3, 2), kMinItersWithinTimeLimit,
              kTimeLimitProbeCalls));
  // The floor never raises -n. The warmup still shrinks by what -n would have: 1 of 5 fits,
  // so 20 x 1/5 = 4 warmup calls.
  EXPECT(same(CallCountsWithinTimeLimit(5, 20, 0.02, 10e-3, 2), 5, 4));
  // The probe's calls are made even when -w asks for fewer.
  EXPECT(same(CallCountsWithinTimeLimit(100, 0, 0.02, 10e-6, 1), 100, kTimeLimitProbeCalls));
  EXPECT(same(CallCountsWithinTimeLimit(100, 0, 0.02, 10e-3, 1), kMinItersWithinTimeLimit,
              kTimeLimitProbeCalls));
  // A zero estimate (a call below the clock's resolution) cannot exceed the limit.
  EXPECT(same(CallCountsWithinTimeLimit(100, 20, 0.02, 0.0, 2), 100, 20));
  // Huge -n against a tiny estimate: no overflow.
  EXPECT(same(CallCountsWithinTimeLimit(100000000, 5, 1000, 1e-9, 2), 100000000, 5));

  EXPECT(CallsPerIteration(TimingMode::kEvents, 0) == 2);
  EXPECT(CallsPerIteration(TimingMode::kGraph, 1) == 2);
  EXPECT(CallsPerIteration(TimingMode::kGraph, 4) == 5);
  EXPECT(CallsPerIteration(TimingMode::kThroughput, 0) == 1);
  EXPECT(CallsPerIteration(TimingMode::kLatency, 0) == 1);
}

void TestBadOptions() {
  EXPECT(ParseFails({"-q"}, "unknown option"));
  EXPECT(ParseFails({"--frobnicate"}, "unknown option"));
  EXPECT(ParseFails({"stray"}, "unexpected argument"));
  EXPECT(ParseFails({"-b"}, "needs a value"));
  EXPECT(ParseFails({"-b", "1M", "-e", "4K"}, "larger than -e"));
  EXPECT(ParseFails({"-n", "0"}, "-n/--iters"));
  EXPECT(ParseFails({"-n", "ten"}, "-n/--iters"));
  EXPECT(ParseFails({"-w", "-1"}, "-w/--warmup"));
  EXPECT(ParseFails({"-c", "2"}, "-c/--check"));
  EXPECT(ParseFails({"-a", "4"}, "-a/--average"));
  // nccl-tests' numbering: 0 rank 0, 1 mean, 2 min, 3 max (yali-perf had 0 min, 2 max: an
  // nccl-tests -a 2, the minimum, silently reported the maximum).
  {
    const RankAggregate want[] = {RankAggregate::kRank0, RankAggregate::kMean, RankAggregate::kMin,
                                  RankAggregate::kMax};
    for (int a = 0; a < 4; ++a) {
      PerfArgs parsed;
      EXPECT(ParseOk({"-a", std::to_string(a)}, &parsed) && parsed.average == want[a]);
    }
  }
  EXPECT(ParseFails({"-g", "0"}, "-g/--ngpus"));
  EXPECT(ParseFails({"-f", "0.5"}, "-f/--stepfactor"));
  EXPECT(ParseFails({"-i", "0"}, "-i/--stepbytes"));
  EXPECT(ParseFails({"--percentiles=1"}, "takes no value"));
}

void TestTuneArgs() {
  PerfArgs args;
  EXPECT(ParseOk({}, &args) && !args.tune && args.tune_out == "yali-tuning.txt");
  EXPECT(ParseOk({"--tune"}, &args) && args.tune && args.tune_out == "yali-tuning.txt");
  EXPECT(args.dtypes.size() == 1 && args.dtypes[0] == DType::kFloat);
  EXPECT(ParseOk({"--tune", "--tune-out", "t.txt", "-g", "4", "-n", "10", "-w", "2", "-d", "bf16",
                  "-J", "t.json"},
                 &args));
  EXPECT(args.tune && args.tune_out == "t.txt" && args.ngpus == 4 && args.iters == 10 &&
         args.warmup == 2 && args.dtypes[0] == DType::kBfloat16 && args.json_path == "t.json");
  EXPECT(ParseOk({"--tune-out=o.txt", "--tune"}, &args) && args.tune_out == "o.txt");
  // Options that agree with what --tune measures are accepted.
  EXPECT(ParseOk({"--tune", "--impl", "yali", "--timing", "events", "-a", "3", "--inplace", "0",
                  "-o", "sum", "-c", "1", "-G", "0"},
                 &args));

  EXPECT(ParseFails({"--tune-out", "x"}, "--tune-out needs --tune"));
  EXPECT(ParseFails({"--tune", "--tune-out"}, "needs a value"));
  EXPECT(ParseFails({"--tune", "--tune-out="}, "a file name"));
  EXPECT(ParseFails({"--tune=1"}, "takes no value"));
  for (const std::vector<std::string>& words : std::vector<std::vector<std::string>>{
           {"-b", "4K"}, {"-e", "1G"}, {"-f", "2"}, {"-i", "1M"}, {"-G", "5"},
           {"--timing", "graph"}, {"--timing", "latency"}, {"-a", "1"}, {"--inplace", "2"},
           {"-o", "max"}, {"--impl", "nccl"}, {"--impl", "yali,nccl"}, {"-c", "0"},
           {"--percentiles"}}) {
    std::vector<std::string> full = {"--tune"};
    full.insert(full.end(), words.begin(), words.end());
    Expect(ParseFails(full, "does not apply to --tune"), "--tune refuses " + words[0], __LINE__);
  }
  EXPECT(ParseOk({"--tune", "--repeat", "1"}, &args));

  // --tune-colls: allreduce always and first, the exchanges in the tune's order; all by default.
  EXPECT(ParseOk({"--tune"}, &args) && args.tune_colls == TunableCollectives() &&
         args.tune_colls.size() == 8 && args.tune_colls[0] == CollId::kAllReduce);
  EXPECT(ParseOk({"--tune", "--tune-colls", "none"}, &args) &&
         args.tune_colls == std::vector<CollId>({CollId::kAllReduce}));
  EXPECT(ParseOk({"--tune", "--tune-colls", "allreduce"}, &args) &&
         args.tune_colls == std::vector<CollId>({CollId::kAllReduce}));
  EXPECT(ParseOk({"--tune", "--tune-colls=alltoall,bcast,all_gather"}, &args) &&
         args.tune_colls == std::vector<CollId>({CollId::kAllReduce, CollId::kAllGather,
                                                 CollId::kBroadcast, CollId::kAlltoAll}));
  EXPECT(ParseOk({"--tune", "--tune-colls", "none,all"}, &args) &&
         args.tune_colls == TunableCollectives());
  for (const char* bad : {"rs_ag", "alltoallv", "sendrecv", "x", ""})
    Expect(ParseFails({"--tune", "--tune-colls", bad}, "for --tune-colls"),
           std::string("--tune-colls rejects '") + bad + "'", __LINE__);
  EXPECT(ParseFails({"--tune-colls", "allgather"}, "--tune-colls needs --tune"));
  EXPECT(ParseFails({"--tune", "--repeat", "3"}, "--repeat does not apply to --tune"));
  EXPECT(ParseFails({"--tune", "--max-case-time", "1"},
                    "--max-case-time does not apply to --tune"));
  EXPECT(ParseFails({"--tune", "-d", "float,half"}, "one dtype"));
  EXPECT(ParseFails({"-d", "all", "--tune"}, "one dtype"));
  EXPECT(ParseFails({"--tune", "-d", "int8"}, "one dtype"));
  EXPECT(PerfUsage("yali-perf").find("--tune-out <file>") != std::string::npos);
}

void TestSizeSweep() {
  PerfArgs args;
  EXPECT(ParseOk({}, &args));
  std::vector<size_t> sizes = SizeSweep(args);  // 4K, 16K, ..., 1G
  EXPECT(sizes.size() == 10 && sizes.front() == 4096 && sizes.back() == size_t(1) << 30);

  EXPECT(ParseOk({"-b", "1K", "-e", "4K", "-i", "1K"}, &args));  // -i alone: additive
  EXPECT(SizeSweep(args) == std::vector<size_t>({1024, 2048, 3072, 4096}));

  EXPECT(ParseOk({"-b", "1K", "-e", "8K", "-f", "2", "-i", "1K"}, &args));  // -f > 1 wins
  EXPECT(SizeSweep(args) == std::vector<size_t>({1024, 2048, 4096, 8192}));

  EXPECT(ParseOk({"-b", "1K", "-e", "3K", "-f", "1", "-i", "1K"}, &args));
  EXPECT(SizeSweep(args) == std::vector<size_t>({1024, 2048, 3072}));

  EXPECT(ParseOk({"-b", "32M", "-e", "32M"}, &args));
  EXPECT(SizeSweep(args) == std::vector<size_t>({32u << 20}));

  EXPECT(ParseOk({"-b", "1000", "-e", "5000", "-f", "2"}, &args));  // not powers of two
  EXPECT(SizeSweep(args) == std::vector<size_t>({1000, 2000, 4000}));

  EXPECT(ParseOk({"-b", "0", "-e", "2", "-f", "2"}, &args));  // 0 must not loop forever
  EXPECT(SizeSweep(args) == std::vector<size_t>({0, 1, 2}));

  EXPECT(CountForBytes(4097, DType::kFloat) == 1024);
  EXPECT(CountForBytes(4097, DType::kHalf) == 2048);
  EXPECT(CountForBytes(3, DType::kFloat) == 0);
  EXPECT(std::string(DTypeName(DType::kBfloat16)) == "bfloat16");
  EXPECT(DTypeEpsilon(DType::kFloat) == 1.0 / 8388608 && DTypeEpsilon(DType::kHalf) == 1.0 / 1024 &&
         DTypeEpsilon(DType::kBfloat16) == 1.0 / 128);
  EXPECT(std::string(RedOpName(RedOp::kAvg)) == "avg");
  EXPECT(PerfUsage("yali-perf").find("--impl") != std::string::npos);
}

// ---- Launcher environment -----------------------------------------------------------------------

EnvLookup FakeEnv(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

void TestLaunchEnv() {
  LaunchEnv env;
  std::string error;
  EXPECT(DetectLaunchEnv(FakeEnv({}), 4242, &env, &error));
  EXPECT(!env.under_launcher && env.rank == 0 && env.size == 1);
  EXPECT(env.job_id == "ppid4242");

  EXPECT(DetectLaunchEnv(FakeEnv({{"OMPI_COMM_WORLD_RANK", "3"},
                                  {"OMPI_COMM_WORLD_SIZE", "8"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                  {"RANK", "5"},
                                  {"WORLD_SIZE", "6"},
                                  {"OMPI_MCA_ess_base_jobid", "777"}}),
                         1, &env, &error));
  EXPECT(env.under_launcher && env.rank == 3 && env.size == 8 && env.local_rank == 1);
  EXPECT(env.job_id == "777" && env.job_id_source == "OMPI_MCA_ess_base_jobid");

  EXPECT(DetectLaunchEnv(FakeEnv({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}}), 9, &env, &error));
  EXPECT(env.rank == 2 && env.size == 4 && env.local_rank == 2 && env.job_id == "ppid9");

  EXPECT(DetectLaunchEnv(FakeEnv({{"SLURM_PROCID", "1"},
                                  {"SLURM_NTASKS", "2"},
                                  {"SLURM_LOCALID", "0"},
                                  {"SLURM_JOB_ID", "55"},
                                  {"SLURM_STEP_ID", "3"}}),
                         9, &env, &error));
  EXPECT(env.rank == 1 && env.size == 2 && env.local_rank == 0 && env.job_id == "55.3");

  EXPECT(DetectLaunchEnv(FakeEnv({{"RANK", "1"},
                                  {"WORLD_SIZE", "4"},
                                  {"LOCAL_RANK", "1"},
                                  {"TORCHELASTIC_RUN_ID", "abc"},
                                  {"YALI_PERF_JOBID", "mine"}}),
                         9, &env, &error));
  EXPECT(env.rank == 1 && env.size == 4 && env.local_rank == 1 && env.job_id == "mine");
  EXPECT(DetectLaunchEnv(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "abc"}}),
                         9, &env, &error));
  EXPECT(env.job_id == "abc");

  EXPECT(!DetectLaunchEnv(FakeEnv({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), 9, &env, &error));
  EXPECT(!DetectLaunchEnv(FakeEnv({{"RANK", "x"}, {"WORLD_SIZE", "4"}}), 9, &env, &error));
  EXPECT(!DetectLaunchEnv(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}}), 9,
                          &env, &error));
  // A lone RANK without WORLD_SIZE is not a launcher.
  EXPECT(DetectLaunchEnv(FakeEnv({{"RANK", "3"}}), 9, &env, &error) && !env.under_launcher);
}

// ---- Statistics and reports ---------------------------------------------------------------------

void TestStats() {
  SampleStats stats = ComputeStats({5, 1, 4, 2, 3});
  EXPECT(stats.n == 5 && Near(stats.mean, 3) && Near(stats.min, 1) && Near(stats.max, 5));
  EXPECT(Near(stats.p50, 3) && Near(stats.p90, 4.6) && Near(stats.p99, 4.96));
  EXPECT(Near(stats.std, 1.5811388300841898));
  SampleStats one = ComputeStats({7});
  EXPECT(one.n == 1 && Near(one.p99, 7) && Near(one.std, 0));
  EXPECT(ComputeStats({}).n == 0);
}

std::vector<std::string> Fields(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> fields;
  for (std::string field; stream >> field;) fields.push_back(field);
  return fields;
}

// Brackets balanced outside strings, strings closed, no trailing commas.
bool JsonWellFormed(const std::string& json) {
  int depth = 0;
  bool balanced = true;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') balanced = balanced && --depth >= 0;
  }
  return balanced && depth == 0 && !in_string && json.find(",\n}") == std::string::npos &&
         json.find(",]") == std::string::npos;
}

void TestReport() {
  EXPECT(Near(AlgorithmBandwidth(1000000000, 1e6), 1.0));
  ResultRecord yali;
  yali.impl = "yali";
  yali.bytes = 4096;
  yali.count = 1024;
  yali.time_us = 10.0;
  yali.algbw_gbs = AlgorithmBandwidth(4096, 10.0);
  yali.busbw_gbs = yali.algbw_gbs * 1.5;
  yali.checked = true;
  yali.algo_known = true;
  yali.algo = "oneshot_ll";
  yali.ctas = 8;
  yali.samples_us = {9.5, 10.0, 10.5};
  yali.stats = ComputeStats(yali.samples_us);
  yali.run = 3;
  yali.iters = 12;
  yali.warmup = 2;
  yali.host_issue_us = 2.5;
  EXPECT(AlgoLabel(yali) == "oneshot_ll/8");

  ResultRecord nccl = yali;
  nccl.impl = "nccl";
  nccl.host_issue_us = 0;  // not measured (a timing mode other than events)
  nccl.algo_known = false;
  nccl.in_place = true;
  nccl.checked = false;
  EXPECT(AlgoLabel(nccl) == "-");

  // Every row has the same 16 fields, so that awk/pandas can read the table.
  std::vector<std::string> row =
      Fields(TableRow("yali", 4096, 1024, DType::kFloat, RedOpLabel(yali), &yali, &yali,
                      AlgoLabel(yali), -1, -1));
  EXPECT(row.size() == 16 && row[0] == "yali" && row[1] == "4096" && row[3] == "float" &&
         row[13] == "oneshot_ll/8" && row[14] == "-");
  row = Fields(TableRow("nccl", 4096, 1024, DType::kFloat, "sum", nullptr, &nccl, "-", -1,
                        1.25));
  EXPECT(row.size() == 16 && row[5] == "-" && row[12] == "N/A" && row[15] == "1.250");
  // A row the library refused keeps the 16 fields: every measurement "-", algo "skipped".
  row = Fields(TableRow("yali", 4096, 4096, DType::kF8e4m3, "none", nullptr, nullptr, "skipped",
                        -1, -1));
  EXPECT(row.size() == 16 && row[3] == "f8e4m3" && row[4] == "none" && row[5] == "-" &&
         row[13] == "skipped");
  for (const std::string& line : {TableHeader()}) EXPECT(line[0] == '#');
  EXPECT(PercentileTable({yali}).find("oneshot") == std::string::npos);
  // The percentile table numbers each row by its --repeat pass: 15 fields, the run 6th, n 7th.
  std::vector<std::string> percentile_row;
  {
    std::istringstream lines(PercentileTable({yali}));
    for (std::string line; std::getline(lines, line);)
      if (!line.empty() && line[0] != '#') percentile_row = Fields(line);
  }
  EXPECT(percentile_row.size() == 15 && percentile_row[5] == "3" && percentile_row[6] == "3");

  RunInfo info;
  info.collective = "allreduce";
  info.date = "2026-11-22T10:00:00Z";
  info.hostname = "host\"name";
  info.command = "yali-perf -b 4K";
  info.nranks = 2;
  info.gpus = {{0, 0, "NVIDIA H200", "0000:18:00.0"}, {1, 1, "NVIDIA H200", "0000:2a:00.0"}};
  info.yali_version = 100;
  info.iters = 20;
  info.repeat = 4;
  std::string json = FormatJson(info, {yali, nccl});
  for (const char* needle :
       {"\"schema\": \"yali-perf/1\"", "\"collective\": \"allreduce\"", "\"launch_mode\": \"single\"",
        "\"timing\": \"events\"", "\"nccl_version\": null", "\"yali_version\": 100",
        "\"algo\": \"oneshot_ll\"", "\"ctas\": 8", "\"algo\": null", "\"wrong\": null",
        "\"wrong\": 0", "\"placement\": \"in-place\"", "\"placement\": \"out-of-place\"",
        "\"samples_us\": [9.5, 10, 10.5]", "\"p99\":", "\"pci_bus_id\": \"0000:2a:00.0\"",
        "\"hostname\": \"host\\\"name\"", "\"iters\": 20", "\"repeat\": 4",
        "\"max_case_time_s\": null", "\"registered\": 0", "\"run\": 3", "\"iters\": 12",
        "\"warmup\": 2", "\"host_issue_us\": 2.5", "\"host_issue_us\": null"})
    Expect(json.find(needle) != std::string::npos, std::string("JSON has ") + needle, __LINE__);
  EXPECT(JsonWellFormed(json));
  // Every result names its collective and root (null without one); the run lists what it skipped.
  EXPECT(json.find("\"collective\": \"allreduce\",\n      \"dtype\"") != std::string::npos);
  EXPECT(json.find("\"root\": null") != std::string::npos);
  EXPECT(json.find("\"skipped\": []") != std::string::npos);
  EXPECT(json.find("max_message") == std::string::npos);  // -e max only
  info.max_case_seconds = 0.02;
  EXPECT(FormatJson(info, {yali}).find("\"max_case_time_s\": 0.02,") != std::string::npos);
  EXPECT(json.find("\"nccl_cta_policy\": null") != std::string::npos);
  info.registered = 1;
  EXPECT(FormatJson(info, {yali}).find("\"registered\": 1,") != std::string::npos);
  info.registered = 2;
  info.nccl_cta_policy = 2;
  EXPECT(FormatJson(info, {yali}).find("\"registered\": 2,") != std::string::npos);
  EXPECT(FormatJson(info, {yali}).find("\"nccl_cta_policy\": 2,") != std::string::npos);
  // NCCL's buffers (--nccl-memory): its own by default.
  EXPECT(json.find("\"nccl_memory\": \"own\",") != std::string::npos);
  info.nccl_own_memory = false;
  EXPECT(FormatJson(info, {yali}).find("\"nccl_memory\": \"shared\",") != std::string::npos);
  info.nccl_own_memory = true;
  // The environment either library ran under, and -R 1's note on NCCL's registration (null: none).
  EXPECT(json.find("\"environment\": []") != std::string::npos);
  EXPECT(json.find("\"nccl_registration_note\": null") != std::string::npos);
  info.environment = {"NCCL_NVLS_ENABLE=0", "YALI_ALGO=twoshot"};
  info.nccl_registration_note = "-R 1: NCCL's registration likely does nothing";
  const std::string withEnv = FormatJson(info, {yali});
  const size_t envAt = withEnv.find("\"environment\": [");
  EXPECT(envAt != std::string::npos && withEnv.find("\"NCCL_NVLS_ENABLE=0\"", envAt) < withEnv.find("\"YALI_ALGO=twoshot\"", envAt));
  EXPECT(withEnv.find("\"nccl_registration_note\": \"-R 1: NCCL's registration likely does nothing\"") !=
         std::string::npos);
  EXPECT(JsonWellFormed(withEnv));
  info.environment.clear();
  info.nccl_registration_note.clear();

  // Other collectives: redop "none" for data movement, the root, skipped cases, -e max's summary.
  ResultRecord gather = yali;
  gather.collective = "gather";
  gather.has_op = false;
  gather.root = 2;
  EXPECT(RedOpLabel(gather) == "none" && RedOpLabel(yali) == "sum");
  SkipRecord refused;
  refused.impl = "yali";
  refused.collective = "reduce";
  refused.dtype = DType::kInt8;
  refused.redop = "prod";
  refused.root = 1;
  refused.bytes = 4096;
  refused.count = 4096;
  refused.placement = "in-place";
  refused.reason = "yaliReduce(...) failed: result 4 (invalid argument)";
  SkipRecord avg;
  avg.every_size = true;
  avg.impl = "all";
  avg.collective = "allreduce";
  avg.dtype = DType::kUint32;
  avg.redop = "avg";
  avg.reason = "avg is for floating types only";
  RunInfo multi = info;
  multi.collective = "allreduce,gather";
  multi.skipped = {refused, avg};
  multi.max_bytes_auto = true;
  multi.buffer_bytes = 1u << 30;
  LargestRecord largest;
  largest.collective = "gather";
  largest.impl = "yali";
  largest.dtype = DType::kFloat;
  largest.bytes = 1u << 30;
  largest.count = 1u << 25;
  largest.checked = true;
  multi.largest = {largest};
  json = FormatJson(multi, {yali, gather});
  EXPECT(JsonWellFormed(json));
  for (const char* needle :
       {"\"collective\": \"allreduce,gather\"", "\"collective\": \"gather\"",
        "\"redop\": \"none\"", "\"root\": 2", "\"skipped\": [", "\"reason\": \"yaliReduce(",
        "\"placement\": \"in-place\"", "\"dtype\": \"uint32\"", "\"bytes\": null",
        "\"placement\": null", "\"max_message\": {", "\"buffer_bytes\": 1073741824",
        "\"largest\": [", "\"count\": 33554432"})
    Expect(json.find(needle) != std::string::npos, std::string("JSON has ") + needle, __LINE__);

  // Block headings: in the percentile table only when there is more than one block.
  EXPECT(PercentileTable({yali, yali}).find("# allreduce") == std::string::npos);
  const std::string percentiles = PercentileTable({yali, gather});
  EXPECT(percentiles.find("# allreduce\n") != std::string::npos &&
         percentiles.find("# gather, root 2\n") != std::string::npos &&
         percentiles.find(" none ") != std::string::npos);
  EXPECT(BlockHeading(CollId::kBroadcast, 1) == "# broadcast, root 1 (busbw = algbw * 1)\n");
  EXPECT(BlockHeading(CollId::kRsAg, 0) ==
         "# rs_ag (allreduce via reducescatter+allgather) (busbw = algbw * 2(n-1)/n)\n");
  EXPECT(BlockHeading(CollId::kAlltoAll, 0) == "# alltoall (busbw = algbw * (n-1)/n)\n");
  EXPECT(BlockHeading(CollId::kSendRecv, 0) ==
         "# sendrecv (each rank sends to rank+1, receives from rank-1) (busbw = algbw * 1)\n");

  JsonWriter writer;
  writer.BeginObject();
  writer.Key("nan");
  writer.Double(0.0 / 0.0);
  writer.Key("empty");
  writer.BeginArray();
  writer.EndArray();
  writer.EndObject();
  EXPECT(writer.text() == "{\n  \"nan\": null,\n  \"empty\": []\n}\n");
  EXPECT(JsonWriter::Escape("a\nb\x01") == "\"a\\nb\\u0001\"");
}

// ---- --tune: plan, choices, table ---------------------------------------------------------------

TuneMeasurement Timed(size_t bytes, double time_us, uint64_t wrong = 0) {
  TuneMeasurement m;
  m.bytes = bytes;
  m.time_us = time_us;
  m.busbw_gbs = static_cast<double>(bytes) / (time_us * 1e3);
  m.checked = true;
  m.wrong = wrong;
  m.algo = "twoshot";
  return m;
}

// The library's parser on `text`: its entries, or none with *error set.
std::vector<yali::TuningEntry> ParseWithLibrary(const std::string& text, std::string* error) {
  std::vector<yali::TuningEntry> entries;
  if (!yali::parseTuningText(text, &entries, error)) entries.clear();
  return entries;
}

// The LL/two-shot crossover: the one-shot LL algorithm's threshold (the library's ll_max key).
int64_t LLMax(const yali::TuningEntry& e) {
  return e.thresholds[static_cast<int>(yali::Algo::kOneshotLL)];
}

bool SameEntry(const yali::TuningEntry& e, const TuningLine& line) {
  return e.smMajor == line.sm_major && e.nranks == line.nranks && LLMax(e) == line.ll_max &&
         e.llThreads == line.ll_threads && e.llMaxCtas == line.ll_ctas &&
         e.twoshotThreads == line.twoshot_threads && e.twoshotMaxCtas == line.twoshot_ctas &&
         e.twoshotMinSlotBytes == line.twoshot_min_slot &&
         e.twoshotMaxSlotBytes == line.twoshot_max_slot;
}

// A crossover over 4K..1M from LL and two-shot times in microseconds.
Crossover MakeCrossover(const std::vector<double>& ll_us, const std::vector<double>& twoshot_us) {
  Crossover c;
  for (size_t i = 0; i < ll_us.size(); ++i) {
    size_t bytes = size_t(4096) << i;
    c.sizes.push_back(bytes);
    c.ll.push_back(Timed(bytes, ll_us[i]));
    c.twoshot.push_back(Timed(bytes, twoshot_us[i]));
  }
  return c;
}

void TestTuneLine() {
  TuningLine line;
  line.sm_major = 9;
  line.nranks = 4;
  line.ll_max = 256 << 10;
  line.ll_threads = 1024;
  line.ll_ctas = 16;
  line.twoshot_threads = 256;
  line.twoshot_ctas = 24;
  line.twoshot_min_slot = 4 << 10;
  line.twoshot_max_slot = 64 << 10;
  // By member: the struct grows keys that --tune leaves to the built-in table.
  yali::TuningEntry entry{};
  entry.smMajor = 9;
  entry.nranks = 4;
  entry.thresholds[static_cast<int>(yali::Algo::kOneshotLL)] = 256 << 10;
  entry.llThreads = 1024;
  entry.llMaxCtas = 16;
  entry.twoshotThreads = 256;
  entry.twoshotMaxCtas = 24;
  entry.twoshotMinSlotBytes = 4 << 10;
  entry.twoshotMaxSlotBytes = 64 << 10;
  // Word for word what the library writes, and read back to the same values.
  EXPECT(FormatTuningLine(line) == yali::formatTuningEntry(entry));
  std::string error;
  std::vector<yali::TuningEntry> parsed = ParseWithLibrary(FormatTuningLine(line), &error);
  EXPECT(parsed.size() == 1 && SameEntry(parsed[0], line));

  EXPECT(SizeLabel(4096) == "4K" && SizeLabel(256 << 10) == "256K" && SizeLabel(1 << 20) == "1M");
  EXPECT(SizeLabel(size_t(256) << 20) == "256M" && SizeLabel(1000) == "1000");
  EXPECT(SizeLabel(1536) == "1536" && SizeLabel(3 << 19) == "1536K");
  EXPECT(TuneLargestMessageBytes() == size_t(256) << 20);
  EXPECT(std::string(TuneAlgoName(TuneAlgo::kOneshotLL)) == "oneshot_ll" &&
         std::string(TuneAlgoName(TuneAlgo::kTwoshot)) == "twoshot");
}

void TestTuneCandidates() {
  TuningLine base;
  base.sm_major = 9;
  base.nranks = 4;
  const size_t big = size_t(256) << 20;

  TuneStep geometry = TwoshotGeometryStep(base, 4 << 20, big);
  // 2 threads x (4 ctas x 4 slots - {24, 32} x 256K over the 4 MiB staging).
  EXPECT(geometry.candidates.size() == 28);
  EXPECT(geometry.sizes == std::vector<size_t>({size_t(64) << 20, size_t(256) << 20}));
  EXPECT(geometry.algo == TuneAlgo::kTwoshot && HigherIsBetter(geometry.kind));
  bool all_valid = true;
  for (const TuneCandidate& c : geometry.candidates) {
    std::string error;
    std::vector<yali::TuningEntry> parsed = ParseWithLibrary(FormatTuningLine(c.line), &error);
    all_valid = all_valid && parsed.size() == 1 && SameEntry(parsed[0], c.line) &&
                c.line.twoshot_ctas * c.line.twoshot_max_slot <= (4 << 20) &&
                c.line.twoshot_ctas <= 32;
  }
  EXPECT(all_valid);
  EXPECT(TwoshotGeometryStep(base, 1 << 20, big).candidates.size() == 14);
  EXPECT(TwoshotGeometryStep(base, 4 << 20, size_t(100) << 20).sizes.size() == 1);
  EXPECT(CandidateParams(geometry.kind, geometry.candidates[0].line) ==
         "threads=256 ctas=8 max_slot=32K");

  TuningLine chosen = geometry.candidates.back().line;  // 512 threads, 32 ctas, 128K
  EXPECT(chosen.twoshot_threads == 512 && chosen.twoshot_ctas == 32 &&
         chosen.twoshot_max_slot == (128 << 10));
  TuneStep min_slot = TwoshotMinSlotStep(chosen, big);
  EXPECT(min_slot.candidates.size() == 5 && !HigherIsBetter(min_slot.kind));
  EXPECT(min_slot.sizes == std::vector<size_t>({256 << 10, 1 << 20, 4 << 20}));
  EXPECT(min_slot.candidates[0].line.twoshot_threads == 512);  // keeps step 1's choice
  chosen.twoshot_max_slot = 16 << 10;  // min slot never above max slot (the parser's rule)
  EXPECT(TwoshotMinSlotStep(chosen, big).candidates.size() == 4);

  TuneStep ll = LLGeometryStep(base, 1 << 20);
  EXPECT(ll.candidates.size() == 12 && ll.algo == TuneAlgo::kOneshotLL);
  EXPECT(ll.sizes == std::vector<size_t>({4 << 10, 64 << 10, 256 << 10}));
  EXPECT(LLGeometryStep(base, 128 << 10).sizes.size() == 2);  // a smaller LL capacity
  EXPECT(CandidateParams(ll.kind, ll.candidates[5].line) == "threads=512 ctas=16");

  EXPECT(CrossoverSizes(1 << 20, big).size() == 9);  // 4K .. 1M
  EXPECT(CrossoverSizes(1 << 20, 256 << 10).back() == (256 << 10));
  EXPECT(CrossoverSizes(4096, big) == std::vector<size_t>({4096}));
  EXPECT(CrossoverSizes(1000192, big).back() == (512 << 10));
  EXPECT(ComparisonSizes(big).size() == 7 && ComparisonSizes(1 << 20).size() == 4);
}

void TestTuneChoices() {
  TuneStep step = LLGeometryStep(TuningLine(), 1 << 20);
  step.candidates.resize(4);
  const double times[4][3] = {{5, 10, 20}, {4, 9, 19}, {4, 9, 19}, {1, 1, 1}};
  for (int i = 0; i < 4; ++i)
    for (int s = 0; s < 3; ++s) step.candidates[i].measurements.push_back(Timed(4096, times[i][s]));
  step.candidates[3].rejected = true;  // fastest, but wrong
  ChooseBest(&step);
  EXPECT(step.chosen == 1 && step.runner_up == 2);  // a tie keeps the earlier one
  EXPECT(Near(step.candidates[1].score, 32) && Near(step.candidates[0].score, 35));

  TuneStep bw = TwoshotGeometryStep(TuningLine(), 4 << 20, size_t(256) << 20);
  bw.candidates.resize(3);
  for (int i = 0; i < 3; ++i) bw.candidates[i].measurements.push_back(Timed(1 << 20, 10.0 - i));
  ChooseBest(&bw);
  EXPECT(bw.chosen == 2 && bw.runner_up == 1);  // highest busBW = shortest time here
  for (TuneCandidate& c : bw.candidates) c.rejected = true;
  ChooseBest(&bw);
  EXPECT(bw.chosen == -1 && bw.runner_up == -1);

  const int64_t capacity = 1 << 20;
  // LL wins 4K..256K, loses at 512K and 1M.
  Crossover c = MakeCrossover({3, 3, 3.5, 4, 4.5, 5, 6.1, 12, 20}, {8, 8, 8, 8, 8, 8, 7.9, 9, 11});
  ChooseLLMax(&c, capacity);
  EXPECT(c.ll_max == (256 << 10));
  EXPECT(c.reason == "ll_max: LL faster up to 256K (LL 6.1 us vs two-shot 7.9 us at 256K; "
                     "two-shot faster at 512K)");
  // Two-shot everywhere.
  c = MakeCrossover({9, 9, 9}, {8, 8, 8});
  ChooseLLMax(&c, capacity);
  EXPECT(c.ll_max == 0 && c.reason.find("two-shot faster at every size") != std::string::npos);
  // Two-shot at 4K (LL kept there), LL at 8K and 16K, two-shot at 32K, LL again at 64K (not
  // used: one threshold).
  c = MakeCrossover({9, 3, 3, 9, 3}, {8, 8, 8, 8, 8});
  ChooseLLMax(&c, capacity);
  EXPECT(c.ll_max == (16 << 10));
  EXPECT(c.reason.find("two-shot faster at 4K, kept on LL") != std::string::npos &&
         c.reason.find("LL faster again at 64K, not used") != std::string::npos);
  // LL up to its capacity.
  c = MakeCrossover({1, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2, 2, 2, 2});
  ChooseLLMax(&c, capacity);
  EXPECT(c.ll_max == capacity && c.reason.find("is the LL capacity") != std::string::npos);
  // A wrong LL result ends LL's range; a wrong two-shot result leaves LL as the only choice.
  c = MakeCrossover({1, 1, 1, 1}, {2, 2, 2, 2});
  c.ll[2].wrong = 5;
  ChooseLLMax(&c, capacity);
  EXPECT(c.ll_max == (8 << 10) && c.reason.find("LL wrong at 16K") != std::string::npos);
  c = MakeCrossover({3, 3}, {2, 2});
  c.twoshot[0].wrong = 1;
  ChooseLLMax(&c, capacity);
  EXPECT(c.ll_max == 4096);
  c = Crossover();
  ChooseLLMax(&c, capacity);
  EXPECT(c.ll_max == 0);
}

void TestTuneTable() {
  TuneHeader header;
  header.date = "2026-11-22T10:00:00Z";
  header.hostname = "node1";
  header.gpu_name = "NVIDIA H200\nsm=1 nranks=2";  // a newline must not end the comment
  header.sm_major = 9;
  header.nranks = 4;
  header.dtype = "float";
  header.command = "yali-perf --tune -g 4";
  header.iters = 20;
  header.warmup = 5;
  header.yali_version = 100;
  header.ll_capacity = 1 << 20;
  header.staging_bytes = 4 << 20;

  TuningLine base;
  base.nranks = 4;
  std::vector<TuneStep> steps;
  steps.push_back(TwoshotGeometryStep(base, header.staging_bytes, size_t(256) << 20));
  steps.push_back(TwoshotMinSlotStep(base, size_t(256) << 20));
  steps.push_back(LLGeometryStep(base, header.ll_capacity));
  for (TuneStep& step : steps) {
    for (size_t i = 0; i < step.candidates.size(); ++i)
      for (size_t bytes : step.sizes)
        step.candidates[i].measurements.push_back(Timed(bytes, 10.0 + static_cast<double>(i)));
    ChooseBest(&step);
  }
  steps[0].candidates[3].rejected = true;
  Crossover crossover = MakeCrossover({3, 3, 9}, {8, 8, 8});
  ChooseLLMax(&crossover, header.ll_capacity);
  TuningLine chosen = steps[2].candidates[steps[2].chosen].line;
  chosen.ll_max = crossover.ll_max;

  const std::string text = TuningFileText(header, steps, crossover, chosen);
  std::string error;
  std::vector<yali::TuningEntry> parsed = ParseWithLibrary(text, &error);
  Expect(parsed.size() == 1 && SameEntry(parsed[0], chosen),
         "the library reads the table back (" + error + ")", __LINE__);
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> all;
  while (std::getline(lines, line)) all.push_back(line);
  bool comments_first = !all.empty();
  for (size_t i = 0; i + 1 < all.size(); ++i) comments_first = comments_first && all[i][0] == '#';
  EXPECT(comments_first && all.back() == FormatTuningLine(chosen));
  EXPECT(all[0] == "# yali-perf --tune");
  for (const char* needle :
       {"host node1", "nranks 4", "dtype float", "# command: yali-perf --tune -g 4",
        "# twoshot_threads=", "highest busBW of 28 candidates at 64M + 256M", "(runner-up threads=",
        "# twoshot_min_slot=", "lowest time of 5 candidates at 256K + 1M + 4M", "# ll_threads=",
        "# ll_max: LL faster up to 8K (LL 3.0 us vs two-shot 8.0 us at 8K; two-shot faster at 16K)",
        "WARNING: 1 candidate(s)"})
    Expect(text.find(needle) != std::string::npos, std::string("table has ") + needle, __LINE__);

  TuneComparison comparison;
  comparison.sizes = {4096};
  comparison.builtin = {Timed(4096, 5)};
  comparison.tuned = {Timed(4096, 4)};
  RunInfo info;
  info.collective = "allreduce";
  info.nranks = 4;
  std::string json = FormatJson(info, {}, [&](JsonWriter& writer) {
    WriteTuneJson(writer, header, steps, crossover, comparison, chosen, "yali-tuning.txt");
  });
  EXPECT(JsonWellFormed(json));
  for (const char* needle :
       {"\"results\": []", "\"tune\": {", "\"name\": \"twoshot_geometry\"",
        "\"name\": \"ll_geometry\"", "\"score\": \"sum_busbw_gbs\"", "\"rejected\": true",
        "\"ll_max\": 8192", "\"file\": \"yali-tuning.txt\"", "\"builtin\": [", "\"line\": \"sm=9 "})
    Expect(json.find(needle) != std::string::npos, std::string("tune JSON has ") + needle, __LINE__);
}

// Steps 5 and 6: the exchange collectives' thresholds.

// The registry row named `name`, or null.
const yali::AlgorithmDesc* RegistryRow(const std::string& name) {
  yali::Algo algo;
  return yali::algoFromName(name, &algo) ? &yali::algorithm(algo) : nullptr;
}

void TestTuneExchangeNames() {
  // Every name and key --tune uses is the registry's, with the bound the rule assumes.
  bool names_ok = TuneExchanges().size() == 7;
  int direct_rows = 0;
  for (const TuneExchange& exchange : TuneExchanges()) {
    const yali::AlgorithmDesc* ll = RegistryRow(ExchangeAlgoName(exchange.coll, "ll"));
    const yali::AlgorithmDesc* staged = RegistryRow(ExchangeAlgoName(exchange.coll, "staged"));
    const yali::AlgorithmDesc* direct = RegistryRow(ExchangeAlgoName(exchange.coll, "direct"));
    names_ok = names_ok && ll != nullptr && staged != nullptr && ll->tuningKey != nullptr &&
               ll->tuningKey == ExchangeKey(exchange.coll, ExchangeRule::kLLMax) &&
               ll->bound == yali::Bound::kUpTo && staged->bound == yali::Bound::kFallback &&
               ll->collective == staged->collective;
    names_ok = names_ok && (direct != nullptr) == exchange.has_direct;
    if (direct != nullptr) {
      ++direct_rows;
      names_ok = names_ok && direct->tuningKey != nullptr &&
                 direct->tuningKey == ExchangeKey(exchange.coll, ExchangeRule::kDirectMin) &&
                 direct->bound == yali::Bound::kFrom && direct->needsRegisteredRecv &&
                 direct->collective == ll->collective;
    }
  }
  EXPECT(names_ok && direct_rows == 4);
  EXPECT(ExchangeKey(CollId::kReduceScatter, ExchangeRule::kLLMax) == "reducescatter_ll_max");
  EXPECT(ExchangeKey(CollId::kAlltoAll, ExchangeRule::kDirectMin) == "alltoall_direct_min");
  // Every exchange row of the registry with a threshold is one --tune measures or leaves to the
  // built-in table on purpose (copy engines, rooted two-shot), and every threshold setting that
  // could override a measured or baseline value is cleared while tuning.
  const std::vector<std::string> overrides = TuneEnvOverrides();
  auto cleared = [&](const std::string& name) {
    for (const std::string& o : overrides)
      if (o == name) return true;
    return false;
  };
  int count = 0;
  const yali::AlgorithmDesc* rows = yali::algorithms(&count);
  bool rows_ok = true;
  for (int i = 0; i < count; ++i) {
    const yali::AlgorithmDesc& row = rows[i];
    if (row.bound == yali::Bound::kFallback) continue;
    const bool exchange = row.collective != yali::Collective::kAllReduce;
    const bool measured = row.family == yali::Family::kExchangeLL ||
                          row.family == yali::Family::kExchangeDirect;
    const bool left = row.family == yali::Family::kCopyEngine || row.family == yali::Family::kTwoshot ||
                      row.family == yali::Family::kExchangePull;
    if (exchange) rows_ok = rows_ok && (measured || left) && cleared(yali::thresholdSettingName(row));
    if (exchange && measured) {
      bool known = false;
      for (const TuneExchange& e : TuneExchanges())
        for (ExchangeRule rule : {ExchangeRule::kLLMax, ExchangeRule::kDirectMin})
          if (rule == ExchangeRule::kLLMax || e.has_direct)
            known = known || ExchangeKey(e.coll, rule) == row.tuningKey;
      rows_ok = rows_ok && known;
    }
  }
  EXPECT(rows_ok);
  EXPECT(cleared("YALI_MAX_CTAS") && cleared("YALI_ONESHOT_LL_MAX_BYTES"));
  EXPECT(TunableCollectives().size() == 8 && TunableCollectives()[0] == CollId::kAllReduce);
  // Point-to-point has no algorithm to tune: sendrecv is no target.
  for (CollId coll : TunableCollectives())
    Expect(coll != CollId::kSendRecv, "sendrecv is not tuned", __LINE__);
}

// An exchange crossover with the given times (candidate, baseline) at pieces 4K, 8K, ...
ExchangeCrossover MakeExchange(CollId coll, ExchangeRule rule, const std::vector<double>& cand_us,
                               const std::vector<double>& base_us) {
  ExchangeCrossover x = ExchangeCrossoverSizes(coll, rule, 4, 4, int64_t(1) << 30, size_t(1) << 40);
  x.sizes.resize(cand_us.size());
  x.pieces.resize(cand_us.size());
  for (size_t i = 0; i < cand_us.size(); ++i) {
    x.candidate.push_back(Timed(x.sizes[i], cand_us[i]));
    x.baseline.push_back(Timed(x.sizes[i], base_us[i]));
  }
  return x;
}

void TestTuneExchangeSizes() {
  const size_t big = size_t(256) << 20;
  // AllGather at n = 4, float: pieces 4K..1M (the LL capacity), messages 4x that.
  ExchangeCrossover x =
      ExchangeCrossoverSizes(CollId::kAllGather, ExchangeRule::kLLMax, 4, 4, 1 << 20, big);
  EXPECT(x.pieces.size() == 9 && x.pieces.front() == 4096 && x.pieces.back() == (1 << 20));
  bool four_pieces = true;
  for (size_t i = 0; i < x.sizes.size(); ++i) {
    four_pieces = four_pieces && x.sizes[i] == 4 * x.pieces[i];
    // What the library is asked about at that size: yali-perf's count x element size.
    const CollShape shape = ShapeFor(CollId::kAllGather, x.sizes[i], 4, 4);
    four_pieces = four_pieces && shape.count * 4 == x.pieces[i] && shape.bytes == x.sizes[i];
  }
  EXPECT(four_pieces);
  // Broadcast and Reduce: the message is the piece.
  x = ExchangeCrossoverSizes(CollId::kReduce, ExchangeRule::kLLMax, 4, 2, 1 << 20, big);
  EXPECT(x.sizes == x.pieces && x.sizes.size() == 9);
  // A smaller LL buffer or smaller buffers cut the list.
  EXPECT(ExchangeCrossoverSizes(CollId::kAlltoAll, ExchangeRule::kLLMax, 2, 4, 4096, big).sizes ==
         std::vector<size_t>({8192}));
  EXPECT(ExchangeCrossoverSizes(CollId::kScatter, ExchangeRule::kLLMax, 8, 4, 1 << 20, 64 << 10)
             .pieces.back() == 8192);
  // Direct: up to what the buffers hold, whatever the LL capacity.
  x = ExchangeCrossoverSizes(CollId::kAllGather, ExchangeRule::kDirectMin, 4, 4, 1 << 20, big);
  EXPECT(x.pieces.size() == 15 && x.pieces.back() == (64 << 20) && x.sizes.back() == big);
  x = ExchangeCrossoverSizes(CollId::kBroadcast, ExchangeRule::kDirectMin, 4, 4, 1 << 20, big);
  EXPECT(x.pieces.size() == 17 && x.sizes.back() == big);

  // The whole tune's size: AllReduce alone (28 x 2 + 5 x 3 + 12 x 3 + 2 x 9 + 2 x 7) ...
  TuneCount count = CountTuneRuns(4, 4, 1 << 20, 4 << 20, big, {});
  EXPECT(count.configurations == 28 + 5 + 12 + 2 + 2 && count.measurements == 139);
  // ... then every exchange: 7 x 2 x 9 LL sizes, and 2 x (15 + 17 + 15 + 15) direct sizes.
  std::vector<CollId> all(TunableCollectives().begin() + 1, TunableCollectives().end());
  count = CountTuneRuns(4, 4, 1 << 20, 4 << 20, big, all);
  EXPECT(count.configurations == 49 + 14 + 8 && count.measurements == 139 + 126 + 124);
  count = CountTuneRuns(4, 4, 1 << 20, 4 << 20, big, {CollId::kReduce});
  EXPECT(count.configurations == 51 && count.measurements == 139 + 18);
}

void TestTuneExchangeChoices() {
  const int64_t capacity = 1 << 20;
  // LL: ChooseLLMax's rule, the key in pieces, yali-perf's size beside it.
  ExchangeCrossover x = MakeExchange(CollId::kAllGather, ExchangeRule::kLLMax,
                                     {3, 3, 3.5, 4, 4.5, 5, 6.1, 12, 20},
                                     {8, 8, 8, 8, 8, 8, 7.9, 9, 11});
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == (256 << 10));
  Expect(x.reason.rfind("allgather_ll_max=256K: LL faster up to 256K (1M) (LL 6.1 us vs staged "
                        "7.9 us at 256K (1M); staged faster at 512K (2M))",
                        0) == 0,
         "LL reason: " + x.reason, __LINE__);
  EXPECT(ExchangeTuningKey(x).key == "allgather_ll_max" && ExchangeTuningKey(x).value == (256 << 10));
  x = MakeExchange(CollId::kBroadcast, ExchangeRule::kLLMax, {9, 3, 3, 9, 3}, {8, 8, 8, 8, 8});
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == (16 << 10) && x.reason.find("staged faster at 4K, kept on LL") != std::string::npos &&
         x.reason.find("LL faster again at 64K, not used") != std::string::npos);
  x = MakeExchange(CollId::kReduce, ExchangeRule::kLLMax, {9, 9}, {8, 8});
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == 0 && x.reason.find("staged faster at every size") != std::string::npos);
  x = MakeExchange(CollId::kGather, ExchangeRule::kLLMax, {1, 1, 1}, {2, 2, 2});
  x.candidate[1].wrong = 3;  // a wrong LL result ends its range
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == 4096 && x.reason.find("LL wrong at 8K") != std::string::npos);

  // Direct: the mirror. Wins at 16K and from 64K up: from 64K (16K is not used).
  x = MakeExchange(CollId::kAllGather, ExchangeRule::kDirectMin, {9, 9, 1, 9, 1, 1, 1},
                   {8, 8, 8, 8, 8, 8, 8});
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == (64 << 10));
  Expect(x.reason.rfind("allgather_direct_min=64K: direct faster from 64K (256K) (direct 1.0 us vs "
                        "without direct 8.0 us at 64K (256K); without direct faster at 32K (128K))",
                        0) == 0,
         "direct reason: " + x.reason, __LINE__);
  EXPECT(x.reason.find("direct faster again at 16K (64K), not used") != std::string::npos);
  // Losing at the largest size: kept on direct (one threshold), like LL's smallest sizes.
  x = MakeExchange(CollId::kScatter, ExchangeRule::kDirectMin, {9, 1, 1, 9}, {8, 8, 8, 8});
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == 8192 &&
         x.reason.find("without direct faster at 32K (128K), kept on direct") != std::string::npos);
  // Winning everywhere: from the smallest size; never: 0.
  x = MakeExchange(CollId::kAlltoAll, ExchangeRule::kDirectMin, {1, 1}, {2, 2});
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == 4096 && x.reason.find("the smallest size tested") != std::string::npos);
  x = MakeExchange(CollId::kAlltoAll, ExchangeRule::kDirectMin, {3, 3}, {2, 2});
  x.baseline[1].wrong = 1;  // only the baseline wrong: a win for direct
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == 8192);
  x = MakeExchange(CollId::kAlltoAll, ExchangeRule::kDirectMin, {3, 3}, {2, 2});
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == 0 && x.reason.find("without direct faster at every size") != std::string::npos);
  x = ExchangeCrossover();
  ChooseExchangeThreshold(&x, capacity);
  EXPECT(x.value == 0);
  SkipExchangeCrossover(&x, "no\nregistration");
  EXPECT(x.skipped && x.reason.find("left at the built-in value (no registration)") != std::string::npos);
}

// The extended line and file through the library's own parser.
void TestTuneExchangeTable() {
  TuningLine line;
  line.nranks = 4;
  line.ll_max = 256 << 10;
  int64_t value = 4096;
  for (const TuneExchange& exchange : TuneExchanges()) {
    line.extra.push_back({ExchangeKey(exchange.coll, ExchangeRule::kLLMax), value});
    value *= 2;
    if (exchange.has_direct)
      line.extra.push_back({ExchangeKey(exchange.coll, ExchangeRule::kDirectMin), value * 64});
  }
  line.extra.back().value = 0;  // 0 (never) is a value too
  const std::string text = FormatTuningLine(line);
  EXPECT(text.rfind(FormatTuningLine(TuningLine{9, 4, 256 << 10}) + " reducescatter_ll_max=4096 ",
                    0) == 0);
  std::string error;
  std::vector<yali::TuningEntry> parsed = ParseWithLibrary(text, &error);
  Expect(parsed.size() == 1 && SameEntry(parsed[0], line), "extended line parses (" + error + ")",
         __LINE__);
  bool keys_ok = parsed.size() == 1;
  const yali::TuningEntry builtin = yali::builtinTuning(9, 4);
  int count = 0;
  const yali::AlgorithmDesc* rows = yali::algorithms(&count);
  for (int i = 0; keys_ok && i < count; ++i) {
    if (rows[i].tuningKey == nullptr) continue;
    int64_t expected = builtin.thresholds[i];  // a key left off takes the built-in value
    for (const TuningKey& k : line.extra)
      if (k.key == rows[i].tuningKey) expected = k.value;
    keys_ok = keys_ok && parsed[0].thresholds[i] == expected;
  }
  EXPECT(keys_ok);
  // The copy-engine and rooted two-shot rows stay at the built-in 0 (never).
  for (yali::Algo a : {yali::Algo::kAllGatherCopyEngine, yali::Algo::kBroadcastTwoshot,
                       yali::Algo::kReduceTwoshot})
    EXPECT(parsed.size() == 1 && parsed[0].thresholds[static_cast<int>(a)] == 0);

  // The file: every exchange's reason and table as comments, the extended line last.
  TuneHeader header;
  header.sm_major = 9;
  header.nranks = 4;
  header.dtype = "float";
  header.ll_capacity = 1 << 20;
  header.staging_bytes = 4 << 20;
  Crossover crossover = MakeCrossover({3, 3, 9}, {8, 8, 8});
  ChooseLLMax(&crossover, header.ll_capacity);
  TuningLine chosen;
  chosen.nranks = 4;
  chosen.ll_max = crossover.ll_max;
  std::vector<ExchangeCrossover> exchanges;
  exchanges.push_back(MakeExchange(CollId::kAllGather, ExchangeRule::kLLMax, {1, 1, 9}, {2, 2, 2}));
  exchanges.push_back(MakeExchange(CollId::kAllGather, ExchangeRule::kDirectMin, {9, 1, 1}, {2, 2, 2}));
  exchanges.push_back(MakeExchange(CollId::kScatter, ExchangeRule::kLLMax, {1, 1, 1}, {2, 2, 2}));
  exchanges.push_back(MakeExchange(CollId::kScatter, ExchangeRule::kDirectMin, {}, {}));
  for (ExchangeCrossover& x : exchanges) {
    ChooseExchangeThreshold(&x, header.ll_capacity);
    if (x.coll == CollId::kScatter && x.rule == ExchangeRule::kDirectMin)
      SkipExchangeCrossover(&x, "the library ran scatter_staged");
    else
      chosen.extra.push_back(ExchangeTuningKey(x));
  }
  const std::string file = TuningFileText(header, {}, crossover, chosen, exchanges);
  parsed = ParseWithLibrary(file, &error);
  Expect(parsed.size() == 1 && SameEntry(parsed[0], chosen), "the file parses (" + error + ")",
         __LINE__);
  auto threshold = [&](yali::Algo a) { return parsed.empty() ? -1 : parsed[0].thresholds[static_cast<int>(a)]; };
  EXPECT(threshold(yali::Algo::kAllGatherLL) == 8192 && threshold(yali::Algo::kAllGatherDirect) == 8192 &&
         threshold(yali::Algo::kScatterLL) == 16384 &&
         threshold(yali::Algo::kScatterDirect) == builtin.thresholds[static_cast<int>(yali::Algo::kScatterDirect)]);
  std::istringstream lines(file);
  std::string l;
  std::vector<std::string> all;
  while (std::getline(lines, l)) all.push_back(l);
  bool comments_first = !all.empty();
  for (size_t i = 0; i + 1 < all.size(); ++i) comments_first = comments_first && all[i][0] == '#';
  EXPECT(comments_first && all.back() == FormatTuningLine(chosen));
  for (const char* needle :
       {"# exchanges (nranks 4)", "# allgather_ll_max=8K: LL faster up to 8K (32K)",
        "# allgather_direct_min=8K: direct faster from 8K (32K)",
        "# scatter_direct_min: not measured, left at the built-in value (the library ran "
        "scatter_staged)",
        "left to the built-in table: the copy-engine rows (*_ce_min) and the rooted two-shot rows",
        "the keys of reducescatter, broadcast, reduce, gather, alltoall (not in --tune-colls)"})
    Expect(file.find(needle) != std::string::npos, std::string("file has ") + needle, __LINE__);
  // Without exchanges the file is what it was: no exchange lines.
  EXPECT(TuningFileText(header, {}, crossover, TuningLine{9, 4, crossover.ll_max}).find("exchanges") ==
         std::string::npos);

  RunInfo info;
  info.nranks = 4;
  TuneComparison comparison;
  std::string json = FormatJson(info, {}, [&](JsonWriter& writer) {
    WriteTuneJson(writer, header, {}, crossover, comparison, chosen, "t.txt", exchanges);
  });
  EXPECT(JsonWellFormed(json));
  for (const char* needle : {"\"exchanges\": [", "\"key\": \"allgather_direct_min\"",
                             "\"baseline\": \"auto without direct\"", "\"skipped\": true",
                             "\"piece_bytes\": [", "\"allgather_ll_max\": 8192"})
    Expect(json.find(needle) != std::string::npos, std::string("tune JSON has ") + needle, __LINE__);
}

// ---- Host exchange (forked processes) -----------------------------------------------------------

std::string MakeTempDir() {
  char pattern[] = "/tmp/yali-perf-test-XXXXXX";
  char* dir = mkdtemp(pattern);
  return dir != nullptr ? dir : "";
}

HostExchange::Options ExchangeOptions(const std::string& dir, const std::string& job, int rank,
                                      int nranks, double timeout_s) {
  HostExchange::Options options;
  options.base_dir = dir;
  options.job_id = job;
  options.rank = rank;
  options.nranks = nranks;
  options.timeout_s = timeout_s;
  return options;
}

// Body of one forked rank: returns the child's exit status (0 = all good).
int ExchangeRank(const std::string& dir, const std::string& job, int rank, int nranks) {
  HostExchange exchange;
  std::string error;
  if (!exchange.Open(ExchangeOptions(dir, job, rank, nranks, 20.0), &error)) {
    std::fprintf(stderr, "rank %d open: %s\n", rank, error.c_str());
    return 10;
  }
  for (int round = 0; round < 30; ++round) {
    // Blobs of different lengths, with NUL bytes, some empty.
    std::string mine(static_cast<size_t>((rank * 37 + round) % 50), '\0');
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>(rank * 13 + round + i);
    std::vector<std::string> all;
    if (!exchange.AllGather(mine, &all, &error) || static_cast<int>(all.size()) != nranks) {
      std::fprintf(stderr, "rank %d allgather: %s\n", rank, error.c_str());
      return 11;
    }
    for (int r = 0; r < nranks; ++r) {
      std::string expected(static_cast<size_t>((r * 37 + round) % 50), '\0');
      for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<char>(r * 13 + round + i);
      if (all[r] != expected) return 12;
    }
    if (!exchange.Barrier(&error)) return 13;
  }
  const int root = nranks - 1;
  std::string blob = rank == root ? std::string("from the root") : std::string("ignored");
  if (!exchange.Broadcast(root, &blob, &error) || blob != "from the root") return 14;
  if (!exchange.Close(&error)) {
    std::fprintf(stderr, "rank %d close: %s\n", rank, error.c_str());
    return 15;
  }
  return 0;
}

// Forks one process per rank (rank r starts after delays_ms[r]) and returns their exit statuses.
std::vector<int> RunRanks(const std::vector<int>& delays_ms,
                          int (*body)(const std::string&, const std::string&, int, int),
                          const std::string& dir, const std::string& job) {
  std::vector<pid_t> pids;
  int nranks = static_cast<int>(delays_ms.size());
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delays_ms[rank]));
      std::_Exit(body(dir, job, rank, nranks));
    }
    pids.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    statuses.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
  }
  return statuses;
}

bool AllZero(const std::vector<int>& statuses) {
  for (int s : statuses)
    if (s != 0) return false;
  return true;
}

bool DirectoryExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string SessionDir(const std::string& base, const std::string& job) {
  return base + "/yali-perf-" + std::to_string(getuid()) + "-" + job;
}

int AbortingRank(const std::string& dir, const std::string& job, int rank, int nranks) {
  HostExchange exchange;
  std::string error;
  if (!exchange.Open(ExchangeOptions(dir, job, rank, nranks, 20.0), &error)) return 20;
  if (rank == 1) {
    exchange.PostAbort("cudaMalloc failed (simulated)");
    return 0;
  }
  auto start = std::chrono::steady_clock::now();
  bool ok = exchange.Barrier(&error);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The peer's abort ends the wait long before the 20 s timeout, and says why.
  if (ok || waited > 5.0 || error.find("rank 1 failed: cudaMalloc failed (simulated)") ==
                                std::string::npos) {
    std::fprintf(stderr, "rank %d: barrier after abort: ok=%d waited %.1f s: %s\n", rank, ok,
                 waited, error.c_str());
    return 21;
  }
  return 0;
}

void TestHostExchange() {
  std::string base = MakeTempDir();
  EXPECT(!base.empty());

  // Three ranks, started in scrambled order.
  EXPECT(AllZero(RunRanks({150, 0, 60}, ExchangeRank, base, "job-a")));
  EXPECT(!DirectoryExists(SessionDir(base, "job-a")));  // rank 0 cleaned up

  // Files left by a crashed run with the same job id: a stale session, ready and data file.
  std::string stale = SessionDir(base, "job-b");
  EXPECT(mkdir(stale.c_str(), 0700) == 0);
  for (const char* name : {"session", "deadbeef.ready", "deadbeef.d1.0"}) {
    FILE* file = std::fopen((stale + "/" + name).c_str(), "w");
    std::fputs(std::string(name) == "session" ? "deadbeef" : "1 2 3", file);
    std::fclose(file);
  }
  EXPECT(AllZero(RunRanks({300, 0, 0}, ExchangeRank, base, "job-b")));
  EXPECT(!DirectoryExists(stale));

  // A single rank needs nobody.
  EXPECT(AllZero(RunRanks({0}, ExchangeRank, base, "job-c")));

  // A missing peer: bounded wait, clear message.
  {
    HostExchange lonely;
    std::string error;
    auto start = std::chrono::steady_clock::now();
    bool ok = lonely.Open(ExchangeOptions(base, "job-d", 0, 3, 0.5), &error);
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT(!ok && waited < 5.0);
    EXPECT(error.find("timed out") != std::string::npos &&
           error.find("rank(s) 1,2") != std::string::npos);
    HostExchange peer;
    EXPECT(!peer.Open(ExchangeOptions(base, "job-e", 2, 3, 0.3), &error));
    EXPECT(error.find("waiting for rank 0") != std::string::npos);
  }

  // A failing peer ends the others' waits at once.
  EXPECT(AllZero(RunRanks({0, 0}, AbortingRank, base, "job-f")));

  std::string cleanup = "rm -rf '" + base + "'";
  EXPECT(std::system(cleanup.c_str()) == 0);
}

}  // namespace

int main() {
  TestParseSize();
  TestDefaults();
  TestNcclTestsFlags();
  TestLists();
  TestCollectiveArgs();
  TestMaxBytes();
  TestCollShapes();
  TestYaliFlags();
  TestRegistered();
  TestCtaPolicy();
  TestNcclMemory();
  TestRepeatAndTimeLimit();
  TestCallCountsWithinTimeLimit();
  TestBadOptions();
  TestTuneArgs();
  TestSizeSweep();
  TestLaunchEnv();
  TestStats();
  TestReport();
  TestTuneLine();
  TestTuneCandidates();
  TestTuneChoices();
  TestTuneTable();
  TestTuneExchangeNames();
  TestTuneExchangeSizes();
  TestTuneExchangeChoices();
  TestTuneExchangeTable();
  TestHostExchange();
  return Summary();
}
