// The GPU test cases. Each runs in both launch modes (and under MPI); see suite.h for the rules a
// case follows (the same collective steps in the same order on every process).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runs.h"
#include "suite.h"
#include "text_helpers.h"

namespace yt {

// The cases of every collective (cases_collectives.cc).
const std::vector<CaseDef>& collectiveCases();
const std::vector<CaseDef>& alltoallvCases();  // cases_alltoallv.cc
const std::vector<CaseDef>& p2pCases();        // cases_p2p.cc

namespace {

// Every element type (data.h): the AllReduce cases below run them all.
const auto& kDtypes = kEveryDtype;
const yaliRedOp_t kOps[] = {yaliSum, yaliProd, yaliMax, yaliMin, yaliAvg};


RunSpec spec(size_t count, yaliDataType_t dt, yaliRedOp_t op, Layout L = Layout()) {
  RunSpec s;
  s.count = count;
  s.dt = dt;
  s.op = op;
  s.layout = L;
  return s;
}

// Every dtype x every op it takes (avg: floating types only) for each count.
void crossProduct(Ctx& ctx, const std::vector<yaliComm_t>& comms, const std::vector<size_t>& counts,
                  Layout L = Layout()) {
  for (size_t count : counts) {
    for (yaliDataType_t dt : kDtypes) {
      for (yaliRedOp_t op : kOps) {
        if (opValidFor(op, dt)) allreduceAndVerify(ctx, comms, spec(count, dt, op, L));
      }
    }
  }
}

// ---- basics: queries, algorithm info, groups, device lists ---------------------------------------

void caseBasics(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("basics");
  for (size_t i = 0; i < comms.size(); ++i) {
    const LocalRank& lr = ctx.local[i];
    int count = -1, dev = -1, rank = -1;
    yaliResult_t r1 = yaliCommCount(comms[i], &count);
    yaliResult_t r2 = yaliCommCuDevice(comms[i], &dev);
    yaliResult_t r3 = yaliCommUserRank(comms[i], &rank);
    if (r1 != yaliSuccess || count != ctx.nranks) {
      ctx.fail("yaliCommCount (rank %d) returned %d, count %d; expected %d", lr.rank, (int)r1, count,
               ctx.nranks);
    }
    if (r2 != yaliSuccess || dev != lr.dev) {
      ctx.fail("yaliCommCuDevice (rank %d) returned %d, device %d; expected %d", lr.rank, (int)r2,
               dev, lr.dev);
    }
    if (r3 != yaliSuccess || rank != lr.rank) {
      ctx.fail("yaliCommUserRank (rank %d) returned %d, rank %d; expected %d", lr.rank, (int)r3,
               rank, lr.rank);
    }
    expectFailure(ctx, "yaliCommCount(comm, NULL)", yaliCommCount(comms[i], nullptr),
                  yaliInvalidArgument, "yaliCommCount", "count");
    expectFailure(ctx, "yaliCommCuDevice(comm, NULL)", yaliCommCuDevice(comms[i], nullptr),
                  yaliInvalidArgument, "yaliCommCuDevice", "device");
    expectFailure(ctx, "yaliCommUserRank(comm, NULL)", yaliCommUserRank(comms[i], nullptr),
                  yaliInvalidArgument, "yaliCommUserRank", "rank");
    yaliResult_t async = yaliInProgress;
    yaliResult_t r4 = yaliCommGetAsyncError(comms[i], &async);
    if (r4 != yaliSuccess || async != yaliSuccess) {
      ctx.fail("yaliCommGetAsyncError on a fresh comm (rank %d) returned %d, asyncError %d", lr.rank,
               (int)r4, (int)async);
    }
  }

  // Algorithm info: well formed, and the same answer on every rank (ranks that chose different
  // algorithms for one call would not meet).
  const size_t infoCounts[] = {0, 1, 1000, 1 << 16, 1 << 20, 1 << 24, (size_t)1 << 28};
  for (size_t count : infoCounts) {
    for (yaliDataType_t dt : kDtypes) {
      std::vector<uint64_t> hashes(comms.size(), 0);
      for (size_t i = 0; i < comms.size(); ++i) {
        yaliAlgoInfo_t info;
        std::memset(&info, 0x5A, sizeof info);
        yaliResult_t r = yaliAllReduceAlgoInfo(comms[i], nullptr, nullptr, count, dt, yaliSum, &info);
        if (r != yaliSuccess) {
          ctx.fail("yaliAllReduceAlgoInfo(count=%zu, %s) (rank %d) returned %d: %s", count,
                   dtypeName(dt), ctx.local[i].rank, (int)r, yaliGetLastError(nullptr));
          continue;
        }
        size_t len = strnlen(info.algorithm, sizeof info.algorithm);
        bool ok = len > 0 && len < sizeof info.algorithm;
        if (count > 0) ok = ok && info.ctas > 0 && info.threads > 0 && info.threads <= 1024;
        if (!ok) {
          ctx.fail("yaliAllReduceAlgoInfo(count=%zu, %s) (rank %d): malformed: algorithm \"%.*s\" "
                   "(length %zu), ctas %d, threads %d",
                   count, dtypeName(dt), ctx.local[i].rank, (int)std::min<size_t>(len, 32),
                   info.algorithm, len, info.ctas, info.threads);
        }
        // NULL buffers: the choice for unregistered memory, which is never the zero-copy one.
        if (ok && std::strcmp(info.algorithm, "direct") == 0) {
          ctx.fail("yaliAllReduceAlgoInfo(NULL, NULL, count=%zu, %s) (rank %d) reports \"direct\", "
                   "which needs registered buffers", count, dtypeName(dt), ctx.local[i].rank);
        }
        uint64_t h = mix64(count) ^ mix64((uint64_t)info.ctas * 1000003u + (uint64_t)info.threads);
        h = mix64(h ^ (uint64_t)info.chunkBytes);
        for (size_t k = 0; k < len && k < sizeof info.algorithm; ++k) h = mix64(h ^ (unsigned char)info.algorithm[k]);
        hashes[i] = h;
      }
      char label[96];
      std::snprintf(label, sizeof label, "yaliAllReduceAlgoInfo(count=%zu, %s)", count, dtypeName(dt));
      checkIdentity(ctx, hashes, label);
    }
  }
  for (size_t i = 0; i < comms.size(); ++i) {
    yaliAlgoInfo_t info;
    expectFailure(ctx, "yaliAllReduceAlgoInfo(info=NULL)",
                  yaliAllReduceAlgoInfo(comms[i], nullptr, nullptr, 1024, yaliFloat32, yaliSum, nullptr),
                  yaliInvalidArgument, "yaliAllReduceAlgoInfo", "info");
    expectFailure(ctx, "yaliAllReduceAlgoInfo(datatype=12)",
                  yaliAllReduceAlgoInfo(comms[i], nullptr, nullptr, 1024, (yaliDataType_t)yaliNumTypes, yaliSum, &info),
                  yaliInvalidArgument, "yaliAllReduceAlgoInfo", "datatype");
    expectFailure(ctx, "yaliAllReduceAlgoInfo(op=17)",
                  yaliAllReduceAlgoInfo(comms[i], nullptr, nullptr, 1024, yaliFloat32, (yaliRedOp_t)17, &info),
                  yaliInvalidArgument, "yaliAllReduceAlgoInfo", "op");
  }

  // A plain allreduce, then the same inside yaliGroupStart/End (NCCL-style code).
  allreduceAndVerify(ctx, comms, spec(4093, yaliFloat32, yaliSum));
  {
    Run run(ctx, spec(65537, yaliBfloat16, yaliSum));
    run.prepare(ctx.nextSeed());
    yaliResult_t gs = yaliGroupStart();
    if (gs != yaliSuccess) ctx.fail("yaliGroupStart returned %d", (int)gs);
    run.issue(comms);
    yaliResult_t ge = yaliGroupEnd();
    if (ge != yaliSuccess) ctx.fail("yaliGroupEnd returned %d: %s", (int)ge, yaliGetLastError(nullptr));
    run.verify(comms, "inside yaliGroupStart/End");
  }
  // Count 0 with NULL buffers is a no-op, not an error.
  for (size_t i = 0; i < comms.size(); ++i) {
    yaliResult_t r = yaliAllReduce(nullptr, nullptr, 0, yaliFloat32, yaliSum, comms[i],
                                   ctx.local[i].stream);
    if (r != yaliSuccess) {
      ctx.fail("yaliAllReduce(NULL, NULL, count=0) (rank %d) returned %d (%s): %s",
               ctx.local[i].rank, (int)r, yaliGetErrorString(r), yaliGetLastError(nullptr));
    }
  }
  allreduceAndVerify(ctx, comms, spec(1023, yaliFloat16, yaliMax), "after count 0 with NULL buffers");
  ctx.destroyComms(comms, "basics");

  std::set<int> devices;
  for (const LocalRank& lr : ctx.local) devices.insert(lr.dev);
  if (ctx.single() && devices.size() == ctx.local.size()) {  // not with --share-gpus
    // devlist NULL: comms[i] on device i.
    std::vector<yaliComm_t> c(ctx.local.size(), nullptr);
    watchdogStep("yaliCommInitAll with devlist NULL");
    yaliResult_t r = yaliCommInitAll(c.data(), (int)c.size(), nullptr);
    if (r != yaliSuccess) {
      ctx.fail("yaliCommInitAll(devlist=NULL) returned %d: %s", (int)r, yaliGetLastError(nullptr));
    } else {
      for (size_t i = 0; i < c.size(); ++i) {
        int dev = -1, rank = -1;
        yaliCommCuDevice(c[i], &dev);
        yaliCommUserRank(c[i], &rank);
        if (dev != (int)i || rank != (int)i) {
          ctx.fail("yaliCommInitAll(devlist=NULL): comms[%zu] is on device %d rank %d; expected %zu, %zu",
                   i, dev, rank, i, i);
        }
      }
      ctx.destroyComms(c, "devlist NULL");
    }
    // A reversed devlist: comms[i] is rank i on device n-1-i.
    const int n = (int)ctx.local.size();
    std::vector<int> rev(n);
    for (int i = 0; i < n; ++i) rev[i] = ctx.local[n - 1 - i].dev;
    std::vector<yaliComm_t> rc = ctx.createComms("reversed devlist", rev.data());
    for (int i = 0; i < n; ++i) {
      int dev = -1, rank = -1;
      yaliCommCuDevice(rc[i], &dev);
      yaliCommUserRank(rc[i], &rank);
      if (dev != rev[i] || rank != i) {
        ctx.fail("reversed devlist: comms[%d] is on device %d rank %d; expected device %d rank %d", i,
                 dev, rank, rev[i], i);
      }
    }
    std::vector<LocalRank> saved = ctx.local;
    for (int i = 0; i < n; ++i) {
      ctx.local[i] = saved[n - 1 - i];
      ctx.local[i].rank = i;
    }
    allreduceAndVerify(ctx, rc, spec(262147, yaliFloat32, yaliSum), "reversed devlist");
    allreduceAndVerify(ctx, rc, spec(4093, yaliBfloat16, yaliMin), "reversed devlist");
    ctx.local = saved;
    ctx.destroyComms(rc, "reversed devlist");
  }
}

// ---- counts --------------------------------------------------------------------------------------

void caseCountsSmall(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("counts_small");
  std::vector<size_t> counts = {0, 1, 2, 3, 7, 31, 127, 1023, 1024, 4093};
  if (ctx.quick()) counts = {0, 1, 3, 31, 1024, 4093};
  crossProduct(ctx, comms, counts);
  ctx.destroyComms(comms, "counts_small");
}

void caseCountsMedium(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("counts_medium");
  std::vector<size_t> counts = {65537, 262147, 1048573};
  if (ctx.quick()) counts = {65537};
  crossProduct(ctx, comms, counts);
  ctx.destroyComms(comms, "counts_medium");
}

void caseCountsLarge(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("counts_large");
  std::vector<size_t> counts = {4194301, 16777259};
  if (ctx.quick()) counts = {4194301};
  for (size_t count : counts) {
    allreduceAndVerify(ctx, comms, spec(count, yaliFloat32, yaliSum));
    allreduceAndVerify(ctx, comms, spec(count, yaliBfloat16, yaliSum));
  }
  ctx.destroyComms(comms, "counts_large");
}

void caseCount1GiB(Ctx& ctx) {
  if (!ctx.requireAll(!ctx.quick(), "not run with --quick")) return;
  const size_t count = ((size_t)1 << 28) + 3;  // 1 GiB of fp32, plus an odd tail
  // Input + output of fp32, and as much again for the library's own buffers and headroom.
  const size_t need = 4 * count * 4;
  size_t freeMem = minFreeMemory(ctx);
  char why[128];
  std::snprintf(why, sizeof why, "needs %zu MiB free per GPU, %zu MiB free", need >> 20, freeMem >> 20);
  if (!ctx.requireAll(freeMem >= need, why)) return;
  std::vector<yaliComm_t> comms = ctx.createComms("count_1gib");
  allreduceAndVerify(ctx, comms, spec(count, yaliFloat32, yaliSum));
  allreduceAndVerify(ctx, comms, spec(count, yaliBfloat16, yaliSum));
  ctx.destroyComms(comms, "count_1gib");
}

// ---- buffer placement ----------------------------------------------------------------------------

void caseOffsets(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("offsets");
  struct Pair {
    size_t send, recv;
  };
  std::vector<Pair> pairs = {{1, 3}, {3, 5}, {5, 1}, {1, 1}, {0, 3}, {5, 0}};
  std::vector<size_t> counts = {4093, 262147};
  if (ctx.quick()) {
    pairs = {{1, 3}, {5, 0}};
    counts = {4093};
  }
  for (yaliDataType_t dt : kDtypes) {
    for (const Pair& p : pairs) {
      for (size_t count : counts) {
        Layout L;
        L.sendOff = p.send;
        L.recvOff = p.recv;
        allreduceAndVerify(ctx, comms, spec(count, dt, yaliSum, L));
      }
    }
  }
  // Other ops through the misaligned paths.
  Layout L;
  L.sendOff = 3;
  L.recvOff = 5;
  for (yaliRedOp_t op : kOps) allreduceAndVerify(ctx, comms, spec(65537, yaliFloat16, op, L));
  L.sendOff = 1;
  L.recvOff = 1;
  allreduceAndVerify(ctx, comms, spec(1048573, yaliBfloat16, yaliAvg, L));
  ctx.destroyComms(comms, "offsets");
}

void casePoolMemory(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("pool_memory");
  for (Alloc a : {Alloc::DefaultPool, Alloc::OwnPool}) {
    Layout L;
    L.alloc = a;
    allreduceAndVerify(ctx, comms, spec(4093, yaliFloat32, yaliSum, L));
    allreduceAndVerify(ctx, comms, spec(1048573, yaliBfloat16, yaliSum, L));
    if (!ctx.quick()) allreduceAndVerify(ctx, comms, spec(65537, yaliFloat16, yaliMax, L));
    Layout off = L;
    off.sendOff = 1;
    off.recvOff = 3;
    allreduceAndVerify(ctx, comms, spec(4093, yaliBfloat16, yaliSum, off));
    Layout inplace = L;
    inplace.inplace = true;
    allreduceAndVerify(ctx, comms, spec(262147, yaliFloat32, yaliSum, inplace));
  }
  ctx.destroyComms(comms, "pool_memory");
}

void caseSubAllocation(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("suballocation");
  Layout L;
  L.shared = true;
  allreduceAndVerify(ctx, comms, spec(1023, yaliFloat32, yaliSum, L));
  allreduceAndVerify(ctx, comms, spec(4194301, yaliBfloat16, yaliMax, L));
  L.sendOff = 1;
  L.recvOff = 3;
  allreduceAndVerify(ctx, comms, spec(262147, yaliFloat16, yaliSum, L));
  L.sendOff = 3;
  L.recvOff = 1;
  allreduceAndVerify(ctx, comms, spec(65537, yaliFloat32, yaliAvg, L));
  ctx.destroyComms(comms, "suballocation");
}

void caseInPlace(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("inplace");
  Layout L;
  L.inplace = true;
  std::vector<size_t> cross = {1, 31, 4093, 262147};
  if (ctx.quick()) cross = {31, 4093};
  crossProduct(ctx, comms, cross, L);
  std::vector<size_t> big = {0, 1048573, 16777259};
  if (ctx.quick()) big = {0, 1048573};
  for (size_t count : big) {
    allreduceAndVerify(ctx, comms, spec(count, yaliFloat32, yaliSum, L));
    allreduceAndVerify(ctx, comms, spec(count, yaliBfloat16, yaliSum, L));
  }
  L.sendOff = 3;
  allreduceAndVerify(ctx, comms, spec(65537, yaliFloat16, yaliSum, L));
  ctx.destroyComms(comms, "inplace");
}

// ---- back to back --------------------------------------------------------------------------------

// kCalls allreduces without a host synchronization: before each, the generator rewrites the one
// send buffer (stream order makes that safe once the previous allreduce is done on this rank); each
// call writes its own output buffer, and all are checked at the end.
void backToBack(Ctx& ctx, const std::vector<yaliComm_t>& comms, yaliDataType_t dt, yaliRedOp_t op) {
  const int kCalls = ctx.quick() ? 20 : 50;
  const size_t cycle[] = {1023, 65537, 4093, 262147, 1048573, 7, 16384};
  const size_t ncycle = sizeof cycle / sizeof cycle[0];
  const size_t es = dtypeSize(dt);
  const size_t maxCount = *std::max_element(cycle, cycle + ncycle);
  std::vector<size_t> counts(kCalls);
  std::vector<uint64_t> seeds(kCalls);
  for (int k = 0; k < kCalls; ++k) {
    counts[k] = cycle[k % ncycle];
    seeds[k] = ctx.nextSeed();
  }
  struct RankBufs {
    DevAlloc send;
    std::vector<DevAlloc> outs;
  };
  std::vector<RankBufs> rb(ctx.local.size());
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    const LocalRank& lr = ctx.local[i];
    rb[i].send = allocDev(ctx, lr.dev, maxCount * es + 2 * kGuardBytes, Alloc::Malloc, lr.stream);
    fillGuard(ctx, rb[i].send, lr.stream);
    for (int k = 0; k < kCalls; ++k) {
      rb[i].outs.push_back(allocDev(ctx, lr.dev, counts[k] * es + 2 * kGuardBytes, Alloc::Malloc, lr.stream));
      fillGuard(ctx, rb[i].outs[k], lr.stream);
      CUDA_OK(ctx, cudaMemsetAsync(rb[i].outs[k].p + kGuardBytes, kPoisonByte, counts[k] * es, lr.stream));
    }
  }
  syncAll(ctx);

