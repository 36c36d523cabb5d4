// Buffers with guards, output checking, identity across ranks (see runs.h), and the helpers of
// the point-to-point and AlltoAllv cases (see case_helpers.h).
#include "runs.h"

#include <cuda.h>  // types only: the driver is reached through the runtime's entry points

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

#include "case_helpers.h"
#include "text_helpers.h"

namespace yt {

const char* allocName(Alloc a) {
  switch (a) {
    case Alloc::Malloc: return "cudaMalloc";
    case Alloc::DefaultPool: return "cudaMallocAsync";
    case Alloc::OwnPool: return "cudaMallocFromPoolAsync";
    case Alloc::CuMemChunks: return "cuMemCreate chunks";
  }
  return "?";
}

namespace {

// The driver's virtual memory functions, through the runtime (the tests link only the runtime).
struct CuMem {
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*setAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*addressFree)(CUdeviceptr, size_t) = nullptr;
};

template <typename F>
void lookUp(Ctx& ctx, const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status;
  CUDA_OK(ctx, cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || p == nullptr) ctx.fatal("the CUDA driver lacks %s", name);
  *fn = reinterpret_cast<F>(p);
}

const CuMem& cuMem(Ctx& ctx) {
  static CuMem d;
  static bool found = false;
  if (!found) {
    lookUp(ctx, "cuMemGetAllocationGranularity", &d.granularity);
    lookUp(ctx, "cuMemCreate", &d.create);
    lookUp(ctx, "cuMemAddressReserve", &d.reserve);
    lookUp(ctx, "cuMemMap", &d.map);
    lookUp(ctx, "cuMemSetAccess", &d.setAccess);
    lookUp(ctx, "cuMemUnmap", &d.unmap);
    lookUp(ctx, "cuMemRelease", &d.release);
    lookUp(ctx, "cuMemAddressFree", &d.addressFree);
    found = true;
  }
  return d;
}

CUmemAllocationProp chunkProperties(int dev) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

#define CU_OK(ctx, call)                                                      \
  do {                                                                        \
    const CUresult cu_ = (call);                                              \
    if (cu_ != CUDA_SUCCESS) (ctx).fatal("%s failed: CUresult %d", #call, (int)cu_); \
  } while (0)

// At least two chunks, each created and mapped on its own, back to back in one address range.
void allocChunks(Ctx& ctx, DevAlloc* a) {
  const CuMem& d = cuMem(ctx);
  const size_t chunk = cuMemChunkBytes(ctx, a->dev);
  const size_t n = std::max<size_t>(2, (a->bytes + chunk - 1) / chunk);
  a->mapped = n * chunk;
  CUdeviceptr va = 0;
  CU_OK(ctx, d.reserve(&va, a->mapped, 0, 0, 0));
  const CUmemAllocationProp prop = chunkProperties(a->dev);
  for (size_t c = 0; c < n; ++c) {
    CUmemGenericAllocationHandle h = 0;
    CU_OK(ctx, d.create(&h, chunk, &prop, 0));
    a->chunks.push_back(h);
    CU_OK(ctx, d.map(va + c * chunk, chunk, 0, h, 0));
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = a->dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_OK(ctx, d.setAccess(va, a->mapped, &access, 1));
  a->p = reinterpret_cast<char*>(va);
}

void freeChunks(Ctx& ctx, DevAlloc* a) {
  const CuMem& d = cuMem(ctx);
  const CUdeviceptr va = reinterpret_cast<CUdeviceptr>(a->p);
  CU_OK(ctx, d.unmap(va, a->mapped));
  for (unsigned long long h : a->chunks) CU_OK(ctx, d.release(h));
  CU_OK(ctx, d.addressFree(va, a->mapped));
  a->chunks.clear();
}

}  // namespace

size_t cuMemChunkBytes(Ctx& ctx, int dev) {
  size_t g = 0;
  const CUmemAllocationProp prop = chunkProperties(dev);
  CU_OK(ctx, cuMem(ctx).granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  return g;
}

DevAlloc allocDev(Ctx& ctx, int dev, size_t bytes, Alloc kind, cudaStream_t stream) {
  DevAlloc a;
  a.dev = dev;
  a.bytes = bytes;
  a.kind = kind;
  a.stream = stream;
  CUDA_OK(ctx, cudaSetDevice(dev));
  void* p = nullptr;
  switch (kind) {
    case Alloc::Malloc: CUDA_OK(ctx, cudaMalloc(&p, bytes)); break;
    case Alloc::DefaultPool: CUDA_OK(ctx, cudaMallocAsync(&p, bytes, stream)); break;
    case Alloc::CuMemChunks:
      allocChunks(ctx, &a);
      p = a.p;
      break;
    case Alloc::OwnPool: {
      cudaMemPoolProps props;
      std::memset(&props, 0, sizeof props);
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = dev;
      CUDA_OK(ctx, cudaMemPoolCreate(&a.pool, &props));
      CUDA_OK(ctx, cudaMallocFromPoolAsync(&p, bytes, a.pool, stream));
      break;
    }
  }
  if (kind == Alloc::DefaultPool || kind == Alloc::OwnPool) CUDA_OK(ctx, cudaStreamSynchronize(stream));
  a.p = static_cast<char*>(p);
  return a;
}

void freeDev(Ctx& ctx, DevAlloc& a) {
  if (a.p == nullptr) return;
  CUDA_OK(ctx, cudaSetDevice(a.dev));
  if (a.kind == Alloc::Malloc) {
    CUDA_OK(ctx, cudaFree(a.p));
  } else if (a.kind == Alloc::CuMemChunks) {
    CUDA_OK(ctx, cudaStreamSynchronize(a.stream));  // cuMemUnmap does not wait for work that uses it
    freeChunks(ctx, &a);
  } else {
    CUDA_OK(ctx, cudaFreeAsync(a.p, a.stream));
    CUDA_OK(ctx, cudaStreamSynchronize(a.stream));
    if (a.pool != nullptr) CUDA_OK(ctx, cudaMemPoolDestroy(a.pool));
  }
  a.p = nullptr;
  a.pool = nullptr;
}

void fillGuard(Ctx& ctx, const DevAlloc& a, cudaStream_t stream) {
  CUDA_OK(ctx, cudaSetDevice(a.dev));
  CUDA_OK(ctx, cudaMemsetAsync(a.p, kGuardByte, a.bytes, stream));
}

bool checkGuard(Ctx& ctx, const DevAlloc& a,
                const std::vector<std::pair<const void*, size_t>>& slices, const std::string& label) {
  // The protected ranges: [0, bytes) minus the slices that lie in this allocation.
  std::vector<std::pair<size_t, size_t>> used;  // [begin, end) offsets
  for (const auto& s : slices) {
    const char* b = static_cast<const char*>(s.first);
    if (b >= a.p && b + s.second <= a.p + a.bytes) {
      used.push_back({(size_t)(b - a.p), (size_t)(b - a.p) + s.second});
    }
  }
  std::sort(used.begin(), used.end());
  std::vector<std::pair<size_t, size_t>> guards;
  size_t at = 0;
  for (const auto& u : used) {
    if (u.first > at) guards.push_back({at, u.first});
    at = std::max(at, u.second);
  }
  if (at < a.bytes) guards.push_back({at, a.bytes});

  CUDA_OK(ctx, cudaSetDevice(a.dev));
  bool ok = true;
  std::vector<unsigned char> host;
  for (const auto& g : guards) {
    host.resize(g.second - g.first);
    CUDA_OK(ctx, cudaMemcpy(host.data(), a.p + g.first, host.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < host.size(); ++i) {
      if (host[i] != kGuardByte) {
        size_t n = 0;
        for (size_t j = i; j < host.size(); ++j) n += host[j] != kGuardByte;
        ctx.fail("%s: guard bytes overwritten (out-of-bounds write): %zu bytes changed in the "
                 "guard region at allocation offset [%zu, %zu), first at offset %zu (0x%02x, "
                 "expected 0x%02x)",
                 label.c_str(), n, g.first, g.second, g.first + i, host[i], kGuardByte);
        ok = false;
        break;
      }
    }
  }
  return ok;
}

namespace {

std::string lastErrors(yaliComm_t comm) {
  std::string s = "yaliGetLastError(NULL)=\"";
  const char* t = yaliGetLastError(nullptr);
  s += t ? t : "(null)";
  s += "\"";
  if (comm != nullptr) {
    const char* c = yaliGetLastError(comm);
    s += " yaliGetLastError(comm)=\"";
    s += c ? c : "(null)";
    s += "\"";
    yaliResult_t async = yaliSuccess;
    if (yaliCommGetAsyncError(comm, &async) == yaliSuccess && async != yaliSuccess) {
      s += " asyncError=";
      s += yaliGetErrorString(async);
    }
  }
  return s;
}

}  // namespace

bool checkIssued(Ctx& ctx, yaliResult_t r, int rank, yaliComm_t comm, const std::string& label) {
  if (r == yaliSuccess) return true;
  ctx.fail("%s: rank %d: yaliAllReduce returned %d (%s); %s", label.c_str(), rank, (int)r,
           yaliGetErrorString(r), lastErrors(comm).c_str());
  return false;
}

bool checkOutput(Ctx& ctx, int localIndex, yaliComm_t comm, cudaStream_t stream, const void* out,
                 size_t count, yaliDataType_t dt, yaliRedOp_t op, uint64_t seed, const void* in,
                 const std::string& label, uint64_t* hash) {
  const LocalRank& lr = ctx.local[localIndex];
  watchdogStep("%s: waiting for rank %d's stream, then checking its output", label.c_str(), lr.rank);
  CUDA_OK(ctx, cudaSetDevice(lr.dev));
  VerifyResult res;
  cudaError_t e = verifyOutput(out, count, dt, op, ctx.nranks, seed, in, lr.rank, lr.scratch, &res,
                               stream);
  if (e != cudaSuccess) {
    ctx.fatal("%s: rank %d: CUDA error while running or checking the allreduce: %s; %s",
              label.c_str(), lr.rank, cudaGetErrorString(e), lastErrors(comm).c_str());
  }
  *hash += res.hash;
  bool ok = true;
  if (res.nbad != 0) {
    ok = false;
    size_t nrec = std::min<size_t>(res.nrec, VerifyResult::kRecords);
    std::vector<VerifyResult::Record> recs(res.rec, res.rec + nrec);
    std::sort(recs.begin(), recs.end(),
              [](const VerifyResult::Record& a, const VerifyResult::Record& b) {
                return a.index < b.index;
              });
    std::string detail;
    char buf[200];
    for (size_t i = 0; i < recs.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%s[%llu] got %.9g expected %.9g (tol %.3g)", i ? "; " : "",
                    recs[i].index, recs[i].got, recs[i].expected, recs[i].tol);
      detail += buf;
    }
    ctx.fail("%s: rank %d: %llu of %zu elements wrong (%llu NaN: poison never overwritten, or a NaN result), first wrong "
             "index %llu; some: %s; %s",
             label.c_str(), lr.rank, res.nbad, count, res.nnan, res.firstBad, detail.c_str(),
             lastErrors(comm).c_str());
  }
  if (in != nullptr && res.nbadInput != 0) {
    ok = false;
    ctx.fail("%s: rank %d: the send buffer changed: %llu of %zu elements differ from the input",
             label.c_str(), lr.rank, res.nbadInput, count);
  }
  return ok;
}

bool checkIdentity(Ctx& ctx, const std::vector<uint64_t>& hashes, const std::string& label) {
  // Each process contributes a row of nranks hashes with its own ranks filled in.
  struct Entry {
    uint64_t hash;
    uint64_t present;
  };
  std::vector<Entry> row(ctx.nranks, Entry{0, 0});
  for (size_t i = 0; i < ctx.local.size(); ++i) row[ctx.local[i].rank] = Entry{hashes[i], 1};
  std::vector<Entry> all(row.size() * ctx.world->size());
  ctx.world->allgather(row.data(), all.data(), row.size() * sizeof(Entry));
  std::vector<uint64_t> byRank(ctx.nranks, 0);
  for (int p = 0; p < ctx.world->size(); ++p) {
    for (int r = 0; r < ctx.nranks; ++r) {
      const Entry& e = all[(size_t)p * ctx.nranks + r];
      if (e.present) byRank[r] = e.hash;
    }
  }
  bool same = std::all_of(byRank.begin(), byRank.end(), [&](uint64_t h) { return h == byRank[0]; });
  if (!same) {
    // Reported once, by the process that drives rank 0; every process returns false.
    bool reporter = false;
    for (const auto& lr : ctx.local) reporter |= lr.rank == 0;
    if (reporter) {
      std::string list;
      char buf[64];
      for (int r = 0; r < ctx.nranks; ++r) {
        std::snprintf(buf, sizeof buf, "%s%d:%016" PRIx64, r ? " " : "", r, byRank[r]);
        list += buf;
      }
      ctx.fail("%s: outputs are not bitwise identical across ranks (hash per rank: %s)",
               label.c_str(), list.c_str());
    }
  }
  return same;
}

std::string describe(const RunSpec& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %s count=%zu%s", dtypeName(s.dt), opName(s.op), s.count,
                s.layout.inplace ? " in-place" : "");
  std::string d = buf;
  if (s.layout.sendOff || s.layout.recvOff) {
    std::snprintf(buf, sizeof buf, " send+%zu recv+%zu elems", s.layout.sendOff,
                  s.layout.inplace ? s.layout.sendOff : s.layout.recvOff);
    d += buf;
  }
  if (s.layout.shared) d += " one-allocation";
  if (s.layout.alloc != Alloc::Malloc) d += std::string(" ") + allocName(s.layout.alloc);
  return d;
}

Run::Run(Ctx& ctx, const RunSpec& s, std::vector<cudaStream_t> streams) : spec(s), ctx_(ctx) {
  const size_t es = dtypeSize(spec.dt);
  const size_t bytes = spec.count * es;
  const Layout& L = spec.layout;
  ranks.resize(ctx.local.size());
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    Rank& R = ranks[i];
    R.stream = streams.empty() ? ctx.local[i].stream : streams[i];
    int dev = ctx.local[i].dev;
    if (L.inplace) {
      R.allocs.push_back(allocDev(ctx, dev, 2 * kGuardBytes + L.sendOff * es + bytes, L.alloc, R.stream));
      R.send = R.recv = R.allocs[0].p + kGuardBytes + L.sendOff * es;
    } else if (L.shared) {
      size_t total = 3 * kGuardBytes + (L.sendOff + L.recvOff) * es + 2 * bytes;
      R.allocs.push_back(allocDev(ctx, dev, total, L.alloc, R.stream));
      char* send = R.allocs[0].p + kGuardBytes + L.sendOff * es;
      R.send = send;
      R.recv = send + bytes + kGuardBytes + L.recvOff * es;
    } else {
      R.allocs.push_back(allocDev(ctx, dev, 2 * kGuardBytes + L.sendOff * es + bytes, L.alloc, R.stream));
      R.allocs.push_back(allocDev(ctx, dev, 2 * kGuardBytes + L.recvOff * es + bytes, L.alloc, R.stream));
      R.send = R.allocs[0].p + kGuardBytes + L.sendOff * es;
      R.recv = R.allocs[1].p + kGuardBytes + L.recvOff * es;
    }
  }
}

Run::~Run() {
  for (size_t i = 0; i < ranks.size(); ++i) {
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    CUDA_OK(ctx_, cudaStreamSynchronize(ranks[i].stream));
    for (DevAlloc& a : ranks[i].allocs) freeDev(ctx_, a);
  }
}

void Run::prepare(uint64_t s) {
  seed = s;
  const size_t bytes = spec.count * dtypeSize(spec.dt);
  for (size_t i = 0; i < ranks.size(); ++i) {
    Rank& R = ranks[i];
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    for (const DevAlloc& a : R.allocs) fillGuard(ctx_, a, R.stream);
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    CUDA_OK(ctx_, launchGenerate(R.send, spec.count, spec.dt, spec.op, ctx_.local[i].rank, seed,
                                 nullptr, R.stream));
    if (!spec.layout.inplace) CUDA_OK(ctx_, cudaMemsetAsync(R.recv, kPoisonByte, bytes, R.stream));
  }
}

bool Run::issue(const std::vector<yaliComm_t>& comms) {
  bool ok = true;
  std::string label = describe(spec);
  watchdogStep("yaliAllReduce %s", label.c_str());
  // Deliberately no cudaSetDevice per comm: a comm carries its device, and one thread may issue on
  // several comms in a loop (the header's single-process usage).
  for (size_t i = 0; i < ranks.size(); ++i) {
    yaliResult_t r = yaliAllReduce(ranks[i].send, ranks[i].recv, spec.count, spec.dt, spec.op,
                                   comms[i], ranks[i].stream);
    ok &= checkIssued(ctx_, r, ctx_.local[i].rank, comms[i], label);
  }
  return ok;
}

bool Run::verify(const std::vector<yaliComm_t>& comms, const std::string& extra) {
  std::string label = extra.empty() ? describe(spec) : extra + ": " + describe(spec);
  const size_t bytes = spec.count * dtypeSize(spec.dt);
  bool ok = true;
  std::vector<uint64_t> hashes(ranks.size(), 0);
  for (size_t i = 0; i < ranks.size(); ++i) {
    Rank& R = ranks[i];
    ok &= checkOutput(ctx_, (int)i, comms[i], R.stream, R.recv, spec.count, spec.dt, spec.op, seed,
                      spec.layout.inplace ? nullptr : R.send, label, &hashes[i]);
    std::vector<std::pair<const void*, size_t>> slices = {{R.send, bytes}, {R.recv, bytes}};
    for (const DevAlloc& a : R.allocs) ok &= checkGuard(ctx_, a, slices, label);
  }
  watchdogStep("%s: comparing output hashes across ranks", label.c_str());
  ok &= checkIdentity(ctx_, hashes, label);
  return ok;
}

bool allreduceAndVerify(Ctx& ctx, const std::vector<yaliComm_t>& comms, const RunSpec& spec,
                        const std::string& label) {
  Run run(ctx, spec);
  run.prepare(ctx.nextSeed());
  bool ok = run.issue(comms);
  ok &= run.verify(comms, label);
  return ok;
}

bool containsWord(const std::string& text, const std::string& name) {
  auto isIdent = [](char c) { return std::isalnum((unsigned char)c) || c == '_'; };
  for (size_t pos = text.find(name); pos != std::string::npos; pos = text.find(name, pos + 1)) {
    size_t end = pos + name.size();
    if ((pos == 0 || !isIdent(text[pos - 1])) && (end == text.size() || !isIdent(text[end]))) {
      return true;
    }
  }
  return false;
}

void syncAll(Ctx& ctx) {
  for (const LocalRank& lr : ctx.local) {
    CUDA_OK(ctx, cudaSetDevice(lr.dev));
    CUDA_OK(ctx, cudaStreamSynchronize(lr.stream));
  }
}

bool expectFailure(Ctx& ctx, const std::string& what, yaliResult_t got, yaliResult_t want,
                   const char* call, const char* arg) {
  std::string msg = yaliGetLastError(nullptr) ? yaliGetLastError(nullptr) : "(null)";
  bool ok = true;
  if (got != want) {
    ctx.fail("%s: returned %d (%s), expected %d (%s); yaliGetLastError(NULL)=\"%s\"", what.c_str(),
             (int)got, yaliGetErrorString(got), (int)want, yaliGetErrorString(want), msg.c_str());
    return false;
  }
  if (msg.find(call) == std::string::npos) {
    ctx.fail("%s: yaliGetLastError(NULL) does not name %s: \"%s\"", what.c_str(), call, msg.c_str());
    ok = false;
  }
  if (arg != nullptr && !containsWord(msg, arg)) {
    ctx.fail("%s: yaliGetLastError(NULL) does not name the argument '%s': \"%s\"", what.c_str(), arg,
             msg.c_str());
    ok = false;
  }
  return ok;
}

bool expectPoisoned(Ctx& ctx, int dev, const void* p, size_t bytes, const std::string& what) {
  std::vector<unsigned char> host(bytes);
  CUDA_OK(ctx, cudaSetDevice(dev));
  CUDA_OK(ctx, cudaDeviceSynchronize());
  CUDA_OK(ctx, cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
  size_t changed = 0, first = 0;
  for (size_t i = 0; i < bytes; ++i) {
    if (host[i] != kPoisonByte && changed++ == 0) first = i;
  }
  if (changed) {
    ctx.fail("%s: the failed call wrote the output: %zu bytes changed, first at byte %zu",
             what.c_str(), changed, first);
  }
  return changed == 0;
}

size_t minFreeMemory(Ctx& ctx) {
  uint64_t mine = UINT64_MAX;
  for (const LocalRank& lr : ctx.local) {
    size_t freeB = 0, total = 0;
    CUDA_OK(ctx, cudaSetDevice(lr.dev));
    CUDA_OK(ctx, cudaMemGetInfo(&freeB, &total));
    mine = std::min<uint64_t>(mine, freeB);
  }
  std::vector<uint64_t> all(ctx.world->size());
  ctx.world->allgather(&mine, all.data(), sizeof mine);
  return (size_t)*std::min_element(all.begin(), all.end());
}

ReplayableGraphs::ReplayableGraphs(Ctx& ctx)
    : seedDev(ctx.local.size(), nullptr),
      ctx_(ctx),
      graphs_(ctx.local.size(), nullptr),
      execs_(ctx.local.size(), nullptr) {
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaMalloc(&seedDev[i], sizeof(uint64_t)));
  }
}

