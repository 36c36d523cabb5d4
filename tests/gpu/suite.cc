// Ctx, options, watchdog and logging of the GPU suite (see suite.h).
#include "suite.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace yt {

void (*gFatalHook)(int code) = nullptr;

// ---- Logging ------------------------------------------------------------------------------------

namespace {

std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  char small[512];
  int n = std::vsnprintf(small, sizeof small, fmt, ap);
  std::string s;
  if (n < 0) {
    s = fmt;
  } else if ((size_t)n < sizeof small) {
    s.assign(small, (size_t)n);
  } else {
    s.resize((size_t)n + 1);
    std::vsnprintf(&s[0], s.size(), fmt, ap2);
    s.resize((size_t)n);
  }
  va_end(ap2);
  return s;
}

void writeAll(const std::string& s) {
  std::fflush(stdout);
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t w = ::write(1, p, left);
    if (w <= 0) break;
    p += w;
    left -= (size_t)w;
  }
}

[[noreturn]] void endProcess(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (gFatalHook != nullptr) gFatalHook(code);
  _exit(code);
}

}  // namespace

void logLine(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  writeAll(s + "\n");
}

const char* modeName(Mode m) {
  switch (m) {
    case Mode::Single: return "single";
    case Mode::Multi: return "multi";
    case Mode::Mpi: return "mpi";
  }
  return "?";
}

// ---- Watchdog -----------------------------------------------------------------------------------

namespace {

struct Watchdog {
  std::mutex m;
  bool armed = false;
  std::chrono::steady_clock::time_point deadline;
  double seconds = 0;
  std::string caseName, step;
  Mode mode = Mode::Single;
  int nranks = 0;
  bool started = false;
};

Watchdog& watchdog() {
  static Watchdog* w = new Watchdog();  // never destroyed: the thread outlives main's statics
  return *w;
}

void watchdogLoop() {
  Watchdog& w = watchdog();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> lock(w.m);
    if (!w.armed || std::chrono::steady_clock::now() < w.deadline) continue;
    char head[256];
    std::snprintf(head, sizeof head, "WATCHDOG: case %s (%s, %d ranks, pid %d) still running after "
                  "%.0f s; stuck at: ",
                  w.caseName.c_str(), modeName(w.mode), w.nranks, (int)getpid(), w.seconds);
    writeAll(std::string(head) + w.step + "\n");
    endProcess(kExitFail);
  }
}

}  // namespace

void watchdogArm(const char* caseName, Mode mode, int nranks, double seconds) {
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> lock(w.m);
  w.caseName = caseName;
  w.mode = mode;
  w.nranks = nranks;
  w.seconds = seconds;
  w.step = "(start)";
  w.deadline = std::chrono::steady_clock::now() +
               std::chrono::milliseconds((long long)(seconds * 1000.0));
  w.armed = true;
  if (!w.started) {
    w.started = true;
    std::thread(watchdogLoop).detach();
  }
}

void watchdogDisarm() {
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> lock(w.m);
  w.armed = false;
}

void watchdogStep(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> lock(w.m);
  w.step = std::move(s);
}

// ---- Options ------------------------------------------------------------------------------------

namespace {

void usage(const char* prog, bool mpi) {
  std::printf(
      "usage: %s [options]\n"
      "  --ranks N            ranks (2..8); default: all visible GPUs (at most 8)%s\n"
      "%s"
      "  --filter SUBSTRING   run only the cases whose name contains SUBSTRING\n"
      "  --quick              fewer sizes and repetitions\n"
      "  --seed N             base seed (default 0x5EED0001); every case derives its own\n"
      "  --deadline-scale F   multiply every case's deadline by F (default 1)\n"
      "  --capture MODE       stream capture mode for the graph case: threadlocal (default),\n"
      "                       relaxed, global\n"
      "  --share-gpus         where GPUs are fewer than ranks, rank r runs on GPU r %% visible\n"
      "                       (YALI_ALLOW_SHARED_GPU=1; correctness only, no NVLink) and a NOTE\n"
      "                       line says so; with enough GPUs it changes nothing (ctest passes it)\n"
      "  --in-process         single mode in this process (no fork), for compute-sanitizer\n"
      "                       and cuda-gdb; a fatal failure ends the run\n"
      "  --list               list the cases and exit\n"
      "Exit codes: 0 all passed, 1 a case failed, 77 skipped (no GPU, or fewer GPUs than ranks\n"
      "without --share-gpus).\n",
      prog, mpi ? " (must equal the MPI world size)" : "",
      mpi ? "" : "  --mode single|multi|both   launch modes (default both)\n");
}

}  // namespace