  char label[128];
  std::snprintf(label, sizeof label, "back-to-back %s %s", dtypeName(dt), opName(op));
  watchdogStep("%s: issuing %d allreduces without host synchronization", label, kCalls);
  for (int k = 0; k < kCalls; ++k) {
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      const LocalRank& lr = ctx.local[i];
      CUDA_OK(ctx, cudaSetDevice(lr.dev));
      CUDA_OK(ctx, launchGenerate(rb[i].send.p + kGuardBytes, counts[k], dt, op, lr.rank, seeds[k],
                                  nullptr, lr.stream));
    }
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      yaliResult_t r = yaliAllReduce(rb[i].send.p + kGuardBytes, rb[i].outs[k].p + kGuardBytes,
                                     counts[k], dt, op, comms[i], ctx.local[i].stream);
      char what[160];
      std::snprintf(what, sizeof what, "%s call %d (count %zu)", label, k, counts[k]);
      checkIssued(ctx, r, ctx.local[i].rank, comms[i], what);
    }
  }
  for (int k = 0; k < kCalls; ++k) {
    char what[160];
    std::snprintf(what, sizeof what, "%s call %d of %d (count %zu)", label, k, kCalls, counts[k]);
    std::vector<uint64_t> hashes(ctx.local.size(), 0);
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      const char* out = rb[i].outs[k].p + kGuardBytes;
      // The send buffer holds the last call's input at the end: check it for that call only.
      const void* in = k == kCalls - 1 ? rb[i].send.p + kGuardBytes : nullptr;
      checkOutput(ctx, (int)i, comms[i], ctx.local[i].stream, out, counts[k], dt, op, seeds[k], in,
                  what, &hashes[i]);
      checkGuard(ctx, rb[i].outs[k], {{out, counts[k] * es}}, what);
    }
    checkIdentity(ctx, hashes, what);
  }
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    checkGuard(ctx, rb[i].send, {{rb[i].send.p + kGuardBytes, maxCount * es}}, label);
    freeDev(ctx, rb[i].send);
    for (DevAlloc& a : rb[i].outs) freeDev(ctx, a);
  }
}

