// yali-hw: what the hardware of this machine can do, measured without YALI or NCCL.
//
// It reports, for the visible GPUs:
//   - topology: each GPU's name, PCI bus id, active NVLinks and per-link rate (NVML, loaded with
//     dlopen so the binary builds and runs where NVML is absent; then it says so and goes on);
//   - P2P support per ordered pair: cudaDeviceCanAccessPeer, performance rank, native atomics;
//   - copy-engine P2P bandwidth (cudaMemcpyPeerAsync), one way and both ways at once;
//   - SM-driven P2P bandwidth with 16-byte loads and stores: "write" (the source GPU's kernel
//     stores into the peer), "read" (the destination GPU's kernel loads from the peer), and both
//     ways at once (each GPU writes into the other);
//   - local device-to-device copy bandwidth, counting bytes read plus bytes written.
// Output: a text table on stdout, and with --json FILE the "yali-hw/1" JSON that yali.report reads
// as its speed-of-light reference.
//
// Every figure is the median over --reps timed repetitions (after one warm-up), timed with CUDA
// events on the GPU. One-way figures are bytes / time; "both ways" figures are the total of both
// directions. GB/s means 1e9 bytes per second, as in nccl-tests.
//
// Bounded in time: the whole run stops measuring new pairs once --max-seconds have passed (the
// rest are reported as null). It never creates multicast objects.

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

// ---- Error checking ---------------------------------------------------------------------------

#define YALI_HW_CHECK(call)                                                                     \
  do {                                                                                          \
    cudaError_t err_ = (call);                                                                  \
    if (err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "yali-hw: %s failed at %s:%d: %s (%s)\n", #call, __FILE__, __LINE__, \
                   cudaGetErrorString(err_), cudaGetErrorName(err_));                           \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

// ---- NVML, declared here and loaded at run time -------------------------------------------------
// Only what yali-hw uses, with the layouts and numbers of nvml.h (NVML API 12).

typedef int nvmlReturn_t;  // NVML_SUCCESS == 0
typedef struct nvmlDevice_st* nvmlDevice_t;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kNvmlMaxLinks = 18;               // NVML_NVLINK_MAX_LINKS
constexpr unsigned kFieldNvlinkSpeedCommon = 90;     // NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
constexpr unsigned kFieldNvlinkLinkCount = 91;       // NVML_FI_DEV_NVLINK_LINK_COUNT
constexpr unsigned kFieldNvlinkGetSpeed = 164;       // NVML_FI_DEV_NVLINK_GET_SPEED (scopeId=link)
constexpr int kNvmlValueTypeUnsignedInt = 1;         // NVML_VALUE_TYPE_UNSIGNED_INT
constexpr int kNvmlValueTypeUnsignedLong = 2;        // NVML_VALUE_TYPE_UNSIGNED_LONG
constexpr int kNvmlValueTypeUnsignedLongLong = 3;    // NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
constexpr int kNvmlDeviceTypeGpu = 0;                // NVML_NVLINK_DEVICE_TYPE_GPU
constexpr int kNvmlDeviceTypeSwitch = 2;             // NVML_NVLINK_DEVICE_TYPE_SWITCH

typedef union {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
  unsigned short usVal;
} NvmlValue;

typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;  // the link, for per-link fields
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  NvmlValue value;
} NvmlFieldValue;

typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} NvmlPciInfo;  // nvmlPciInfo_t as filled by the *_v2 functions

struct Nvml {
  void* lib = nullptr;
  std::string error;  // why NVML is unusable; empty when it loaded and initialized
  nvmlReturn_t (*init)(void) = nullptr;
  nvmlReturn_t (*shutdown)(void) = nullptr;
  const char* (*errorString)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*handleByPciBusId)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*nvLinkState)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*nvLinkVersion)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
  nvmlReturn_t (*nvLinkRemotePci)(nvmlDevice_t, unsigned, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*nvLinkRemoteType)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*fieldValues)(nvmlDevice_t, int, NvmlFieldValue*) = nullptr;

  bool ok() const { return error.empty(); }
  std::string why(nvmlReturn_t r) const {
    return errorString ? errorString(r) : ("NVML error " + std::to_string(r));
  }

  void load() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      error = std::string("dlopen(libnvidia-ml.so.1) failed: ") + (e ? e : "unknown");
      return;
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    init = reinterpret_cast<decltype(init)>(sym("nvmlInit_v2"));
    shutdown = reinterpret_cast<decltype(shutdown)>(sym("nvmlShutdown"));
    errorString = reinterpret_cast<decltype(errorString)>(sym("nvmlErrorString"));
    handleByPciBusId =
        reinterpret_cast<decltype(handleByPciBusId)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    nvLinkState = reinterpret_cast<decltype(nvLinkState)>(sym("nvmlDeviceGetNvLinkState"));
    nvLinkVersion = reinterpret_cast<decltype(nvLinkVersion)>(sym("nvmlDeviceGetNvLinkVersion"));
    nvLinkRemotePci =
        reinterpret_cast<decltype(nvLinkRemotePci)>(sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    nvLinkRemoteType = reinterpret_cast<decltype(nvLinkRemoteType)>(
        sym("nvmlDeviceGetNvLinkRemoteDeviceType"));
    fieldValues = reinterpret_cast<decltype(fieldValues)>(sym("nvmlDeviceGetFieldValues"));
    if (!init || !shutdown || !handleByPciBusId || !nvLinkState || !fieldValues) {
      error = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, "
              "nvmlDeviceGetNvLinkState or nvmlDeviceGetFieldValues";
      return;
    }
    nvmlReturn_t r = init();
    if (r != kNvmlSuccess) error = "nvmlInit_v2 failed: " + why(r);
  }

  ~Nvml() {
    if (lib && ok()) shutdown();
    if (lib) dlclose(lib);
  }
};

