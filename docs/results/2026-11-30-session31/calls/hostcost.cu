// Host cost per call: CUDA API pieces, and yaliAllReduce eager 4 KB from one thread driving 2 GPUs.
#include <yali/yali.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
__global__ void emptyKernel(int) {}
template <int N> struct Blob { char b[N]; };
template <int N> __global__ void blobKernel(Blob<N>) {}
template <int N> void timeBlob(cudaStream_t s) {
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = 1; cfg.blockDim = 32; cfg.stream = s; cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1; cfg.attrs = at; cfg.numAttrs = 1;
  Blob<N> blob = {}; double tot = 0;
  for (int b = 0; b < 1000; ++b) { auto t0 = std::chrono::steady_clock::now(); for (int i = 0; i < 10; ++i) cudaLaunchKernelEx(&cfg, blobKernel<N>, blob);
    tot += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(); cudaStreamSynchronize(s); }
  printf("kernel with a %4d-byte parameter, PDL, batch 10 %8.3f us\n", N, tot / 10000);
}
static double nowUs() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
#define TIME(label, N, body) do { double t0 = nowUs(); for (int i_ = 0; i_ < (N); ++i_) { body; } double t1 = nowUs(); \
  printf("%-44s %8.3f us\n", label, (t1 - t0) / (N)); } while (0)
int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 3;
  const int batch = argc > 2 ? atoi(argv[2]) : 250;
  int d = 0; cudaSetDevice(0); cudaFree(0);
  void* p; cudaMalloc(&p, 1 << 20); cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  TIME("cudaGetDevice", 200000, cudaGetDevice(&d));
  TIME("cudaSetDevice(current)", 200000, cudaSetDevice(0));
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  unsigned mt; int managed, ord, ipc; unsigned long long bid; CUdeviceptr start; size_t size;
  void* data[] = {&mt, &managed, &ord, &bid, &start, &size, &ipc};
  TIME("cuPointerGetAttributes (7)", 200000, cuPointerGetAttributes(7, attrs, data, (CUdeviceptr)p));
  TIME("cuPointerGetAttribute (buffer id)", 200000, cuPointerGetAttribute(&bid, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)p));
  cudaStreamCaptureStatus cs; unsigned long long id; cudaGraph_t g;
  TIME("cudaStreamGetCaptureInfo", 200000, cudaStreamGetCaptureInfo(s, &cs, &id, &g));
  TIME("cudaStreamIsCapturing", 200000, cudaStreamIsCapturing(s, &cs));
  cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  for (int r = 0; r < 2; ++r) {
    double tot = 0; for (int b = 0; b < 20; ++b) { double t0 = nowUs(); for (int i = 0; i < 500; ++i) emptyKernel<<<1, 32, 0, s>>>(i); tot += nowUs() - t0; cudaStreamSynchronize(s); }
    printf("%-44s %8.3f us\n", "empty kernel <<<1,32>>>", tot / 10000);
    cudaLaunchConfig_t cfg = {}; cfg.gridDim = 1; cfg.blockDim = 32; cfg.stream = s; cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1; cfg.attrs = at; cfg.numAttrs = 1;
    tot = 0; for (int b = 0; b < 20; ++b) { double t0 = nowUs(); for (int i = 0; i < 500; ++i) cudaLaunchKernelEx(&cfg, emptyKernel, i); tot += nowUs() - t0; cudaStreamSynchronize(s); }
    printf("%-44s %8.3f us\n", "empty kernel cudaLaunchKernelEx + PDL", tot / 10000);
    tot = 0; for (int b = 0; b < 20; ++b) { double t0 = nowUs(); for (int i = 0; i < 500; ++i) cudaEventRecord(ev, s); tot += nowUs() - t0; cudaStreamSynchronize(s); }
    printf("%-44s %8.3f us\n", "cudaEventRecord", tot / 10000);
  }
  for (int r = 0; r < 2; ++r) { timeBlob<8>(s); timeBlob<320>(s); timeBlob<768>(s); timeBlob<1536>(s); }
  int n = 0; cudaGetDeviceCount(&n); if (n < 2) { printf("one GPU: no yali part\n"); return 0; }
  int devs[2] = {0, 1}; yaliComm_t c[2];
  if (yaliCommInitAll(c, 2, devs) != yaliSuccess) { printf("init failed\n"); return 1; }
  void* sb[2]; void* rb[2]; cudaStream_t st[2]; const size_t count = 2048;  // 4 KB bf16
  for (int i = 0; i < 2; ++i) { cudaSetDevice(i); cudaMalloc(&sb[i], 1 << 20); cudaMalloc(&rb[i], 1 << 20); cudaMemset(sb[i], 0, 1 << 20); cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking); }
  auto sync = [&] { for (int i = 0; i < 2; ++i) { cudaSetDevice(i); cudaStreamSynchronize(st[i]); } };
  auto call = [&](int i, bool inplace) { return yaliAllReduce(sb[i], inplace ? sb[i] : rb[i], count, yaliBfloat16, yaliSum, c[i], st[i]); };
  for (int w = 0; w < 200; ++w) { call(0, false); call(1, false); } sync();
  for (int r = 0; r < rounds; ++r) {
    for (int mode = getenv("HC_UNGROUPED") ? 1 : 0; mode < 2; ++mode) {
      double tot = 0, wall = 0; int bad = 0; const int batches = 10000 / batch;
      for (int b = 0; b < batches; ++b) {
        double t0 = nowUs();
        for (int i = 0; i < batch; ++i) {
          if (mode == 0) { yaliGroupStart(); bad += call(0, false) != yaliSuccess; bad += call(1, false) != yaliSuccess; bad += yaliGroupEnd() != yaliSuccess; }
          else { bad += call(0, false) != yaliSuccess; bad += call(1, false) != yaliSuccess; }
        }
        tot += nowUs() - t0; sync(); wall += nowUs() - t0;
      }
      printf("round %d batch %d %-36s %8.3f us per call host issue, %8.3f with the sync (%d errors)\n", r, batch, mode == 0 ? "yaliAllReduce 4K bf16, grouped pair" : "yaliAllReduce 4K bf16, ungrouped", tot / (2.0 * batches * batch), wall / (2.0 * batches * batch), bad);
    }
  }
  { double t0 = nowUs(); for (int i = 0; i < 100000; ++i) yaliAllReduce(sb[0], rb[0], 0, yaliBfloat16, yaliSum, c[0], st[0]);
    printf("yaliAllReduce count 0 (lock, checks, return)   %8.3f us\n", (nowUs() - t0) / 100000); }
  for (int i = 0; i < 2; ++i) yaliCommDestroy(c[i]);
  return 0;
}