void caseBackToBack(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("back_to_back");
  backToBack(ctx, comms, yaliFloat32, yaliSum);
  backToBack(ctx, comms, yaliBfloat16, yaliSum);
  if (!ctx.quick()) backToBack(ctx, comms, yaliFloat16, yaliMax);
  ctx.destroyComms(comms, "back_to_back");
}

// ---- several communicators -----------------------------------------------------------------------

void caseMultiComm(Ctx& ctx) {
  std::vector<yaliComm_t> a = ctx.createComms("multi_comm A");
  std::vector<yaliComm_t> b = ctx.createComms("multi_comm B");
  std::vector<cudaStream_t> second(ctx.local.size());
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaStreamCreateWithFlags(&second[i], cudaStreamNonBlocking));
  }
  // Different streams: A on the main stream, B on a second one, both in flight at once. Every rank
  // issues in the same order (the header's rule), alternating which comm goes first.
  {
    Run ra(ctx, spec(262147, yaliFloat32, yaliSum));
    Run rb(ctx, spec(65537, yaliBfloat16, yaliMax), second);
    const int iters = ctx.quick() ? 2 : 4;
    for (int it = 0; it < iters; ++it) {
      ra.prepare(ctx.nextSeed());
      rb.prepare(ctx.nextSeed());
      if (it % 2 == 0) {
        ra.issue(a);
        rb.issue(b);
      } else {
        rb.issue(b);
        ra.issue(a);
      }
      ra.verify(a, "comm A (main stream)");
      rb.verify(b, "comm B (second stream)");
    }
  }
  // The same stream: A, B, A, B queued back to back.
  {
    Run a1(ctx, spec(4093, yaliFloat16, yaliSum));
    Run b1(ctx, spec(1048573, yaliFloat32, yaliSum));
    Run a2(ctx, spec(65537, yaliBfloat16, yaliAvg));
    Run b2(ctx, spec(31, yaliFloat32, yaliProd));
    a1.prepare(ctx.nextSeed());
    b1.prepare(ctx.nextSeed());
    a2.prepare(ctx.nextSeed());
    b2.prepare(ctx.nextSeed());
    a1.issue(a);
    b1.issue(b);
    a2.issue(a);
    b2.issue(b);
    a1.verify(a, "same stream, comm A #1");
    b1.verify(b, "same stream, comm B #1");
    a2.verify(a, "same stream, comm A #2");
    b2.verify(b, "same stream, comm B #2");
  }
  // Destroying one comm leaves the other working.
  ctx.destroyComms(a, "multi_comm A");
  allreduceAndVerify(ctx, b, spec(262147, yaliFloat32, yaliSum), "comm B after A was destroyed");
  ctx.destroyComms(b, "multi_comm B");
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaStreamDestroy(second[i]));
  }
}