bool parseOptions(int argc, char** argv, bool mpi, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", name);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage(argv[0], mpi);
      std::exit(0);
    } else if (a == "--ranks") {
      const char* v = value("--ranks");
      if (!v) return false;
      opt->ranks = std::atoi(v);
      if (opt->ranks < 2 || opt->ranks > 8) {
        std::fprintf(stderr, "--ranks must be 2..8, got %s\n", v);
        return false;
      }
    } else if (a == "--mode" && !mpi) {
      const char* v = value("--mode");
      if (!v) return false;
      std::string m = v;
      if (m == "single") {
        opt->single = true;
        opt->multi = false;
      } else if (m == "multi") {
        opt->single = false;
        opt->multi = true;
      } else if (m == "both") {
        opt->single = opt->multi = true;
      } else {
        std::fprintf(stderr, "--mode must be single, multi or both, got %s\n", v);
        return false;
      }
    } else if (a == "--filter") {
      const char* v = value("--filter");
      if (!v) return false;
      opt->filter = v;
    } else if (a == "--quick") {
      opt->quick = true;
    } else if (a == "--seed") {
      const char* v = value("--seed");
      if (!v) return false;
      opt->seed = std::strtoull(v, nullptr, 0);
    } else if (a == "--deadline-scale") {
      const char* v = value("--deadline-scale");
      if (!v) return false;
      opt->deadlineScale = std::atof(v);
      if (!(opt->deadlineScale > 0)) {
        std::fprintf(stderr, "--deadline-scale must be positive\n");
        return false;
      }
    } else if (a == "--capture") {
      const char* v = value("--capture");
      if (!v) return false;
      std::string m = v;
      if (m == "relaxed") opt->capture = CaptureMode::Relaxed;
      else if (m == "threadlocal") opt->capture = CaptureMode::ThreadLocal;
      else if (m == "global") opt->capture = CaptureMode::Global;
      else {
        std::fprintf(stderr, "--capture must be relaxed, threadlocal or global, got %s\n", v);
        return false;
      }
    } else if (a == "--in-process" && !mpi) {
      opt->inProcess = true;
    } else if (a == "--share-gpus") {
      opt->shareGpus = true;
    } else if (a == "--list") {
      opt->list = true;
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      usage(argv[0], mpi);
      return false;
    }
  }
  return true;
}

int deviceOfRank(const Options& opt, int rank, int nranks, int visible) {
  if (opt.shareGpus && nranks > visible) setenv("YALI_ALLOW_SHARED_GPU", "1", 1);
  return rank % visible;
}

bool caseSelected(const CaseDef& c, const Options& opt) {
  return opt.filter.empty() || std::strstr(c.name, opt.filter.c_str()) != nullptr;
}

// ---- Ctx ----------------------------------------------------------------------------------------

Ctx::Ctx(World* w, Mode m, int n, const Options& o, const CaseDef& c,
         const std::vector<int>& localRanks, const std::vector<int>& localDevs)
    : world(w), mode(m), nranks(n), opt(o), def(c) {
  for (size_t i = 0; i < localRanks.size(); ++i) {
    LocalRank lr;
    lr.rank = localRanks[i];
    lr.dev = localDevs[i];
    CUDA_OK(*this, cudaSetDevice(lr.dev));
    CUDA_OK(*this, cudaStreamCreateWithFlags(&lr.stream, cudaStreamNonBlocking));
    void* p = nullptr;
    CUDA_OK(*this, cudaMalloc(&p, sizeof(VerifyResult)));
    lr.scratch = static_cast<VerifyResult*>(p);
    local.push_back(lr);
  }
  // Each case's seeds differ from every other case's (the name is hashed in).
  uint64_t h = opt.seed;
  for (const char* p = c.name; *p; ++p) h = mix64(h ^ (uint64_t)(unsigned char)*p);
  seedCounter_ = h;
}

Ctx::~Ctx() {
  for (LocalRank& lr : local) {
    cudaSetDevice(lr.dev);
    cudaStreamSynchronize(lr.stream);
    cudaStreamDestroy(lr.stream);
    cudaFree(lr.scratch);
  }
}

namespace {
std::string prefix(const Ctx& ctx) {
  char buf[160];
  if (ctx.local.size() == 1) {
    std::snprintf(buf, sizeof buf, "  [%s %s rank %d/%d]", ctx.def.name, modeName(ctx.mode),
                  ctx.local[0].rank, ctx.nranks);
  } else {
    std::snprintf(buf, sizeof buf, "  [%s %s %d ranks]", ctx.def.name, modeName(ctx.mode),
                  ctx.nranks);
  }
  return buf;
}
}  // namespace