// ---- Options ------------------------------------------------------------------------------------

struct Options {
  size_t bytes = size_t(1) << 30;  // per transfer
  int reps = 5;
  double maxSeconds = 300.0;
  int ctasPerSm = 4;  // SM copy kernel: blocks per SM ...
  int threads = 512;  // ... of this many threads
  std::vector<int> blocks;  // --blocks: SM figures between GPUs 0 and 1 at these block counts
  std::string jsonPath;
};

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v <= 0) {
    std::fprintf(stderr, "yali-hw: bad size '%s'\n", s);
    std::exit(2);
  }
  switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    case '\0': break;
    default:
      std::fprintf(stderr, "yali-hw: bad size suffix in '%s' (use K, M or G)\n", s);
      std::exit(2);
  }
  return static_cast<size_t>(v);
}

void usage() {
  std::printf(
      "usage: yali-hw [--bytes N[K|M|G]] [--reps N] [--max-seconds S] [--ctas-per-sm N]\n"
      "               [--threads N] [--blocks N,N,...] [--json FILE]\n"
      "  --bytes        bytes per transfer (default 1G = 1 GiB)\n"
      "  --reps         timed repetitions per figure, median reported (default 5)\n"
      "  --max-seconds  stop measuring new pairs after this long (default 300)\n"
      "  --ctas-per-sm  SM copy kernel blocks per SM (default 4)\n"
      "  --threads      SM copy kernel threads per block (default 512)\n"
      "  --blocks LIST  also measure SM copies and stores between GPUs 0 and 1 with exactly\n"
      "                 these block counts (e.g. 8,16,32,64): what a kernel limited to that\n"
      "                 many blocks can move over NVLink\n"
      "  --json FILE    also write the results as JSON (schema yali-hw/1)\n"
      "GPUs: every visible GPU (set CUDA_VISIBLE_DEVICES to choose).\n");
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "yali-hw: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--bytes") o.bytes = parseSize(next());
    else if (a == "--reps") o.reps = std::atoi(next());
    else if (a == "--max-seconds") o.maxSeconds = std::atof(next());
    else if (a == "--ctas-per-sm") o.ctasPerSm = std::atoi(next());
    else if (a == "--threads") o.threads = std::atoi(next());
    else if (a == "--json") o.jsonPath = next();
    else if (a == "--blocks") {
      for (const char* p = next(); *p;) {
        char* end = nullptr;
        const long b = std::strtol(p, &end, 10);
        if (end == p || b < 1 || b > 65535 || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "yali-hw: --blocks wants a comma-separated list of counts 1..65535\n");
          std::exit(2);
        }
        o.blocks.push_back(static_cast<int>(b));
        p = *end == ',' ? end + 1 : end;
      }
    }
    else if (a == "-h" || a == "--help") { usage(); std::exit(0); }
    else {
      std::fprintf(stderr, "yali-hw: unknown argument '%s'\n", a.c_str());
      usage();
      std::exit(2);
    }
  }
  o.bytes &= ~size_t(15);  // the SM kernel moves 16-byte vectors
  if (o.bytes == 0 || o.reps < 1 || o.ctasPerSm < 1 || o.threads < 32 || o.threads > 1024) {
    std::fprintf(stderr, "yali-hw: --bytes must be >= 16, --reps >= 1, --ctas-per-sm >= 1, "
                         "32 <= --threads <= 1024\n");
    std::exit(2);
  }
  return o;
}

// ---- The SM copy kernel -------------------------------------------------------------------------

// Copies n 16-byte vectors. Each thread keeps kUnroll loads in flight before storing them, so
// that a remote read's latency is hidden by the others in flight. Grid-stride, any n.
constexpr int kUnroll = 4;