// ---- a group on two streams -----------------------------------------------------------------------

// NCCL treats a group whose calls on one comm use several streams as posted on every one of them
// (its guide, "Mixing multiple streams within the same ncclGroupStart/End() group"), and so does
// yaliGroupEnd (enqueue.cc, joinStreams). Per rank: stream A (the main one) and a second stream B.
// Every input is generated on B behind a 100 ms delay, A is busy for 20 ms, and both outputs are
// checked on B after the group. Order 1, the group's AllReduce on A first and one on B after it:
// A's call must wait for B's input (the launch order alone made it wait for nothing on B). Order 2,
// the call on B first: B's check must wait for A's call, which came later (the launch order alone
// made A's call wait for B's, not B for A's).
void caseGroupStreams(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("group_streams");
  const size_t nl = ctx.local.size();
  std::vector<cudaStream_t> a(nl), b(nl);
  for (size_t i = 0; i < nl; ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaStreamCreateWithFlags(&b[i], cudaStreamNonBlocking));
    a[i] = ctx.local[i].stream;
  }
  for (int order = 1; order <= 2; ++order) {
    Run onA(ctx, spec(4194301, yaliFloat32, yaliSum), b);  // prepared and checked on B, issued on A
    Run onB(ctx, spec(65537, yaliBfloat16, yaliSum), b);
    for (size_t i = 0; i < nl; ++i) {
      CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
      CUDA_OK(ctx, launchDelay(100, b[i]));
      CUDA_OK(ctx, launchDelay(20, a[i]));
    }
    onA.prepare(ctx.nextSeed());
    onB.prepare(ctx.nextSeed());
    for (size_t i = 0; i < nl; ++i) onA.ranks[i].stream = a[i];
    const yaliResult_t gs = yaliGroupStart();
    if (gs != yaliSuccess) ctx.fail("yaliGroupStart returned %d", (int)gs);
    Run& first = order == 1 ? onA : onB;
    Run& second = order == 1 ? onB : onA;
    first.issue(comms);
    second.issue(comms);
    const yaliResult_t ge = yaliGroupEnd();
    if (ge != yaliSuccess) ctx.fail("yaliGroupEnd returned %d: %s", (int)ge, yaliGetLastError(nullptr));
    for (size_t i = 0; i < nl; ++i) onA.ranks[i].stream = b[i];
    onA.verify(comms, order == 1 ? "order 1: the call on A, after B's input" : "order 2: the call on A, checked on B");
    onB.verify(comms, order == 1 ? "order 1: the call on B" : "order 2: the call on B");
  }
  ctx.destroyComms(comms, "group_streams");
  for (size_t i = 0; i < nl; ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaStreamDestroy(b[i]));
  }
}