ReplayableGraphs::~ReplayableGraphs() {
  for (size_t i = 0; i < ctx_.local.size(); ++i) {
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    if (execs_[i]) CUDA_OK(ctx_, cudaGraphExecDestroy(execs_[i]));
    if (graphs_[i]) CUDA_OK(ctx_, cudaGraphDestroy(graphs_[i]));
    CUDA_OK(ctx_, cudaFree(seedDev[i]));
  }
}

void ReplayableGraphs::beginCapture() {
  const cudaStreamCaptureMode mode = ctx_.opt.capture == CaptureMode::Relaxed  ? cudaStreamCaptureModeRelaxed
                                     : ctx_.opt.capture == CaptureMode::Global ? cudaStreamCaptureModeGlobal
                                                                               : cudaStreamCaptureModeThreadLocal;
  for (const LocalRank& lr : ctx_.local) {
    CUDA_OK(ctx_, cudaSetDevice(lr.dev));
    CUDA_OK(ctx_, cudaStreamBeginCapture(lr.stream, mode));
  }
}

bool ReplayableGraphs::endCapture(bool issued) {
  bool captured = issued;
  for (size_t i = 0; i < ctx_.local.size(); ++i) {
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    cudaError_t e = cudaStreamEndCapture(ctx_.local[i].stream, &graphs_[i]);
    if (e != cudaSuccess) {
      ctx_.fail("cudaStreamEndCapture (rank %d): %s (capture invalidated by a call inside "
                "yaliAllReduce?)", ctx_.local[i].rank, cudaGetErrorString(e));
      captured = false;
      (void)cudaGetLastError();
    }
  }
  for (size_t i = 0; i < ctx_.local.size() && captured; ++i) {
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    cudaError_t e = cudaGraphInstantiate(&execs_[i], graphs_[i], 0);
    if (e != cudaSuccess) {
      ctx_.fail("cudaGraphInstantiate (rank %d): %s", ctx_.local[i].rank, cudaGetErrorString(e));
      captured = false;
    }
  }
  if (!ctx_.allTrue(captured)) {
    ctx_.fail("graph capture failed on some rank; replays not run");
    return false;
  }
  return true;
}