__global__ void copyKernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// Stores n 16-byte vectors of a constant: the write half of copyKernel without its loads, so the
// --blocks table can tell a block's store rate over NVLink from its load latency.
__global__ void storeKernel(int4* __restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const int4 v = make_int4(static_cast<int>(threadIdx.x), 1, 2, 3);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = v;
}

// ---- Per-GPU state ------------------------------------------------------------------------------

struct Gpu {
  int index = 0;
  std::string name;
  std::string pciBusId;
  int sms = 0;
  void* src = nullptr;  // bytes, the data sent
  void* dst = nullptr;  // bytes, where data is received
  cudaStream_t stream = nullptr;
  // NVML view
  bool nvmlOk = false;
  std::string nvmlError;
  int nvlinksActive = 0;
  double linkGbs = 0.0;  // per link and direction (the common rate of the active links)
};

struct Link {
  int gpu;
  unsigned link;
  bool active;
  double speedGbs;  // < 0 when unknown
  int version;      // < 0 when unknown
  std::string remotePci;
  std::string remoteType;  // "gpu", "nvswitch", "other", ""
  int remoteGpu;           // index among the visible GPUs, or -1
};

// SM figures between GPUs 0 and 1 with a fixed number of blocks (--blocks), GB/s; < 0: not measured.
struct BlockRow {
  int blocks;
  double copyWrite = -1, storeWrite = -1;  // one way, 0 -> 1: copyKernel / storeKernel
  double copyBidir = -1, storeBidir = -1;  // both ways at once, total of both directions
};

struct Pair {
  int src, dst;
  bool p2p = false;
  int perfRank = -1;
  int atomics = -1;
  double ceOneway = -1, ceBidir = -1, smWrite = -1, smRead = -1, smBidir = -1;  // < 0: not measured
  std::string note;
};

// "0000:19:00.0" and "00000000:19:00.0" name the same device: compare parsed numbers.
std::string normalizePci(const std::string& s) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(s.c_str(), "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return buf;
  }
  std::string r = s;
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// One part of a measured operation: work enqueued on one GPU's stream.
struct Job {
  Gpu* gpu;
  std::function<void()> enqueue;
};

// Runs the jobs concurrently (each on its GPU's stream, all released by one event on the first
// job's stream, the first stream joined on the others' completion) and returns the median time in
// seconds over `reps` repetitions after one warm-up.
double timeJobs(std::vector<Job>& jobs, int reps) {
  Gpu* lead = jobs[0].gpu;
  std::vector<cudaEvent_t> done(jobs.size(), nullptr);
  cudaEvent_t start, stop;
  YALI_HW_CHECK(cudaSetDevice(lead->index));
  YALI_HW_CHECK(cudaEventCreate(&start));
  YALI_HW_CHECK(cudaEventCreate(&stop));
  for (size_t k = 1; k < jobs.size(); ++k) {
    YALI_HW_CHECK(cudaSetDevice(jobs[k].gpu->index));
    YALI_HW_CHECK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
  }
  std::vector<double> times;
  for (int rep = -1; rep < reps; ++rep) {
    YALI_HW_CHECK(cudaSetDevice(lead->index));
    YALI_HW_CHECK(cudaEventRecord(start, lead->stream));
    for (size_t k = 1; k < jobs.size(); ++k)
      YALI_HW_CHECK(cudaStreamWaitEvent(jobs[k].gpu->stream, start, 0));
    for (auto& j : jobs) {
      YALI_HW_CHECK(cudaSetDevice(j.gpu->index));
      j.enqueue();
      YALI_HW_CHECK(cudaGetLastError());
    }
    for (size_t k = 1; k < jobs.size(); ++k) {
      YALI_HW_CHECK(cudaSetDevice(jobs[k].gpu->index));
      YALI_HW_CHECK(cudaEventRecord(done[k], jobs[k].gpu->stream));
      YALI_HW_CHECK(cudaStreamWaitEvent(lead->stream, done[k], 0));
    }
    YALI_HW_CHECK(cudaSetDevice(lead->index));
    YALI_HW_CHECK(cudaEventRecord(stop, lead->stream));
    YALI_HW_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    YALI_HW_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep >= 0) times.push_back(ms * 1e-3);
  }
  for (size_t k = 1; k < jobs.size(); ++k) {
    YALI_HW_CHECK(cudaSetDevice(jobs[k].gpu->index));
    YALI_HW_CHECK(cudaEventDestroy(done[k]));
  }
  YALI_HW_CHECK(cudaSetDevice(lead->index));
  YALI_HW_CHECK(cudaEventDestroy(start));
  YALI_HW_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

// GB/s for `bytes` moved in `seconds`.
double gbs(double bytes, double seconds) { return bytes / seconds / 1e9; }

// ---- Output helpers -----------------------------------------------------------------------------