// ---- CUDA graphs ---------------------------------------------------------------------------------

void caseGraphs(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("graphs");
  // Three allreduces of about 4 KB, 1 MB and 16 MB, each with its generator kernel and poisoning
  // captured before it; the generator reads its seed from device memory that the host rewrites
  // between replays.
  std::vector<RunSpec> specs = {spec(1024, yaliFloat32, yaliSum),
                                spec(524288, yaliBfloat16, yaliAvg),
                                spec(ctx.quick() ? 262147 : 4194301, yaliFloat32, yaliSum)};
  const int kReplays = ctx.quick() ? 5 : 20;
  std::vector<std::unique_ptr<Run>> runs;
  for (const RunSpec& s : specs) runs.emplace_back(new Run(ctx, s));
  const size_t nl = ctx.local.size();
  for (size_t i = 0; i < nl; ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    for (auto& run : runs) {
      for (const DevAlloc& al : run->ranks[i].allocs) fillGuard(ctx, al, ctx.local[i].stream);
    }
  }
  syncAll(ctx);

  {
    ReplayableGraphs graphs(ctx);
    watchdogStep("graphs: capturing");
    bool issued = true;
    graphs.beginCapture();
    for (size_t k = 0; k < runs.size(); ++k) {
      const RunSpec& s = runs[k]->spec;
      for (size_t i = 0; i < nl; ++i) {
        const LocalRank& lr = ctx.local[i];
        Run::Rank& R = runs[k]->ranks[i];
        CUDA_OK(ctx, cudaSetDevice(lr.dev));
        CUDA_OK(ctx, launchGenerate(R.send, s.count, s.dt, s.op, lr.rank, /*salt=*/k + 1,
                                    graphs.seedDev[i], lr.stream));
        CUDA_OK(ctx, cudaMemsetAsync(R.recv, kPoisonByte, s.count * dtypeSize(s.dt), lr.stream));
      }
      for (size_t i = 0; i < nl; ++i) {
        Run::Rank& R = runs[k]->ranks[i];
        yaliResult_t r = yaliAllReduce(R.send, R.recv, s.count, s.dt, s.op, comms[i], R.stream);
        issued &= checkIssued(ctx, r, ctx.local[i].rank, comms[i],
                              "captured yaliAllReduce " + describe(s));
      }
    }
    if (graphs.endCapture(issued)) {
      for (int rep = 0; rep < kReplays; ++rep) {
        uint64_t replaySeed = ctx.nextSeed();
        watchdogStep("graphs: replay %d of %d", rep + 1, kReplays);
        graphs.replay(replaySeed);
        for (size_t k = 0; k < runs.size(); ++k) {
          const RunSpec& s = runs[k]->spec;
          char what[160];
          std::snprintf(what, sizeof what, "graph replay %d, allreduce %zu (%s)", rep, k,
                        describe(s).c_str());
          std::vector<uint64_t> hashes(nl, 0);
          const uint64_t seed = combineSeed(replaySeed, k + 1);
          const size_t bytes = s.count * dtypeSize(s.dt);
          for (size_t i = 0; i < nl; ++i) {
            Run::Rank& R = runs[k]->ranks[i];
            checkOutput(ctx, (int)i, comms[i], R.stream, R.recv, s.count, s.dt, s.op, seed, R.send,
                        what, &hashes[i]);
            for (const DevAlloc& al : R.allocs) checkGuard(ctx, al, {{R.send, bytes}, {R.recv, bytes}}, what);
          }
          checkIdentity(ctx, hashes, what);
        }
      }
    }
  }  // the graphs are destroyed here
  // The comm still works eagerly after its graphs are gone.
  allreduceAndVerify(ctx, comms, spec(4093, yaliFloat32, yaliSum), "eager after graphs");
  runs.clear();
  ctx.destroyComms(comms, "graphs");
}