void ReplayableGraphs::replay(uint64_t seed) {
  for (size_t i = 0; i < ctx_.local.size(); ++i) {
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    CUDA_OK(ctx_, cudaMemcpy(seedDev[i], &seed, sizeof seed, cudaMemcpyHostToDevice));
  }
  for (size_t i = 0; i < ctx_.local.size(); ++i) {
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    CUDA_OK(ctx_, cudaGraphLaunch(execs_[i], ctx_.local[i].stream));
  }
}

// ---- case_helpers.h --------------------------------------------------------------------------------

Bytes sendBytes(uint64_t seed, int rank, size_t bytes) {
  Bytes b(bytes);
  const uint64_t base = combineSeed(seed, (uint64_t)rank + 1);
  for (size_t k = 0; k < bytes; k += 8) {
    uint64_t w = mix64(base + k / 8);
    for (size_t j = 0; j < 8 && k + j < bytes; ++j, w >>= 8) {
      const unsigned char v = (unsigned char)w;
      b[k + j] = v == kPoisonByte ? (unsigned char)0x7E : v;
    }
  }
  return b;
}

std::string commErrors(yaliComm_t comm) {
  std::string s = "yaliGetLastError(NULL)=\"" + str(yaliGetLastError(nullptr)) + "\"";
  if (comm != nullptr) {
    yaliResult_t async = yaliSuccess;
    if (yaliCommGetAsyncError(comm, &async) == yaliSuccess && async != yaliSuccess) {
      s += std::string(" asyncError=") + yaliGetErrorString(async);
    }
    s += " yaliGetLastError(comm)=\"" + str(yaliGetLastError(comm)) + "\"";
  }
  return s;
}

