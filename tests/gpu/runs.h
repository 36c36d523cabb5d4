// Buffers with guard regions, and one allreduce run checked end to end: used by the cases.
//
// Every device allocation is filled with a guard pattern (0xA5 bytes); the input slice is then
// generated and the output slice poisoned with 0xFF bytes (NaN in fp32, fp16 and bf16), so an
// element the library never wrote reads as NaN and fails. After the run, every byte of every
// allocation outside the input and output slices must still hold the pattern (an out-of-bounds
// write fails), and the input slice must still hold the input (the library must not write it).
#ifndef YALI_TESTS_GPU_RUNS_H_
#define YALI_TESTS_GPU_RUNS_H_

#include <string>
#include <utility>
#include <vector>

#include "suite.h"

namespace yt {

constexpr unsigned char kGuardByte = 0xA5;
constexpr unsigned char kPoisonByte = 0xFF;
constexpr size_t kGuardBytes = 4096;  // guard region on each side of a slice

enum class Alloc {
  Malloc,       // cudaMalloc
  DefaultPool,  // cudaMallocAsync from the device's default memory pool
  OwnPool,      // cudaMallocFromPoolAsync from a pool created for it
  CuMemChunks,  // cuMemCreate chunks of the recommended granularity, each mapped on its own into one
                // reserved address range, back to back (as torch's expandable segments grow): CUDA
                // reports each chunk's range for a pointer, not the whole allocation
};
const char* allocName(Alloc a);

// One device allocation, pattern-filled by fillGuard().
struct DevAlloc {
  int dev = -1;
  char* p = nullptr;
  size_t bytes = 0;
  Alloc kind = Alloc::Malloc;
  cudaStream_t stream = nullptr;  // for the pool kinds
  cudaMemPool_t pool = nullptr;   // OwnPool only
  size_t mapped = 0;                            // CuMemChunks: the reserved and mapped bytes
  std::vector<unsigned long long> chunks;       // CuMemChunks: the chunks' handles, in address order
};
DevAlloc allocDev(Ctx& ctx, int dev, size_t bytes, Alloc kind, cudaStream_t stream);
// The size of one CuMemChunks chunk on `dev` (the driver's recommended granularity).
size_t cuMemChunkBytes(Ctx& ctx, int dev);
void freeDev(Ctx& ctx, DevAlloc& a);
// Fills the whole allocation with kGuardByte (async on a.stream or the given stream).
void fillGuard(Ctx& ctx, const DevAlloc& a, cudaStream_t stream);
// Checks that every byte of `a` outside `slices` (device pointer, bytes) still holds kGuardByte.
// Synchronous. Reports a failure (with `label`) and returns false otherwise.
bool checkGuard(Ctx& ctx, const DevAlloc& a, const std::vector<std::pair<const void*, size_t>>& slices,
                const std::string& label);

// Checks one rank's output (and unchanged input, when `in` is given) against the reference. Adds
// the output hash to *hash. Synchronizes `stream`. Reports failures with the comm's last error.
bool checkOutput(Ctx& ctx, int localIndex, yaliComm_t comm, cudaStream_t stream, const void* out,
                 size_t count, yaliDataType_t dt, yaliRedOp_t op, uint64_t seed, const void* in,
                 const std::string& label, uint64_t* hash);

// Collective: every rank's hash must be equal (bitwise-identical outputs). `hashes` holds the local
// ranks' values in local order.
bool checkIdentity(Ctx& ctx, const std::vector<uint64_t>& hashes, const std::string& label);

// Checks a yaliAllReduce's return; on failure reports it with yaliGetLastError.
bool checkIssued(Ctx& ctx, yaliResult_t r, int rank, yaliComm_t comm, const std::string& label);

struct Layout {
  size_t sendOff = 0;  // elements past a 4 KiB-aligned start
  size_t recvOff = 0;
  bool inplace = false;  // recvbuff == sendbuff (sendOff used)
  bool shared = false;   // send and recv carved out of one allocation, with a guard gap between
  Alloc alloc = Alloc::Malloc;
};

struct RunSpec {
  size_t count = 0;
  yaliDataType_t dt = yaliFloat32;
  yaliRedOp_t op = yaliSum;
  Layout layout;
};
std::string describe(const RunSpec& s);

// One allreduce over the local ranks: buffers for every local rank, then prepare/issue/verify.
class Run {
 public:
  // `streams`: one per local rank (default: the ranks' main streams).
  Run(Ctx& ctx, const RunSpec& spec, std::vector<cudaStream_t> streams = {});
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // Guard pattern everywhere, inputs for `seed`, outputs poisoned. Asynchronous.
  void prepare(uint64_t seed);
  // yaliAllReduce on every local rank, in a loop from this thread. Asynchronous.
  bool issue(const std::vector<yaliComm_t>& comms);
  // Collective: output, unchanged input, guards, identity across ranks.
  bool verify(const std::vector<yaliComm_t>& comms, const std::string& label = "");

  const RunSpec spec;
  uint64_t seed = 0;
  struct Rank {
    std::vector<DevAlloc> allocs;
    void* send = nullptr;
    void* recv = nullptr;
    cudaStream_t stream = nullptr;
  };
  std::vector<Rank> ranks;  // per local rank

 private:
  Ctx& ctx_;
};

// prepare (fresh seed) + issue + verify. Collective. Returns the local verdict.
bool allreduceAndVerify(Ctx& ctx, const std::vector<yaliComm_t>& comms, const RunSpec& spec,
                        const std::string& label = "");

// ---- Helpers shared by the case files -----------------------------------------------------------

// The graph cases' machinery: one CUDA graph per local rank, captured on the rank's main stream,
// whose generator kernels read their seed from device memory (seedDev) that replay() rewrites
// before launching, so that every replay checks fresh inputs.
class ReplayableGraphs {
 public:
  explicit ReplayableGraphs(Ctx& ctx);  // allocates seedDev[i] on each local rank's device
  ~ReplayableGraphs();                  // destroys the graphs, frees seedDev
  // cudaStreamBeginCapture on every local rank's main stream, in the mode --capture names.
  void beginCapture();
  // Ends every capture, then instantiates every graph (only once all have ended: in thread-local
  // mode, instantiating while this thread has another stream capturing invalidates that capture).
  // `issued`: whether every captured call was issued. Collective; true when all ranks succeeded.
  bool endCapture(bool issued);
  // Writes `seed` to every seedDev, then launches every rank's graph.
  void replay(uint64_t seed);
  std::vector<uint64_t*> seedDev;  // per local rank

 private:
  Ctx& ctx_;
  std::vector<cudaGraph_t> graphs_;
  std::vector<cudaGraphExec_t> execs_;
};

// True when `name` occurs in `text` as a whole identifier ("rank" not inside "nranks").
bool containsWord(const std::string& text, const std::string& name);

// cudaStreamSynchronize on every local rank's main stream (fatal on a CUDA error).
void syncAll(Ctx& ctx);

// Checks a call that must fail: the code, and that yaliGetLastError(NULL) names the call and the
// argument (`arg` nullptr: any message).
bool expectFailure(Ctx& ctx, const std::string& what, yaliResult_t got, yaliResult_t want,
                   const char* call, const char* arg);

// The whole buffer still holds kPoisonByte (a failed call wrote nothing). Synchronizes the device.
bool expectPoisoned(Ctx& ctx, int dev, const void* p, size_t bytes, const std::string& what);

// Free device memory on the local devices, minimum over all processes (collective).
size_t minFreeMemory(Ctx& ctx);

}  // namespace yt

#endif  // YALI_TESTS_GPU_RUNS_H_