// ---- timeout -------------------------------------------------------------------------------------

// Rank 0 issues one allreduce that no other rank joins: its device wait must end after
// YALI_TIMEOUT_MS with yaliTimeout, never hang.
void caseTimeout(Ctx& ctx) {
  const int kTimeoutMs = 2000;
  const double kMarginMs = 5000;
  const char* old = std::getenv("YALI_TIMEOUT_MS");
  std::string saved = old ? old : "";
  setenv("YALI_TIMEOUT_MS", std::to_string(kTimeoutMs).c_str(), 1);
  // YALI_TIMEOUT_MS also bounds comm init: start it together on every process.
  ctx.world->barrier();
  std::vector<yaliComm_t> comms = ctx.createComms("timeout (YALI_TIMEOUT_MS=2000)");
  Run run(ctx, spec(4093, yaliFloat32, yaliSum));
  run.prepare(ctx.nextSeed());
  syncAll(ctx);
  ctx.world->barrier();
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    if (ctx.local[i].rank != 0) continue;
    yaliComm_t comm = comms[i];
    cudaStream_t stream = ctx.local[i].stream;
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    auto t0 = std::chrono::steady_clock::now();
    yaliResult_t r = yaliAllReduce(run.ranks[i].send, run.ranks[i].recv, 4093, yaliFloat32, yaliSum,
                                   comm, stream);
    checkIssued(ctx, r, 0, comm, "the lone allreduce");
    watchdogStep("timeout: waiting for rank 0's stream (no other rank joined its allreduce)");
    cudaError_t e = cudaStreamSynchronize(stream);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ctx.note("the lone allreduce's stream returned after %.0f ms (%s)", ms, cudaGetErrorString(e));
    if (e != cudaSuccess) {
      ctx.fail("cudaStreamSynchronize after the timeout returned %s: a timed-out wait must end its "
               "kernel cleanly (no trap), leaving the CUDA context usable",
               cudaGetErrorString(e));
    }
    if (ms > kTimeoutMs + kMarginMs) {
      ctx.fail("the stream returned after %.0f ms, more than YALI_TIMEOUT_MS + %.0f ms", ms, kMarginMs);
    }
    if (ms < 0.9 * kTimeoutMs) {
      ctx.fail("the stream returned after %.0f ms, before YALI_TIMEOUT_MS=%d elapsed", ms, kTimeoutMs);
    }
    yaliResult_t async = yaliSuccess;
    r = yaliCommGetAsyncError(comm, &async);
    if (r != yaliSuccess || async != yaliTimeout) {
      ctx.fail("yaliCommGetAsyncError returned %d with asyncError %d (%s); expected yaliTimeout", (int)r,
               (int)async, yaliGetErrorString(async));
    }
    r = yaliAllReduce(run.ranks[i].send, run.ranks[i].recv, 4093, yaliFloat32, yaliSum, comm, stream);
    if (r != yaliTimeout) {
      ctx.fail("the next yaliAllReduce on the timed-out comm returned %d (%s); expected yaliTimeout",
               (int)r, yaliGetErrorString(r));
    }
    const char* m = yaliGetLastError(comm);
    std::string msg = lower(m ? m : "");
    if (msg.find("timeout") == std::string::npos && msg.find("timed out") == std::string::npos) {
      ctx.fail("yaliGetLastError(comm) does not mention the timeout: \"%s\"", m ? m : "(null)");
    }
  }
  ctx.world->barrier();
  watchdogStep("timeout: yaliCommAbort on every comm");
  for (size_t i = 0; i < comms.size(); ++i) {
    yaliResult_t r = yaliCommAbort(comms[i]);
    if (r != yaliSuccess) {
      ctx.fail("yaliCommAbort (rank %d) returned %d (%s): %s", ctx.local[i].rank, (int)r,
               yaliGetErrorString(r), yaliGetLastError(nullptr));
    }
  }
  if (old) setenv("YALI_TIMEOUT_MS", saved.c_str(), 1);
  else unsetenv("YALI_TIMEOUT_MS");
  // Run's destructor synchronizes the streams: still fine after the abort.
}

