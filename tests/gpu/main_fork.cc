// yali-gpu-tests: the GPU suite, launched with fork.
//
//   single: one child process drives all GPUs (yaliCommInitAll; one thread issues on every comm).
//   multi:  one child process per GPU (cudaSetDevice(rank); yaliCommInitRank).
//
// Every case runs in fresh child processes, so a crash, a hang or a leaked comm stays inside its
// case, and settings read at comm init (YALI_TIMEOUT_MS) start clean. The parent never initializes
// CUDA (it forks after calling yaliGetUniqueId, which must not touch CUDA either): it learns the GPU
// count from a probe child, then runs a watchdog over each case's children and kills them past the
// case's deadline. The children share an anonymous MAP_SHARED region, created before fork, for a
// barrier and an allgather (unique ids, output hashes).
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "suite.h"

namespace yt {
namespace {

constexpr int kMaxProcs = 8;
constexpr size_t kSlotBytes = 8192;
constexpr double kParentGraceSeconds = 15;  // after the children's own watchdog deadline
constexpr double kPeerFailGraceSeconds = 20;

// The region shared by one case's processes. Plain words accessed with __atomic builtins (lock-free,
// so they work across processes).
struct Shared {
  int nprocs;
  int abortFlag;              // set by the parent when a child died: peers stop waiting
  unsigned barrierCount;
  unsigned barrierGeneration;
  int havePresetId;
  yaliUniqueId presetId;      // made by the parent before fork
  char slots[kMaxProcs][kSlotBytes];
};

class ForkWorld : public World {
 public:
  ForkWorld(Shared* sh, int rank) : sh_(sh), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return sh_->nprocs; }

  void barrier() override {
    unsigned gen = __atomic_load_n(&sh_->barrierGeneration, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&sh_->barrierCount, 1, __ATOMIC_ACQ_REL) == (unsigned)sh_->nprocs) {
      __atomic_store_n(&sh_->barrierCount, 0, __ATOMIC_RELAXED);
      __atomic_store_n(&sh_->barrierGeneration, gen + 1, __ATOMIC_RELEASE);
      return;
    }
    for (long spins = 0; __atomic_load_n(&sh_->barrierGeneration, __ATOMIC_ACQUIRE) == gen; ++spins) {
      if (__atomic_load_n(&sh_->abortFlag, __ATOMIC_ACQUIRE)) {
        logLine("  [process %d] a peer process failed; leaving", rank_);
        std::fflush(stdout);
        _exit(kExitFail);
      }
      if (spins > 1000) usleep(50);
    }
  }

  void allgather(const void* mine, void* all, size_t bytes) override {
    const char* in = static_cast<const char*>(mine);
    char* out = static_cast<char*>(all);
    size_t off = 0;
    do {  // in slot-sized pieces; a zero-byte allgather is still a synchronization
      size_t n = bytes - off < kSlotBytes ? bytes - off : kSlotBytes;
      std::memcpy(sh_->slots[rank_], in + off, n);
      barrier();
      for (int p = 0; p < sh_->nprocs; ++p) std::memcpy(out + (size_t)p * bytes + off, sh_->slots[p], n);
      barrier();
      off += n;
    } while (off < bytes);
  }

  bool presetUniqueId(int k, yaliUniqueId* id) override {
    if (k != 0 || !sh_->havePresetId) return false;
    *id = sh_->presetId;
    return true;
  }

 private:
  Shared* sh_;
  int rank_;
};

// ---- GPU probe (in a child, so that the parent never initializes CUDA) ---------------------------

struct ProbeResult {
  int count = 0;
  char error[160] = "";
  char name[256] = "";
  size_t totalMem = 0;
};

ProbeResult probeGpus() {
  ProbeResult res;
  int fds[2];
  if (pipe(fds) != 0) {
    std::snprintf(res.error, sizeof res.error, "pipe failed");
    return res;
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ProbeResult r;
    cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.count = 0;
      std::snprintf(r.error, sizeof r.error, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    } else if (r.count == 0) {
      std::snprintf(r.error, sizeof r.error, "cudaGetDeviceCount returned 0");
    } else {
      cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        std::snprintf(r.name, sizeof r.name, "%s", prop.name);
        r.totalMem = prop.totalGlobalMem;
      }
    }
    ssize_t w = write(fds[1], &r, sizeof r);
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    std::snprintf(res.error, sizeof res.error, "fork failed");
    return res;
  }
  struct pollfd pfd = {fds[0], POLLIN, 0};
  if (poll(&pfd, 1, 120000) > 0 && read(fds[0], &res, sizeof res) == (ssize_t)sizeof res) {
    // got it
  } else {
    res = ProbeResult();
    std::snprintf(res.error, sizeof res.error, "the probe process gave no answer in 120 s");
    kill(pid, SIGKILL);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return res;
}

// ---- One case in child processes, with the parent's watchdog -------------------------------------