std::string fmtGbs(double v) {
  if (v < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string jsonNum(double v) {
  if (v < 0) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

std::string jsonStr(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { r += '\\'; r += c; }
    else if (static_cast<unsigned char>(c) < 0x20) r += ' ';
    else r += c;
  }
  return r + "\"";
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parseArgs(argc, argv);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&]() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  int ngpus = 0;
  cudaError_t cerr = cudaGetDeviceCount(&ngpus);
  if (cerr != cudaSuccess || ngpus == 0) {
    std::fprintf(stderr, "yali-hw: no usable GPU (cudaGetDeviceCount: %s)\n",
                 cerr != cudaSuccess ? cudaGetErrorString(cerr) : "0 devices");
    return 1;
  }

  // ---- Topology ----
  std::vector<Gpu> gpus(ngpus);
  for (int i = 0; i < ngpus; ++i) {
    Gpu& g = gpus[i];
    g.index = i;
    cudaDeviceProp prop;
    YALI_HW_CHECK(cudaGetDeviceProperties(&prop, i));
    g.name = prop.name;
    g.sms = prop.multiProcessorCount;
    char bus[64] = {0};
    YALI_HW_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, i));
    g.pciBusId = normalizePci(bus);
  }

  Nvml nvml;
  nvml.load();
  std::vector<Link> links;
  for (Gpu& g : gpus) {
    if (!nvml.ok()) {
      g.nvmlError = nvml.error;
      continue;
    }
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t r = nvml.handleByPciBusId(g.pciBusId.c_str(), &dev);
    if (r != kNvmlSuccess) {
      g.nvmlError = "nvmlDeviceGetHandleByPciBusId_v2(" + g.pciBusId + "): " + nvml.why(r);
      continue;
    }
    g.nvmlOk = true;
    // The common rate of the active links, then each link's own (newer drivers answer the per-link
    // field; older ones only the common one).
    NvmlFieldValue common[2];
    std::memset(common, 0, sizeof common);
    common[0].fieldId = kFieldNvlinkSpeedCommon;
    common[1].fieldId = kFieldNvlinkLinkCount;
    double commonGbs = -1;
    if (nvml.fieldValues(dev, 2, common) == kNvmlSuccess && common[0].nvmlReturn == kNvmlSuccess &&
        common[0].valueType == kNvmlValueTypeUnsignedInt && common[0].value.uiVal > 0)
      commonGbs = common[0].value.uiVal / 1000.0;  // MB/s -> GB/s
    for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
      int active = 0;
      if (nvml.nvLinkState(dev, l, &active) != kNvmlSuccess) continue;  // no such link
      Link lk{g.index, l, active == 1, -1.0, -1, "", "", -1};
      NvmlFieldValue fv;
      std::memset(&fv, 0, sizeof fv);
      fv.fieldId = kFieldNvlinkGetSpeed;
      fv.scopeId = l;
      if (nvml.fieldValues(dev, 1, &fv) == kNvmlSuccess && fv.nvmlReturn == kNvmlSuccess) {
        double mbps = fv.valueType == kNvmlValueTypeUnsignedInt        ? fv.value.uiVal
                      : fv.valueType == kNvmlValueTypeUnsignedLong     ? double(fv.value.ulVal)
                      : fv.valueType == kNvmlValueTypeUnsignedLongLong ? double(fv.value.ullVal)
                                                                       : 0.0;
        if (mbps > 0) lk.speedGbs = mbps / 1000.0;
      }
      if (lk.speedGbs < 0 && lk.active) lk.speedGbs = commonGbs;
      unsigned ver = 0;
      if (nvml.nvLinkVersion && nvml.nvLinkVersion(dev, l, &ver) == kNvmlSuccess)
        lk.version = static_cast<int>(ver);
      NvmlPciInfo pci;
      std::memset(&pci, 0, sizeof pci);
      if (lk.active && nvml.nvLinkRemotePci && nvml.nvLinkRemotePci(dev, l, &pci) == kNvmlSuccess) {
        lk.remotePci = normalizePci(pci.busId);
        for (const Gpu& o : gpus)
          if (o.pciBusId == lk.remotePci) lk.remoteGpu = o.index;
      }
      int type = -1;
      if (lk.active && nvml.nvLinkRemoteType &&
          nvml.nvLinkRemoteType(dev, l, &type) == kNvmlSuccess)
        lk.remoteType = type == kNvmlDeviceTypeGpu      ? "gpu"
                        : type == kNvmlDeviceTypeSwitch ? "nvswitch"
                                                        : "other";
      if (lk.active) {
        ++g.nvlinksActive;
        if (lk.speedGbs > 0) g.linkGbs = std::max(g.linkGbs, lk.speedGbs);
      }
      links.push_back(lk);
    }
    if (g.linkGbs <= 0 && commonGbs > 0) g.linkGbs = commonGbs;
  }

  // ---- Buffers, streams, peer access ----
  for (Gpu& g : gpus) {
    YALI_HW_CHECK(cudaSetDevice(g.index));
    YALI_HW_CHECK(cudaMalloc(&g.src, opt.bytes));
    YALI_HW_CHECK(cudaMalloc(&g.dst, opt.bytes));
    YALI_HW_CHECK(cudaMemset(g.src, 0x5a, opt.bytes));
    YALI_HW_CHECK(cudaMemset(g.dst, 0, opt.bytes));
    YALI_HW_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  }
  std::vector<Pair> pairs;
  for (int i = 0; i < ngpus; ++i)
    for (int j = 0; j < ngpus; ++j) {
      if (i == j) continue;
      Pair p;
      p.src = i;
      p.dst = j;
      int can = 0;
      YALI_HW_CHECK(cudaDeviceCanAccessPeer(&can, i, j));
      p.p2p = can != 0;
      YALI_HW_CHECK(cudaDeviceGetP2PAttribute(&p.perfRank, cudaDevP2PAttrPerformanceRank, i, j));
      YALI_HW_CHECK(
          cudaDeviceGetP2PAttribute(&p.atomics, cudaDevP2PAttrNativeAtomicSupported, i, j));
      if (p.p2p) {
        YALI_HW_CHECK(cudaSetDevice(i));
        cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();  // clear it
        else YALI_HW_CHECK(e);
      }
      pairs.push_back(p);
    }
  auto findPair = [&](int s, int d) -> Pair& {
    for (Pair& p : pairs)
      if (p.src == s && p.dst == d) return p;
    std::fprintf(stderr, "yali-hw: internal error: no pair %d->%d\n", s, d);
    std::exit(1);
  };

  const size_t nvec = opt.bytes / 16;
  auto copyOn = [&](Gpu* runner, const void* from, void* to, int ctas) {
    copyKernel<<<ctas, opt.threads, 0, runner->stream>>>(static_cast<const int4*>(from),
                                                          static_cast<int4*>(to), nvec);
  };
  auto copyLaunch = [&](Gpu* runner, const void* from, void* to) {
    copyOn(runner, from, to, runner->sms * opt.ctasPerSm);
  };
  const double B = static_cast<double>(opt.bytes);

  // ---- Local device-to-device copies ----
  std::vector<double> localD2d(ngpus, -1);
  for (Gpu& g : gpus) {
    std::vector<Job> jobs{{&g, [&] {
                             YALI_HW_CHECK(cudaMemcpyAsync(g.dst, g.src, opt.bytes,
                                                           cudaMemcpyDeviceToDevice, g.stream));
                           }}};
    localD2d[g.index] = gbs(2 * B, timeJobs(jobs, opt.reps));  // read + write
  }

  // ---- Pairs ----
  bool stoppedEarly = false;
  for (Pair& p : pairs) {
    if (elapsed() > opt.maxSeconds) {
      p.note = "skipped: --max-seconds reached";
      stoppedEarly = true;
      continue;
    }
    Gpu* s = &gpus[p.src];
    Gpu* d = &gpus[p.dst];
    {  // copy engine, one way: the source GPU's stream pushes
      std::vector<Job> jobs{{s, [&] {
                               YALI_HW_CHECK(cudaMemcpyPeerAsync(d->dst, d->index, s->src,
                                                                 s->index, opt.bytes, s->stream));
                             }}};
      p.ceOneway = gbs(B, timeJobs(jobs, opt.reps));
    }
    // Both-ways figures are symmetric: measure each unordered pair once, copy to its mirror.
    Pair& mirror = findPair(p.dst, p.src);
    if (p.src < p.dst) {
      std::vector<Job> jobs{{s, [&] {
                               YALI_HW_CHECK(cudaMemcpyPeerAsync(d->dst, d->index, s->src,
                                                                 s->index, opt.bytes, s->stream));
                             }},
                            {d, [&] {
                               YALI_HW_CHECK(cudaMemcpyPeerAsync(s->dst, s->index, d->src,
                                                                 d->index, opt.bytes, d->stream));
                             }}};
      p.ceBidir = mirror.ceBidir = gbs(2 * B, timeJobs(jobs, opt.reps));
    }
    // SM figures need the kernel's GPU to map the other's memory: write needs src -> dst access,
    // read needs dst -> src access (the mirror pair), both ways needs both.
    if (!p.p2p || !mirror.p2p) p.note = "no peer access: some SM figures not measured";
    if (p.p2p) {  // SM write: the source GPU's kernel stores into the peer's memory
      std::vector<Job> jobs{{s, [&] { copyLaunch(s, s->src, d->dst); }}};
      p.smWrite = gbs(B, timeJobs(jobs, opt.reps));
    }
    if (mirror.p2p) {  // SM read: the destination GPU's kernel loads from the peer's memory
      std::vector<Job> jobs{{d, [&] { copyLaunch(d, s->src, d->dst); }}};
      p.smRead = gbs(B, timeJobs(jobs, opt.reps));
    }
    if (p.p2p && mirror.p2p && p.src < p.dst) {  // SM both ways: each GPU writes into the other
      std::vector<Job> jobs{{s, [&] { copyLaunch(s, s->src, d->dst); }},
                            {d, [&] { copyLaunch(d, d->src, s->dst); }}};
      p.smBidir = mirror.smBidir = gbs(2 * B, timeJobs(jobs, opt.reps));
    }
  }

  // ---- SM figures by block count (GPUs 0 and 1) ----
  std::vector<BlockRow> blockRows;
  if (!opt.blocks.empty()) {
    if (ngpus < 2 || !findPair(0, 1).p2p || !findPair(1, 0).p2p) {
      std::printf("yali-hw: --blocks needs GPUs 0 and 1 with peer access both ways; skipped\n");
    } else {
      Gpu* a = &gpus[0];
      Gpu* b = &gpus[1];
      auto storeOn = [&](Gpu* g, void* to, int ctas) {
        storeKernel<<<ctas, opt.threads, 0, g->stream>>>(static_cast<int4*>(to), nvec);
      };
      for (int ctas : opt.blocks) {
        BlockRow row;
        row.blocks = ctas;
        std::vector<Job> cw{{a, [&] { copyOn(a, a->src, b->dst, ctas); }}};
        row.copyWrite = gbs(B, timeJobs(cw, opt.reps));
        std::vector<Job> sw{{a, [&] { storeOn(a, b->dst, ctas); }}};
        row.storeWrite = gbs(B, timeJobs(sw, opt.reps));
        std::vector<Job> cb{{a, [&] { copyOn(a, a->src, b->dst, ctas); }},
                            {b, [&] { copyOn(b, b->src, a->dst, ctas); }}};
        row.copyBidir = gbs(2 * B, timeJobs(cb, opt.reps));
        std::vector<Job> sb{{a, [&] { storeOn(a, b->dst, ctas); }},
                            {b, [&] { storeOn(b, a->dst, ctas); }}};
        row.storeBidir = gbs(2 * B, timeJobs(sb, opt.reps));
        blockRows.push_back(row);
      }
    }
  }

  // ---- Summary ----
  std::vector<double> bestOneway;
  for (const Pair& p : pairs) {
    double b = std::max({p.ceOneway, p.smWrite, p.smRead});
    if (b > 0) bestOneway.push_back(b);
  }
  double owMin = bestOneway.empty() ? -1 : *std::min_element(bestOneway.begin(), bestOneway.end());
  double owMax = bestOneway.empty() ? -1 : *std::max_element(bestOneway.begin(), bestOneway.end());
  double owMed = median(bestOneway);
  std::vector<double> bidirPerDir;
  for (const Pair& p : pairs) {
    double b = std::max(p.ceBidir, p.smBidir);
    if (b > 0) bidirPerDir.push_back(b / 2);
  }
  double bidirHalfMed = median(bidirPerDir);
  // NVLink rate per GPU and direction: active links x per-link rate; the smallest over the GPUs.
  double linkRate = -1;
  int linkCount = -1;
  double perLink = -1;
  for (const Gpu& g : gpus) {
    if (!g.nvmlOk || g.nvlinksActive == 0 || g.linkGbs <= 0) continue;
    double r = g.nvlinksActive * g.linkGbs;
    if (linkRate < 0 || r < linkRate) {
      linkRate = r;
      linkCount = g.nvlinksActive;
      perLink = g.linkGbs;
    }
  }

  // ---- Text ----
  std::printf("yali-hw: %d GPU(s), %zu bytes per transfer, median of %d reps (GB/s = 1e9 B/s)\n\n",
              ngpus, opt.bytes, opt.reps);
  std::printf("%-4s %-24s %-14s %8s %14s %16s\n", "GPU", "name", "pci", "NVLinks",
              "GB/s per link", "GB/s per dir");
  for (const Gpu& g : gpus) {
    if (g.nvmlOk)
      std::printf("%-4d %-24s %-14s %8d %14s %16s\n", g.index, g.name.c_str(), g.pciBusId.c_str(),
                  g.nvlinksActive, fmtGbs(g.linkGbs > 0 ? g.linkGbs : -1).c_str(),
                  fmtGbs(g.linkGbs > 0 ? g.nvlinksActive * g.linkGbs : -1).c_str());
    else
      std::printf("%-4d %-24s %-14s   NVML unavailable: %s\n", g.index, g.name.c_str(),
                  g.pciBusId.c_str(), g.nvmlError.c_str());
  }
  std::printf("\nPairs: one-way = src -> dst; both = total of both directions at once.\n");
  std::printf("%-4s %-4s %-4s %-5s %-8s %9s %9s %9s %9s %9s\n", "src", "dst", "p2p", "rank",
              "atomics", "CE 1way", "CE both", "SM write", "SM read", "SM both");
  for (const Pair& p : pairs) {
    std::printf("%-4d %-4d %-4s %-5d %-8s %9s %9s %9s %9s %9s %s\n", p.src, p.dst,
                p.p2p ? "yes" : "no", p.perfRank, p.atomics > 0 ? "yes" : "no",
                fmtGbs(p.ceOneway).c_str(), fmtGbs(p.ceBidir).c_str(), fmtGbs(p.smWrite).c_str(),
                fmtGbs(p.smRead).c_str(), fmtGbs(p.smBidir).c_str(), p.note.c_str());
  }
  if (!blockRows.empty()) {
    std::printf("\nSM kernels between GPUs 0 and 1 by block count (%d threads; copy = local load then "
                "remote store, store = remote stores only; both = total of both directions):\n",
                opt.threads);
    std::printf("%8s %12s %12s %12s %12s\n", "blocks", "copy 1way", "store 1way", "copy both",
                "store both");
    for (const BlockRow& r : blockRows)
      std::printf("%8d %12s %12s %12s %12s\n", r.blocks, fmtGbs(r.copyWrite).c_str(),
                  fmtGbs(r.storeWrite).c_str(), fmtGbs(r.copyBidir).c_str(),
                  fmtGbs(r.storeBidir).c_str());
  }
  std::printf("\nLocal device-to-device copy (cudaMemcpyAsync; bytes read + bytes written):\n");
  for (int i = 0; i < ngpus; ++i)
    std::printf("  GPU %d: %s GB/s\n", i, fmtGbs(localD2d[i]).c_str());
  std::printf("\nSummary:\n");
  std::printf("  P2P one-way, best of CE / SM write / SM read per pair: min %s, median %s, "
              "max %s GB/s\n",
              fmtGbs(owMin).c_str(), fmtGbs(owMed).c_str(), fmtGbs(owMax).c_str());
  std::printf("  P2P both ways, per direction (median): %s GB/s\n", fmtGbs(bidirHalfMed).c_str());
  if (linkRate > 0)
    std::printf("  NVLink link rate: %d links x %.2f GB/s = %.1f GB/s per GPU and direction\n",
                linkCount, perLink, linkRate);
  else
    std::printf("  NVLink link rate: unknown (%s)\n",
                nvml.ok() ? "no active NVLink reported" : nvml.error.c_str());
  if (stoppedEarly) std::printf("  Stopped early: --max-seconds %.0f reached.\n", opt.maxSeconds);
  std::printf("  Took %.1f s.\n", elapsed());

  // ---- JSON ----
  if (!opt.jsonPath.empty()) {
    FILE* f = std::fopen(opt.jsonPath.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "yali-hw: cannot write %s: %s\n", opt.jsonPath.c_str(),
                   std::strerror(errno));
      return 1;
    }
    int rtv = 0, drv = 0;
    YALI_HW_CHECK(cudaRuntimeGetVersion(&rtv));
    YALI_HW_CHECK(cudaDriverGetVersion(&drv));
    std::fprintf(f, "{\n  \"schema\": \"yali-hw/1\",\n");
    std::fprintf(f, "  \"bytes\": %zu, \"reps\": %d, \"statistic\": \"median\",\n", opt.bytes,
                 opt.reps);
    std::fprintf(f, "  \"cuda_runtime\": %d, \"cuda_driver\": %d,\n", rtv, drv);
    std::fprintf(f, "  \"nvml\": {\"ok\": %s, \"error\": %s},\n", nvml.ok() ? "true" : "false",
                 jsonStr(nvml.error).c_str());
    std::fprintf(f, "  \"gpus\": [\n");
    for (int i = 0; i < ngpus; ++i) {
      const Gpu& g = gpus[i];
      std::fprintf(f,
                   "    {\"index\": %d, \"name\": %s, \"pci_bus_id\": %s, \"sms\": %d, "
                   "\"nvlinks\": %s, \"nvlink_gbs_per_link\": %s, \"nvml_error\": %s}%s\n",
                   g.index, jsonStr(g.name).c_str(), jsonStr(g.pciBusId).c_str(), g.sms,
                   g.nvmlOk ? std::to_string(g.nvlinksActive).c_str() : "null",
                   jsonNum(g.nvmlOk && g.linkGbs > 0 ? g.linkGbs : -1).c_str(),
                   g.nvmlOk ? "null" : jsonStr(g.nvmlError).c_str(), i + 1 < ngpus ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"links\": [\n");
    for (size_t k = 0; k < links.size(); ++k) {
      const Link& l = links[k];
      std::fprintf(f,
                   "    {\"gpu\": %d, \"link\": %u, \"active\": %s, \"speed_gbs\": %s, "
                   "\"version\": %s, \"remote_pci\": %s, \"remote_type\": %s, "
                   "\"remote_gpu\": %s}%s\n",
                   l.gpu, l.link, l.active ? "true" : "false", jsonNum(l.speedGbs).c_str(),
                   l.version >= 0 ? std::to_string(l.version).c_str() : "null",
                   l.remotePci.empty() ? "null" : jsonStr(l.remotePci).c_str(),
                   l.remoteType.empty() ? "null" : jsonStr(l.remoteType).c_str(),
                   l.remoteGpu >= 0 ? std::to_string(l.remoteGpu).c_str() : "null",
                   k + 1 < links.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"pairs\": [\n");
    for (size_t k = 0; k < pairs.size(); ++k) {
      const Pair& p = pairs[k];
      std::fprintf(f,
                   "    {\"src\": %d, \"dst\": %d, \"p2p\": %s, \"perf_rank\": %d, "
                   "\"native_atomics\": %s, \"ce_oneway_gbs\": %s, \"ce_bidir_gbs\": %s, "
                   "\"sm_write_gbs\": %s, \"sm_read_gbs\": %s, \"sm_bidir_gbs\": %s, "
                   "\"note\": %s}%s\n",
                   p.src, p.dst, p.p2p ? "true" : "false", p.perfRank,
                   p.atomics > 0 ? "true" : "false", jsonNum(p.ceOneway).c_str(),
                   jsonNum(p.ceBidir).c_str(), jsonNum(p.smWrite).c_str(),
                   jsonNum(p.smRead).c_str(), jsonNum(p.smBidir).c_str(),
                   p.note.empty() ? "null" : jsonStr(p.note).c_str(),
                   k + 1 < pairs.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"local_d2d_gbs\": [");
    for (int i = 0; i < ngpus; ++i)
      std::fprintf(f, "%s%s", jsonNum(localD2d[i]).c_str(), i + 1 < ngpus ? ", " : "");
    std::fprintf(f, "],\n  \"local_d2d_counts\": \"bytes read + bytes written\",\n");
    std::fprintf(f, "  \"block_sweep\": {\"gpus\": [0, 1], \"threads\": %d, \"rows\": [", opt.threads);
    for (size_t k = 0; k < blockRows.size(); ++k) {
      const BlockRow& r = blockRows[k];
      std::fprintf(f,
                   "%s\n    {\"blocks\": %d, \"copy_oneway_gbs\": %s, \"store_oneway_gbs\": %s, "
                   "\"copy_bidir_gbs\": %s, \"store_bidir_gbs\": %s}",
                   k ? "," : "", r.blocks, jsonNum(r.copyWrite).c_str(), jsonNum(r.storeWrite).c_str(),
                   jsonNum(r.copyBidir).c_str(), jsonNum(r.storeBidir).c_str());
    }
    std::fprintf(f, "%s]},\n", blockRows.empty() ? "" : "\n  ");
    std::fprintf(f,
                 "  \"summary\": {\"p2p_oneway_gbs\": %s, \"p2p_oneway_min_gbs\": %s, "
                 "\"p2p_oneway_max_gbs\": %s, \"p2p_oneway_basis\": "
                 "\"median over pairs of max(ce_oneway, sm_write, sm_read)\", "
                 "\"p2p_bidir_per_direction_gbs\": %s, \"nvlink_links\": %s, "
                 "\"nvlink_gbs_per_link\": %s, \"nvlink_link_rate_gbs\": %s, "
                 "\"stopped_early\": %s, \"seconds\": %.1f}\n}\n",
                 jsonNum(owMed).c_str(), jsonNum(owMin).c_str(), jsonNum(owMax).c_str(),
                 jsonNum(bidirHalfMed).c_str(),
                 linkCount > 0 ? std::to_string(linkCount).c_str() : "null",
                 jsonNum(perLink).c_str(), jsonNum(linkRate).c_str(),
                 stoppedEarly ? "true" : "false", elapsed());
    if (std::fclose(f) != 0) {
      std::fprintf(stderr, "yali-hw: writing %s failed\n", opt.jsonPath.c_str());
      return 1;
    }
  }

  for (Gpu& g : gpus) {
    YALI_HW_CHECK(cudaSetDevice(g.index));
    YALI_HW_CHECK(cudaStreamDestroy(g.stream));
    YALI_HW_CHECK(cudaFree(g.src));
    YALI_HW_CHECK(cudaFree(g.dst));
  }
  return 0;
}