// ---- bad arguments with a real comm --------------------------------------------------------------

void caseBadArgs(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("bad_args");
  const size_t count = 4093;
  const size_t bytes = count * 4;
  Run run(ctx, spec(count, yaliFloat32, yaliSum));
  run.prepare(ctx.nextSeed());
  syncAll(ctx);
  std::vector<char> hostMem(bytes + 64);
  void* host = hostMem.data() + (64 - ((uintptr_t)hostMem.data() & 63));
  for (size_t i = 0; i < comms.size(); ++i) {
    const LocalRank& lr = ctx.local[i];
    void* s = run.ranks[i].send;
    void* d = run.ranks[i].recv;
    cudaStream_t st = lr.stream;
    yaliComm_t c = comms[i];
    auto one = [&](const char* what, const char* arg, yaliResult_t got) {
      std::string w = std::string("yaliAllReduce with ") + what + " (rank " + std::to_string(lr.rank) + ")";
      expectFailure(ctx, w, got, yaliInvalidArgument, "yaliAllReduce", arg);
    };
    one("sendbuff NULL", "sendbuff", yaliAllReduce(nullptr, d, count, yaliFloat32, yaliSum, c, st));
    one("recvbuff NULL", "recvbuff", yaliAllReduce(s, nullptr, count, yaliFloat32, yaliSum, c, st));
    one("datatype 12", "datatype", yaliAllReduce(s, d, count, (yaliDataType_t)yaliNumTypes, yaliSum, c, st));
    one("op 17", "op", yaliAllReduce(s, d, count, yaliFloat32, (yaliRedOp_t)17, c, st));
    one("fp32 sendbuff at byte offset 2", "sendbuff",
        yaliAllReduce((char*)s + 2, d, count - 1, yaliFloat32, yaliSum, c, st));
    one("fp32 recvbuff at byte offset 2", "recvbuff",
        yaliAllReduce(s, (char*)d + 2, count - 1, yaliFloat32, yaliSum, c, st));
    one("host (malloc) sendbuff", "sendbuff", yaliAllReduce(host, d, count, yaliFloat32, yaliSum, c, st));
    one("host (malloc) recvbuff", "recvbuff", yaliAllReduce(s, host, count, yaliFloat32, yaliSum, c, st));
    expectPoisoned(ctx, lr.dev, d, bytes, "after the rejected calls (rank " + std::to_string(lr.rank) + ")");
    yaliResult_t async = yaliInProgress;
    if (yaliCommGetAsyncError(c, &async) != yaliSuccess || async != yaliSuccess) {
      ctx.fail("rejected calls set the comm's async error to %d (%s)", (int)async,
               yaliGetErrorString(async));
    }
  }
  // The comm still works after the rejected calls.
  run.prepare(ctx.nextSeed());
  run.issue(comms);
  run.verify(comms, "valid call after rejected calls");

  // A destroyed comm: its handle is a tombstone; calls on it are invalid usage, not a crash.
  std::vector<yaliComm_t> dead = comms;
  ctx.destroyComms(comms, "bad_args");
  run.prepare(ctx.nextSeed());
  for (size_t i = 0; i < dead.size(); ++i) {
    yaliResult_t r = yaliAllReduce(run.ranks[i].send, run.ranks[i].recv, count, yaliFloat32, yaliSum,
                                   dead[i], ctx.local[i].stream);
    expectFailure(ctx, "yaliAllReduce on a destroyed comm (rank " + std::to_string(ctx.local[i].rank) + ")",
                  r, yaliInvalidUsage, "yaliAllReduce", "comm");
    expectPoisoned(ctx, ctx.local[i].dev, run.ranks[i].recv, bytes, "destroyed comm");
  }
  // An aborted comm: likewise.
  std::vector<yaliComm_t> ab = ctx.createComms("bad_args (to abort)");
  allreduceAndVerify(ctx, ab, spec(count, yaliFloat32, yaliSum), "before abort");
  ctx.world->barrier();
  for (size_t i = 0; i < ab.size(); ++i) {
    yaliResult_t r = yaliCommAbort(ab[i]);
    if (r != yaliSuccess) {
      ctx.fail("yaliCommAbort (rank %d) returned %d: %s", ctx.local[i].rank, (int)r,
               yaliGetLastError(nullptr));
    }
  }
  run.prepare(ctx.nextSeed());
  for (size_t i = 0; i < ab.size(); ++i) {
    yaliResult_t r = yaliAllReduce(run.ranks[i].send, run.ranks[i].recv, count, yaliFloat32, yaliSum,
                                   ab[i], ctx.local[i].stream);
    expectFailure(ctx, "yaliAllReduce on an aborted comm (rank " + std::to_string(ctx.local[i].rank) + ")",
                  r, yaliInvalidUsage, "yaliAllReduce", "comm");
    expectPoisoned(ctx, ctx.local[i].dev, run.ranks[i].recv, bytes, "aborted comm");
  }
  ctx.world->barrier();
}