yaliResult_t asyncOf(yaliComm_t comm) {
  yaliResult_t a = yaliInProgress;
  return yaliCommGetAsyncError(comm, &a) == yaliSuccess ? a : yaliInternalError;
}

bool issued(Ctx& ctx, yaliResult_t r, const char* call, int rank, yaliComm_t comm, const std::string& what) {
  if (r == yaliSuccess) return true;
  ctx.fail("%s: rank %d: %s returned %d (%s); %s", what.c_str(), rank, call, (int)r, yaliGetErrorString(r),
           commErrors(comm).c_str());
  return false;
}

bool expectRefused(Ctx& ctx, const std::string& what, yaliResult_t got, const char* call,
                   const std::vector<std::string>& args, yaliComm_t comm) {
  const std::string threadMsg = str(yaliGetLastError(nullptr));
  const std::string commMsg = comm != nullptr ? str(yaliGetLastError(comm)) : "";
  if (got != yaliInvalidArgument) {
    ctx.fail("%s: returned %d (%s), expected yaliInvalidArgument; yaliGetLastError(NULL)=\"%s\"", what.c_str(),
             (int)got, yaliGetErrorString(got), threadMsg.c_str());
    return false;
  }
  bool ok = true;
  auto names = [&](const std::string& msg, const char* whose) {
    if (msg.find(call) == std::string::npos) {
      ctx.fail("%s: %s does not name %s: \"%s\"", what.c_str(), whose, call, msg.c_str());
      ok = false;
    }
    bool named = false;
    std::string list;
    for (const std::string& a : args) {
      named |= containsWord(msg, a);
      list += (list.empty() ? "'" : " or '") + a + "'";
    }
    if (!named) {
      ctx.fail("%s: %s does not name the argument %s: \"%s\"", what.c_str(), whose, list.c_str(), msg.c_str());
      ok = false;
    }
  };
  names(threadMsg, "yaliGetLastError(NULL)");
  if (comm != nullptr) names(commMsg, "yaliGetLastError(comm)");
  return ok;
}

