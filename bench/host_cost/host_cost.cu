// yali-host-cost: what one eager collective call costs the calling thread, beside what CUDA's own
// pieces of it cost on this machine.
//
// An eager call of a few KB is bound by the host: the thread that issues it pays for the checks,
// the stream and device queries and the kernel launch, while the kernel itself takes 2-3 us. In
// yali-perf that shows only as a time per call that moves by a microsecond or more from run to run
// (PERF.md, Session 31: one process per GPU, the same binary 3.5 to 5.9 us at 4 KB). This tool
// separates the two: it times, from one thread driving two GPUs,
//   - CUDA's pieces alone (cudaGetDevice, cudaSetDevice to the current device,
//     cuPointerGetAttributes of seven attributes as the buffer check asks them, the capture
//     queries, cudaEventRecord) and an empty kernel launched as YALI launches its kernels
//     (cudaLaunchKernelEx with programmatic stream serialization), with a parameter of 8 and of
//     768 bytes (DeviceArgs is about 700);
//   - yaliAllReduce of --count bf16 elements, out of place, one call per GPU, grouped
//     (yaliGroupStart/End around the pair) and not, host issue only: --batch calls per GPU are
//     issued, timed, then the streams are synchronized outside the timing, so that the launch
//     queue never fills and the figure is the thread's own time, not the GPUs';
//   - yaliAllReduce with count 0 (handle, lock and argument checks, then return).
// The launch's own cost varies by about a microsecond from process to process on the same
// machine, so a comparison of two builds reads each process's call time against its own empty
// launch (the "beyond the launch" column), and runs the builds in turn several times.
//
//   yali-host-cost [--rounds R] [--batch B] [--count N]
#include <cuda.h>
#include <cuda_runtime.h>
#include <yali/yali.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

template <int N>
struct Blob {
  char bytes[N];
};
template <int N>
__global__ void blobKernel(Blob<N>) {}

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename F>
double perCallUs(int calls, F&& body) {
  const double t0 = nowUs();
  for (int i = 0; i < calls; ++i) body();
  return (nowUs() - t0) / calls;
}