// ---- create and destroy in a loop ----------------------------------------------------------------

void caseDestroyLoop(Ctx& ctx) {
  const int kIters = 5;
  size_t freeAfterFirst = 0;
  for (int it = 0; it < kIters; ++it) {
    char label[64];
    std::snprintf(label, sizeof label, "iteration %d of %d", it + 1, kIters);
    std::vector<yaliComm_t> comms = ctx.createComms(label);
    allreduceAndVerify(ctx, comms, spec(65537, yaliFloat32, yaliSum), label);
    if (!ctx.quick()) allreduceAndVerify(ctx, comms, spec(4194301, yaliBfloat16, yaliSum), label);
    ctx.destroyComms(comms, label);
    ctx.world->barrier();  // every rank has unmapped its peers' memory
    if (it == 0) freeAfterFirst = minFreeMemory(ctx);
  }
  // What a comm allocates must come back when it is destroyed. The first iteration may leave
  // one-time state (modules, pools), so compare with the state after it.
  size_t freeAfterLast = minFreeMemory(ctx);
  const size_t kSlack = (size_t)64 << 20;
  if (freeAfterLast + kSlack < freeAfterFirst) {
    ctx.fail("device memory not returned: %zu MiB free after the first create/destroy, %zu MiB after "
             "the last (%d iterations)",
             freeAfterFirst >> 20, freeAfterLast >> 20, kIters);
  }
}

}  // namespace

const std::vector<CaseDef>& allCases() {
  static const std::vector<CaseDef> cases = [] {
    std::vector<CaseDef> v = {
      {"basics", "comm queries, algorithm info, groups, count 0, device lists", 120, caseBasics},
      {"counts_small", "counts 0..4093, every dtype x op", 120, caseCountsSmall},
      {"counts_medium", "counts 65537..1048573, every dtype x op", 120, caseCountsMedium},
      {"counts_large", "counts 4194301 and 16777259, sum fp32/bf16", 120, caseCountsLarge},
      {"count_1gib", "2^28+3 elements (1 GiB fp32), sum fp32/bf16", 300, caseCount1GiB},
      {"offsets", "send/recv at 1, 3, 5 elements past an aligned start", 120, caseOffsets},
      {"pool_memory", "buffers from cudaMallocAsync pools", 120, casePoolMemory},
      {"suballocation", "send and recv inside one allocation", 120, caseSubAllocation},
      {"inplace", "sendbuff == recvbuff", 120, caseInPlace},
      {"back_to_back", "50 allreduces without a host sync, one output each", 120, caseBackToBack},
      {"multi_comm", "two comm sets, different and same streams", 120, caseMultiComm},
      {"group_streams", "a group on two streams of one comm: joined as NCCL joins it", 120, caseGroupStreams},
      {"graphs", "3 captured allreduces, 20 replays with new data", 180, caseGraphs},
      {"timeout", "YALI_TIMEOUT_MS=2000, rank 0 alone: yaliTimeout, no hang", 60, caseTimeout},
      {"bad_args", "invalid arguments with a real comm; destroyed and aborted comms", 120, caseBadArgs},
      {"destroy_loop", "create and destroy 5 times", 120, caseDestroyLoop},
    };
    // Registered buffers (yaliCommRegister, the direct algorithm): cases_registered.cc.
    for (const CaseDef& c : registeredCases()) v.push_back(c);
    // Every collective x every type ("coll_*"): cases_collectives.cc.
    for (const CaseDef& c : collectiveCases()) v.push_back(c);
    for (const CaseDef& c : alltoallvCases()) v.push_back(c);
    // yaliSend and yaliRecv ("p2p_*"): cases_p2p.cc.
    for (const CaseDef& c : p2pCases()) v.push_back(c);
    // Failure propagation, lifetimes, argument checks, threads, soaks: cases_trust.cc.
    for (const CaseDef& c : trustCases()) v.push_back(c);
    return v;
  }();
  return cases;
}

}  // namespace yt