void abortAll(Ctx& ctx, std::vector<yaliComm_t>& comms, const std::string& label) {
  ctx.world->barrier();
  watchdogStep("%s: yaliCommAbort on every comm", label.c_str());
  for (size_t i = 0; i < comms.size(); ++i) {
    const yaliResult_t r = yaliCommAbort(comms[i]);
    if (r != yaliSuccess) {
      ctx.fail("%s: yaliCommAbort (rank %d) returned %d (%s): %s", label.c_str(), ctx.local[i].rank, (int)r,
               yaliGetErrorString(r), str(yaliGetLastError(nullptr)).c_str());
    }
    comms[i] = nullptr;
  }
  syncAll(ctx);
  ctx.world->barrier();
}

FailureTimes waitForFailure(Ctx& ctx, const std::vector<yaliComm_t>& comms, Clock::time_point t0,
                            const std::vector<bool>& watch, const std::vector<bool>& mustTell, double failureMs,
                            double giveUpMs, const std::string& label) {
  const size_t nl = ctx.local.size();
  FailureTimes t{std::vector<double>(nl, -1), std::vector<double>(nl, -1)};
  watchdogStep("%s: waiting for the streams to come back and the comms to report the failure", label.c_str());
  for (;;) {
    bool idle = true, told = true;
    for (size_t i = 0; i < nl; ++i) {
      if (!watch[i]) continue;
      if (t.idleMs[i] < 0) {
        CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
        const cudaError_t e = cudaStreamQuery(ctx.local[i].stream);
        if (e == cudaSuccess) {
          t.idleMs[i] = msSince(t0);
        } else if (e != cudaErrorNotReady) {
          ctx.fatal(
              "%s: rank %d's stream ended with %s: a failed check must end the kernel cleanly (no trap), leaving "
              "the CUDA context usable",
              label.c_str(), ctx.local[i].rank, cudaGetErrorString(e));
        }
      }
      if (t.toldMs[i] < 0 && asyncOf(comms[i]) != yaliSuccess) t.toldMs[i] = msSince(t0);
      idle &= t.idleMs[i] >= 0;
      if (mustTell[i]) told &= t.toldMs[i] >= 0;
    }
    const double ms = msSince(t0);
    if (idle && (told || ms > failureMs)) return t;
    if (ms > giveUpMs) ctx.fatal("%s: a stream is still busy %.0f ms after the calls", label.c_str(), ms);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Region makeRegion(Ctx& ctx, size_t i, size_t bytes, size_t lead, Alloc kind) {
  size_t before = kGuardBytes;
  if (kind == Alloc::CuMemChunks) {
    // Half the region before the first chunk's end (a region of more than two chunks straddles
    // chunk ends wherever it starts).
    const size_t chunk = cuMemChunkBytes(ctx, ctx.local[i].dev), half = roundUp(bytes / 2, 16);
    if (chunk > half + kGuardBytes) before = chunk - half;
  }
  Region r;
  r.alloc = allocDev(ctx, ctx.local[i].dev, before + lead + bytes + kGuardBytes, kind, ctx.local[i].stream);
  r.p = r.alloc.p + before + lead;
  r.bytes = bytes;
  return r;
}

void freeRegion(Ctx& ctx, size_t i, Region& r) {
  if (r.alloc.p == nullptr) return;
  CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
  CUDA_OK(ctx, cudaStreamSynchronize(ctx.local[i].stream));
  freeDev(ctx, r.alloc);
  r.p = nullptr;
}

void armRegion(Ctx& ctx, size_t i, const Region& r, unsigned char fill) {
  fillGuard(ctx, r.alloc, ctx.local[i].stream);
  if (r.bytes) CUDA_OK(ctx, cudaMemsetAsync(r.p, fill, r.bytes, ctx.local[i].stream));
}

void loadRegion(Ctx& ctx, size_t i, const Region& r, const void* data, size_t bytes) {
  // More would land in the guard after the region and be reported as the library's write.
  if (bytes > r.bytes) ctx.fatal("loadRegion: %zu bytes into a region of %zu (a bug in the test)", bytes, r.bytes);
  armRegion(ctx, i, r, kPoisonByte);
  if (bytes) CUDA_OK(ctx, cudaMemcpyAsync(r.p, data, bytes, cudaMemcpyHostToDevice, ctx.local[i].stream));
}

Bytes readRegion(Ctx& ctx, size_t i, const Region& r) {
  CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
  CUDA_OK(ctx, cudaStreamSynchronize(ctx.local[i].stream));
  Bytes b(r.bytes);
  if (r.bytes) CUDA_OK(ctx, cudaMemcpy(b.data(), r.p, r.bytes, cudaMemcpyDeviceToHost));
  return b;
}

bool guardsIntact(Ctx& ctx, const Region& r, const std::string& what) {
  return checkGuard(ctx, r.alloc, {{r.p, r.bytes}}, what);
}

bool sameBytes(Ctx& ctx, int rank, const Bytes& got, const Bytes& want, const std::string& what, yaliComm_t comm) {
  if (got.size() != want.size()) {
    ctx.fail("%s: rank %d: %zu bytes read, %zu expected (a bug in the test)", what.c_str(), rank, got.size(),
             want.size());
    return false;
  }
  size_t bad = 0, first = 0, unwritten = 0, stray = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    if (got[k] == want[k]) continue;
    if (bad++ == 0) first = k;
    if (got[k] == kPoisonByte) ++unwritten;
    else if (want[k] == kPoisonByte) ++stray;
  }
  if (bad == 0) return true;
  ctx.fail(
      "%s: rank %d: %zu of %zu bytes wrong (%zu still the poison where data was due, %zu written "
      "where nothing was due), first at byte %zu: 0x%02x, expected 0x%02x%s%s",
      what.c_str(), rank, bad, want.size(), unwritten, stray, first, got[first], want[first], comm ? "; " : "",
      comm ? commErrors(comm).c_str() : "");
  return false;
}

bool allPoison(Ctx& ctx, size_t i, const Region& r, const std::string& what) {
  return sameBytes(ctx, ctx.local[i].rank, readRegion(ctx, i, r), Bytes(r.bytes, kPoisonByte), what);
}

}  // namespace yt