// An empty kernel of an N-byte parameter, launched as YALI launches (registry.cc: launchAlgorithm),
// `batch` launches at a time, the stream drained between batches outside the timing.
template <int N>
double launchUs(cudaStream_t s, int batch) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(32);
  config.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  Blob<N> blob = {};
  const int batches = 10000 / batch;
  double total = 0;
  for (int b = 0; b < batches; ++b) {
    const double t0 = nowUs();
    for (int i = 0; i < batch; ++i) cudaLaunchKernelEx(&config, blobKernel<N>, blob);
    total += nowUs() - t0;
    cudaStreamSynchronize(s);
  }
  return total / (batches * batch);
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "yali-host-cost: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, batch = 10;
  size_t count = 2048;  // 4 KB of bf16
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--rounds") && more) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch") && more) batch = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--count") && more) count = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: yali-host-cost [--rounds R] [--batch B (1..1000)] [--count N (bf16 elements)]\n");
      return 2;
    }
  }
  if (rounds < 1 || batch < 1 || batch > 1000) {
    std::fprintf(stderr, "yali-host-cost: --rounds must be >= 1 and --batch 1..1000\n");
    return 2;
  }
  int ngpus = 0;
  if (!check(cudaGetDeviceCount(&ngpus), "cudaGetDeviceCount")) return 1;
  if (ngpus < 2) {
    std::fprintf(stderr, "yali-host-cost: needs 2 GPUs (one thread drives both), found %d\n", ngpus);
    return 1;
  }
  const size_t bytes = count * 2;
  void* probe = nullptr;
  cudaStream_t s0 = nullptr;
  if (!check(cudaSetDevice(0), "cudaSetDevice") || !check(cudaMalloc(&probe, bytes > 0 ? bytes : 2), "cudaMalloc") ||
      !check(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), "cudaStreamCreate"))
    return 1;

  std::printf("# CUDA's pieces, device 0, us per call\n");
  int device = 0;
  std::printf("%-52s %8.3f\n", "cudaGetDevice", perCallUs(200000, [&] { cudaGetDevice(&device); }));
  std::printf("%-52s %8.3f\n", "cudaSetDevice (the current device)", perCallUs(200000, [&] { cudaSetDevice(0); }));
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,   CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  unsigned memoryType = 0;
  int managed = 0, ordinal = 0, legacyIpc = 0;
  unsigned long long bufferId = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  void* values[] = {&memoryType, &managed, &ordinal, &bufferId, &start, &size, &legacyIpc};
  std::printf("%-52s %8.3f\n", "cuPointerGetAttributes (7 attributes)", perCallUs(200000, [&] {
                cuPointerGetAttributes(7, attrs, values, reinterpret_cast<CUdeviceptr>(probe));
              }));
  cudaStreamCaptureStatus status;
  unsigned long long captureId = 0;
  cudaGraph_t graph = nullptr;
  std::printf("%-52s %8.3f\n", "cudaStreamGetCaptureInfo",
              perCallUs(200000, [&] { cudaStreamGetCaptureInfo(s0, &status, &captureId, &graph); }));
  std::printf("%-52s %8.3f\n", "cudaStreamIsCapturing", perCallUs(200000, [&] { cudaStreamIsCapturing(s0, &status); }));
  cudaEvent_t event = nullptr;
  cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  std::printf("%-52s %8.3f\n", "cudaEventRecord", perCallUs(10000, [&] { cudaEventRecord(event, s0); }));
  cudaStreamSynchronize(s0);
  cudaEventDestroy(event);
  double launch = 0;
  for (int r = 0; r < 2; ++r) {
    launch = launchUs<8>(s0, batch);
    std::printf("%-52s %8.3f\n", "empty kernel, 8-byte parameter, PDL launch", launch);
    std::printf("%-52s %8.3f\n", "empty kernel, 768-byte parameter, PDL launch", launchUs<768>(s0, batch));
  }

  const int devs[2] = {0, 1};
  yaliComm_t comms[2] = {nullptr, nullptr};
  if (yaliCommInitAll(comms, 2, devs) != yaliSuccess) {
    std::fprintf(stderr, "yali-host-cost: yaliCommInitAll: %s\n", yaliGetLastError(nullptr));
    return 1;
  }
  void* send[2] = {};
  void* recv[2] = {};
  cudaStream_t streams[2] = {};
  for (int g = 0; g < 2; ++g) {
    if (!check(cudaSetDevice(g), "cudaSetDevice") || !check(cudaMalloc(&send[g], bytes + 2), "cudaMalloc") ||
        !check(cudaMalloc(&recv[g], bytes + 2), "cudaMalloc") || !check(cudaMemset(send[g], 0, bytes + 2), "cudaMemset") ||
        !check(cudaStreamCreateWithFlags(&streams[g], cudaStreamNonBlocking), "cudaStreamCreate"))
      return 1;
  }
  int failures = 0;
  auto call = [&](int g) {
    failures += yaliAllReduce(send[g], recv[g], count, yaliBfloat16, yaliSum, comms[g], streams[g]) != yaliSuccess;
  };
  auto drain = [&] {
    for (int g = 0; g < 2; ++g) {
      cudaSetDevice(g);
      cudaStreamSynchronize(streams[g]);
    }
  };
  for (int w = 0; w < 200; ++w) {
    yaliGroupStart();
    call(0);
    call(1);
    yaliGroupEnd();
  }
  drain();
  std::printf("# yaliAllReduce, %zu bf16 elements, one thread driving 2 GPUs, %d calls per GPU per batch, host "
              "issue per call (us)\n",
              count, batch);
  std::printf("%-8s %-10s %10s %18s\n", "round", "form", "per call", "beyond the launch");
  const int batches = 10000 / batch;
  for (int r = 0; r < rounds; ++r) {
    for (int grouped = 1; grouped >= 0; --grouped) {
      double total = 0;
      for (int b = 0; b < batches; ++b) {
        const double t0 = nowUs();
        for (int i = 0; i < batch; ++i) {
          if (grouped) yaliGroupStart();
          call(0);
          call(1);
          if (grouped) failures += yaliGroupEnd() != yaliSuccess;
        }
        total += nowUs() - t0;
        drain();
      }
      const double perCall = total / (2.0 * batches * batch);
      std::printf("%-8d %-10s %10.3f %18.3f\n", r, grouped ? "grouped" : "ungrouped", perCall, perCall - launch);
    }
  }
  std::printf("%-52s %8.3f\n", "yaliAllReduce, count 0 (handle, lock, checks)", perCallUs(100000, [&] {
                failures += yaliAllReduce(send[0], recv[0], 0, yaliBfloat16, yaliSum, comms[0], streams[0]) != yaliSuccess;
              }));
  for (int g = 0; g < 2; ++g) yaliCommDestroy(comms[g]);
  if (failures > 0) std::printf("# %d calls failed\n", failures);
  return failures > 0 ? 1 : 0;
}