// Single mode: this process drives every rank (a forked child, or the test process itself with
// --in-process).
int runSingleHere(World* world, const CaseDef& c, int nranks, int visible, const Options& opt) {
  std::vector<int> ranks, devs;
  for (int r = 0; r < nranks; ++r) {
    ranks.push_back(r);
    devs.push_back(deviceOfRank(opt, r, nranks, visible));
  }
  return runCaseHere(world, Mode::Single, nranks, opt, c, ranks, devs);
}

enum class Verdict { Pass, Fail, Skip };

Verdict runForked(const CaseDef& c, Mode mode, int nranks, int visible, const Options& opt,
                  double* seconds) {
  auto t0 = std::chrono::steady_clock::now();
  const int nprocs = mode == Mode::Single ? 1 : nranks;
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    logLine("  [%s %s] FAIL: mmap of the shared region failed", c.name, modeName(mode));
    return Verdict::Fail;
  }
  Shared* sh = static_cast<Shared*>(mem);
  std::memset(sh, 0, sizeof *sh);
  sh->nprocs = nprocs;
  if (mode == Mode::Multi) {
    // The first comm's id comes from the parent, which never touches CUDA (the library promises that
    // yaliGetUniqueId does not either); later ids are made by process 0 and shared.
    yaliResult_t r = yaliGetUniqueId(&sh->presetId);
    if (r != yaliSuccess) {
      logLine("  [%s %s] FAIL: yaliGetUniqueId in the parent returned %d: %s", c.name,
              modeName(mode), (int)r, yaliGetLastError(nullptr));
      munmap(mem, sizeof(Shared));
      return Verdict::Fail;
    }
    sh->havePresetId = 1;
  }

  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(nprocs, -1);
  for (int p = 0; p < nprocs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      ForkWorld world(sh, p);
      int code;
      if (mode == Mode::Single) {
        code = runSingleHere(&world, c, nranks, visible, opt);
      } else {
        const int dev = deviceOfRank(opt, p, nranks, visible);
        cudaError_t e = cudaSetDevice(dev);
        if (e != cudaSuccess) {
          logLine("  [%s %s rank %d] FAIL: cudaSetDevice(%d): %s", c.name, modeName(mode), p, dev,
                  cudaGetErrorString(e));
          _exit(kExitFail);
        }
        code = runCaseHere(&world, mode, nranks, opt, c, {p}, {dev});
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    if (pid < 0) {
      logLine("  [%s %s] FAIL: fork failed", c.name, modeName(mode));
      __atomic_store_n(&sh->abortFlag, 1, __ATOMIC_RELEASE);
      for (pid_t q : pids) {
        if (q > 0) kill(q, SIGKILL);
      }
      for (pid_t q : pids) {
        if (q > 0) waitpid(q, nullptr, 0);
      }
      munmap(mem, sizeof(Shared));
      return Verdict::Fail;
    }
    pids[p] = pid;
  }

  // Watchdog: the children's own watchdog fires at the case deadline and names the stuck step; this
  // one is the backstop for a child that cannot even do that.
  const double deadline = c.deadlineSeconds * opt.deadlineScale + kParentGraceSeconds;
  std::vector<int> status(nprocs, 0);
  std::vector<bool> done(nprocs, false);
  int remaining = nprocs;
  bool timedOut = false;
  double firstFailureAt = -1;
  while (remaining > 0) {
    double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int p = 0; p < nprocs; ++p) {
      if (done[p]) continue;
      int st = 0;
      pid_t w = waitpid(pids[p], &st, WNOHANG);
      if (w == pids[p]) {
        done[p] = true;
        status[p] = st;
        --remaining;
        bool clean = WIFEXITED(st) && (WEXITSTATUS(st) == kExitPass || WEXITSTATUS(st) == kExitSkip);
        if (!clean && firstFailureAt < 0) {
          firstFailureAt = now;
          __atomic_store_n(&sh->abortFlag, 1, __ATOMIC_RELEASE);
        }
      }
    }
    if (remaining == 0) break;
    bool peerGraceOver = firstFailureAt >= 0 && now - firstFailureAt > kPeerFailGraceSeconds;
    if (now > deadline || peerGraceOver) {
      if (now > deadline) timedOut = true;
      for (int p = 0; p < nprocs; ++p) {
        if (!done[p]) {
          logLine("  [%s %s process %d] killed by the parent after %.0f s%s", c.name, modeName(mode),
                  p, now,
                  peerGraceOver ? " (a peer process had failed)" : " (deadline)");
          kill(pids[p], SIGKILL);
        }
      }
      for (int p = 0; p < nprocs; ++p) {
        if (!done[p]) {
          waitpid(pids[p], &status[p], 0);
          done[p] = true;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  munmap(mem, sizeof(Shared));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  int pass = 0, skip = 0;
  bool fail = timedOut;
  for (int p = 0; p < nprocs; ++p) {
    int st = status[p];
    if (WIFEXITED(st) && WEXITSTATUS(st) == kExitPass) {
      ++pass;
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == kExitSkip) {
      ++skip;
    } else {
      fail = true;
      if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL) {
        logLine("  [%s %s process %d] died from signal %d (%s)", c.name, modeName(mode), p,
                WTERMSIG(st), strsignal(WTERMSIG(st)));
      } else if (WIFEXITED(st) && WEXITSTATUS(st) != kExitFail) {
        logLine("  [%s %s process %d] exited with code %d", c.name, modeName(mode), p,
                WEXITSTATUS(st));
      }
    }
  }
  if (fail) return Verdict::Fail;
  if (skip == nprocs) return Verdict::Skip;
  if (pass == nprocs) return Verdict::Pass;
  logLine("  [%s %s] FAIL: processes disagree on skipping the case", c.name, modeName(mode));
  return Verdict::Fail;
}

// --in-process: the case's single-mode run here, with a one-process world.
Verdict runInProcess(const CaseDef& c, int nranks, int visible, const Options& opt, double* seconds) {
  auto t0 = std::chrono::steady_clock::now();
  static Shared sh;  // the world's barrier and slots; one process, so they never wait
  std::memset(&sh, 0, sizeof sh);
  sh.nprocs = 1;
  ForkWorld world(&sh, 0);
  int code = runSingleHere(&world, c, nranks, visible, opt);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return code == kExitPass ? Verdict::Pass : code == kExitSkip ? Verdict::Skip : Verdict::Fail;
}

}  // namespace
}  // namespace yt