void Ctx::fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  ++failures_;
  writeAll(prefix(*this) + " FAIL: " + s + "\n");
}

void Ctx::note(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  writeAll(prefix(*this) + " " + s + "\n");
}

void Ctx::fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  writeAll(prefix(*this) + " FAIL (fatal, leaving): " + s + "\n");
  endProcess(kExitFail);
}

void Ctx::cuda(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) fatal("%s (line %d) failed: %s", what, line, cudaGetErrorString(e));
}

bool Ctx::allTrue(bool ok) {
  std::vector<unsigned char> all(world->size());
  unsigned char mine = ok ? 1 : 0;
  world->allgather(&mine, all.data(), 1);
  for (unsigned char v : all) ok &= v != 0;
  return ok;
}

bool Ctx::requireAll(bool ok, const char* why) {
  bool all = allTrue(ok);
  if (!all && !skipped_) {
    skipped_ = true;
    skipReason_ = ok ? std::string("another rank: ") + why : why;
  }
  return all;
}

uint64_t Ctx::nextSeed() {
  seedCounter_ = mix64(seedCounter_ + 0x9E3779B97F4A7C15ull);
  return seedCounter_;
}

yaliUniqueId Ctx::sharedUniqueId() {
  yaliUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (world->presetUniqueId(idCounter_++, &id)) return id;
  if (world->rank() == 0) {
    yaliResult_t r = yaliGetUniqueId(&id);
    if (r != yaliSuccess) {
      fatal("yaliGetUniqueId returned %d (%s): %s", (int)r, yaliGetErrorString(r),
            yaliGetLastError(nullptr));
    }
  }
  std::vector<yaliUniqueId> all(world->size());
  world->allgather(&id, all.data(), sizeof id);
  return all[0];
}

std::vector<yaliComm_t> Ctx::createComms(const char* label, const int* devlist) {
  std::vector<yaliComm_t> comms(local.size(), nullptr);
  watchdogStep("creating communicators (%s)", label);
  if (mode == Mode::Single) {
    std::vector<int> devs;
    for (const LocalRank& lr : local) devs.push_back(lr.dev);
    yaliResult_t r = yaliCommInitAll(comms.data(), (int)local.size(), devlist ? devlist : devs.data());
    if (r != yaliSuccess) {
      fatal("%s: yaliCommInitAll(%d devices) returned %d (%s): %s", label, (int)local.size(), (int)r,
            yaliGetErrorString(r), yaliGetLastError(nullptr));
    }
  } else {
    yaliUniqueId id = sharedUniqueId();
    CUDA_OK(*this, cudaSetDevice(local[0].dev));
    yaliResult_t r = yaliCommInitRank(&comms[0], nranks, id, local[0].rank);
    if (r != yaliSuccess) {
      fatal("%s: yaliCommInitRank(nranks=%d, rank=%d) returned %d (%s): %s", label, nranks,
            local[0].rank, (int)r, yaliGetErrorString(r), yaliGetLastError(nullptr));
    }
  }
  for (size_t i = 0; i < comms.size(); ++i) {
    if (comms[i] == nullptr) fatal("%s: init returned success but comm %zu is NULL", label, i);
  }
  return comms;
}

void Ctx::destroyComms(std::vector<yaliComm_t>& comms, const char* label) {
  watchdogStep("destroying communicators (%s)", label);
  for (size_t i = 0; i < comms.size(); ++i) {
    if (comms[i] == nullptr) continue;
    yaliResult_t r = yaliCommDestroy(comms[i]);
    if (r != yaliSuccess) {
      fail("%s: yaliCommDestroy (rank %d) returned %d (%s): %s", label, local[i].rank, (int)r,
           yaliGetErrorString(r), yaliGetLastError(nullptr));
    }
    comms[i] = nullptr;
  }
}

int Ctx::exitCode() const {
  if (failures_ > 0) return kExitFail;
  if (skipped_) return kExitSkip;
  return kExitPass;
}

int runCaseHere(World* world, Mode mode, int nranks, const Options& opt, const CaseDef& c,
                const std::vector<int>& localRanks, const std::vector<int>& localDevs) {
  watchdogArm(c.name, mode, nranks, c.deadlineSeconds * opt.deadlineScale);
  int code;
  {
    Ctx ctx(world, mode, nranks, opt, c, localRanks, localDevs);
    c.fn(ctx);
    watchdogStep("end of case (freeing streams)");
    code = ctx.exitCode();
    if (code == kExitSkip && world->rank() == 0) ctx.note("skipped: %s", ctx.skipReason().c_str());
  }
  watchdogDisarm();
  return code;
}

}  // namespace yt