int main(int argc, char** argv) {
  using namespace yt;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Options opt;
  if (!parseOptions(argc, argv, /*mpi=*/false, &opt)) return 2;
  if (opt.inProcess && !opt.single) {
    std::fprintf(stderr, "--in-process runs single mode only; --mode multi asks for processes\n");
    return 2;
  }
  if (opt.list) {
    for (const CaseDef& c : allCases()) std::printf("%-16s %s\n", c.name, c.what);
    return 0;
  }

  ProbeResult probe = probeGpus();
  if (probe.count <= 0) {
    std::printf("SKIP: no CUDA GPU visible (%s)\n", probe.error[0] ? probe.error : "no devices");
    return kExitSkip;
  }
  int n = opt.ranks > 0 ? opt.ranks : (probe.count < 8 ? probe.count : 8);
  if (n > probe.count && !opt.shareGpus) {
    std::printf("SKIP: --ranks %d needs %d GPUs, %d visible (--share-gpus runs them anyway)\n", n, n,
                probe.count);
    return kExitSkip;
  }
  if (n < 2) {
    std::printf("SKIP: needs at least 2 GPUs, %d visible (or --share-gpus --ranks N)\n", probe.count);
    return kExitSkip;
  }
  std::printf("yali-gpu-tests: %d ranks on %d visible GPUs (%s, %zu GiB)%s, modes:%s%s, seed 0x%llx%s\n",
              n, probe.count, probe.name, probe.totalMem >> 30,
              n > probe.count ? ", shared (--share-gpus)" : "", opt.single ? " single" : "",
              opt.multi && !opt.inProcess ? " multi" : "", (unsigned long long)opt.seed,
              opt.inProcess ? ", in this process" : opt.quick ? ", quick" : "");
  if (n > probe.count) {
    // ctest passes --share-gpus to every GPU test, so that a machine with fewer GPUs than ranks
    // still checks the algorithms; this line says what such a run does not check.
    std::printf("NOTE: %d GPU(s) for %d ranks: ranks share GPUs (correctness only; timings mean "
                "nothing)\n", probe.count, n);
  }

  int passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> failures;
  std::vector<Mode> modes;
  if (opt.single) modes.push_back(Mode::Single);
  if (opt.multi && !opt.inProcess) modes.push_back(Mode::Multi);
  for (Mode mode : modes) {
    for (const CaseDef& c : allCases()) {
      if (!caseSelected(c, opt)) continue;
      double secs = 0;
      Verdict v = opt.inProcess ? runInProcess(c, n, probe.count, opt, &secs)
                                : runForked(c, mode, n, probe.count, opt, &secs);
      const char* tag = v == Verdict::Pass ? "PASS" : v == Verdict::Skip ? "SKIP" : "FAIL";
      std::printf("%s  %-16s %-6s %d ranks  %6.1f s\n", tag, c.name, modeName(mode), n, secs);
      if (v == Verdict::Pass) ++passed;
      else if (v == Verdict::Skip) ++skipped;
      else {
        ++failed;
        failures.push_back(std::string(c.name) + " (" + modeName(mode) + ")");
      }
    }
  }
  if (!failures.empty()) {
    std::printf("failed:");
    for (const std::string& f : failures) std::printf(" %s", f.c_str());
    std::printf("\n");
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (failed > 0) return 1;
  if (passed == 0 && skipped > 0) return kExitSkip;
  return 0;
}
