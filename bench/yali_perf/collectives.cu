// Input generation and result checking kernels for every element type, and the table of
// collectives.
#include <algorithm>
#include <type_traits>

#include "collectives.h"
#include "cuda_check.h"
#include "data_check.cuh"
#include "perf_error.h"

namespace yali_perf {
namespace {

constexpr int kThreadsPerBlock = 256;
// Grid-stride loops: enough blocks to fill any current GPU, few enough to keep atomics cheap.
constexpr size_t kMaxBlocks = 4096;

unsigned BlocksFor(size_t items) {
  size_t blocks = (items + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(blocks, kMaxBlocks)));
}

// The value and check functions are in data_check.cuh (host and device).
using namespace check;

// ---- Kernels ------------------------------------------------------------------------------------

template <typename T>
__global__ void FillInputKernel(T* input, size_t count, uint64_t seed, int rank, int op,
                                int nranks) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    input[i] = StoredInput<T>(seed, rank, i, op, nranks);
}

// Adds each warp's total to *counter with one atomic.
__device__ inline void WarpAtomicAdd(unsigned long long* counter, unsigned long long value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  if ((threadIdx.x & 31) == 0 && value != 0) atomicAdd(counter, value);
}

template <typename T>
__global__ void CountWrongKernel(const T* output, size_t elements, CheckArgs a,
                                 unsigned long long* wrong) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned long long local_wrong = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements;
       i += stride)
    if (!OutputElementOk<T>(output[i], i, a)) ++local_wrong;
  WarpAtomicAdd(wrong, local_wrong);
}

// Sum over 16-bit words of Mix64(index, word), plus the odd last byte as word `nwords`: addition
// commutes, so block order and atomics do not change the result, while any changed bit or moved
// word changes it.
__global__ void ChecksumKernel(const uint8_t* bytes, size_t nbytes, unsigned long long* checksum) {
  const uint16_t* words = reinterpret_cast<const uint16_t*>(bytes);
  const size_t nwords = nbytes / 2;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long local_sum = 0;
  for (size_t i = first; i < nwords; i += stride)
    local_sum += Mix64((static_cast<uint64_t>(i) << 16) | words[i]);
  if (first == 0 && (nbytes & 1)) local_sum += Mix64((static_cast<uint64_t>(nwords) << 16) | bytes[nbytes - 1]);
  WarpAtomicAdd(checksum, local_sum);
}

// AlltoAllv's rows: a block per row (grid-stride over rows), its threads over the row's elements,
// so each row's id is read once per block.
template <typename T>
__global__ void FillRowsKernel(T* buffer, const int64_t* ids, size_t nrows, AlltoAllvRows rows) {
  for (size_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const int64_t id = ids[r];
    T* row = buffer + r * rows.hidden;
    for (size_t c = threadIdx.x; c < rows.hidden; c += blockDim.x)
      row[c] = AlltoAllvExpected<T>(rows, id, c);
  }
}

template <typename T>
__global__ void CountWrongRowsKernel(const T* buffer, const int64_t* ids, size_t nrows,
                                     AlltoAllvRows rows, unsigned long long* wrong) {
  unsigned long long local_wrong = 0;
  for (size_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const int64_t id = ids[r];
    const T* row = buffer + r * rows.hidden;
    for (size_t c = threadIdx.x; c < rows.hidden; c += blockDim.x)
      if (BitsOf(row[c]) != BitsOf(AlltoAllvExpected<T>(rows, id, c))) ++local_wrong;
  }
  WarpAtomicAdd(wrong, local_wrong);
}

__global__ void CountWrongWordsKernel(const int64_t* got, const int64_t* expected, size_t n,
                                      unsigned long long* wrong) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned long long local_wrong = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (got[i] != expected[i]) ++local_wrong;
  WarpAtomicAdd(wrong, local_wrong);
}

unsigned BlocksForRows(size_t nrows) {
  return static_cast<unsigned>(std::max<size_t>(1, std::min(nrows, kMaxBlocks)));
}

// ---- The collectives ----------------------------------------------------------------------------

LibraryCall ToLibraryCall(CollId kind, const RankCall& call) {
  LibraryCall out;
  out.kind = kind;
  out.send = call.send;
  out.recv = call.recv;
  out.count = call.count;
  out.dtype = call.dtype;
  out.op = call.op;
  out.root = call.root;
  if (kind == CollId::kSendRecv) {
    // nccl-tests' ring: to the next rank, from the previous one (the check expects the previous
    // rank's input: data_check.cuh, SourceOf).
    out.send_peer = (call.rank + 1) % call.nranks;
    out.recv_peer = (call.rank - 1 + call.nranks) % call.nranks;
  }
  return out;
}

// The eight library collectives and sendrecv: one Backend::Issue each (sendrecv's is a group of a
// send and a receive).
template <CollId kKind>
bool IssueOne(Backend& backend, int local, const RankCall& call, int phase, cudaStream_t stream,
              std::string* refusal) {
  return backend.Issue(local, ToLibraryCall(kKind, call), stream, refusal);
}

template <CollId kKind>
bool PrecheckOne(Backend& backend, int local, const RankCall& call, std::string* refusal) {
  return backend.Precheck(local, ToLibraryCall(kKind, call), refusal);
}

template <CollId kKind>
AlgoChoice DescribeOne(Backend& backend, int local, const RankCall& call) {
  return backend.Describe(local, ToLibraryCall(kKind, call));
}

// rs_ag: AllReduce as people compose it by hand, on one buffer: each rank's block of the
// reduction lands in its own block of recv (ReduceScatter; in place when send is recv), then
// AllGather spreads the blocks from there, in place.
LibraryCall RsAgPhase(const RankCall& call, int phase) {
  const size_t block = call.count / static_cast<size_t>(call.nranks);
  void* mine = static_cast<char*>(call.recv) +
               static_cast<size_t>(call.rank) * block * ElementSize(call.dtype);
  LibraryCall out = ToLibraryCall(phase == 0 ? CollId::kReduceScatter : CollId::kAllGather, call);
  out.count = block;
  if (phase == 0) {
    out.recv = mine;
  } else {
    out.send = mine;
  }
  return out;
}

bool IssueRsAg(Backend& backend, int local, const RankCall& call, int phase, cudaStream_t stream,
               std::string* refusal) {
  return backend.Issue(local, RsAgPhase(call, phase), stream, refusal);
}

bool PrecheckRsAg(Backend& backend, int local, const RankCall& call, std::string* refusal) {
  return backend.Precheck(local, RsAgPhase(call, 0), refusal) &&
         backend.Precheck(local, RsAgPhase(call, 1), refusal);
}

AlgoChoice DescribeRsAg(Backend& backend, int local, const RankCall& call) {
  AlgoChoice reduce_scatter = backend.Describe(local, RsAgPhase(call, 0));
  AlgoChoice all_gather = backend.Describe(local, RsAgPhase(call, 1));
  if (!reduce_scatter.known || !all_gather.known) return AlgoChoice();
  AlgoChoice both = reduce_scatter;
  both.algorithm = reduce_scatter.algorithm + "+" + all_gather.algorithm;
  return both;
}

#define YALI_PERF_ONE_CALL(kind) \
  {kind, 1, IssueOne<kind>, PrecheckOne<kind>, DescribeOne<kind>}

const Collective kCollectives[] = {
    YALI_PERF_ONE_CALL(CollId::kAllReduce), YALI_PERF_ONE_CALL(CollId::kReduceScatter),
    YALI_PERF_ONE_CALL(CollId::kAllGather), YALI_PERF_ONE_CALL(CollId::kBroadcast),
    YALI_PERF_ONE_CALL(CollId::kReduce),    YALI_PERF_ONE_CALL(CollId::kGather),
    YALI_PERF_ONE_CALL(CollId::kScatter),   YALI_PERF_ONE_CALL(CollId::kAlltoAll),
    {CollId::kRsAg, 2, IssueRsAg, PrecheckRsAg, DescribeRsAg},
    YALI_PERF_ONE_CALL(CollId::kSendRecv),
};

#undef YALI_PERF_ONE_CALL

}  // namespace

const Collective& CollectiveFor(CollId coll) {
  for (const Collective& c : kCollectives)
    if (c.id == coll) return c;
  Fatal("internal: no collective " + std::to_string(static_cast<int>(coll)));
}

void FillInput(void* input, size_t elements, const DataSpec& spec, cudaStream_t stream) {
  if (elements == 0) return;
  DispatchType(spec.dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    FillInputKernel<T><<<BlocksFor(elements), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(input), elements, spec.seed, spec.rank, static_cast<int>(spec.op),
        spec.nranks);
  });
  YALI_PERF_CUDA(cudaGetLastError());
}

void CountWrong(const void* output, size_t elements, const DataSpec& spec,
                unsigned long long* wrong_counter, cudaStream_t stream) {
  if (elements == 0) return;
  const CheckArgs args = CheckArgsFor(spec);
  DispatchType(spec.dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    CountWrongKernel<T><<<BlocksFor(elements), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(output), elements, args, wrong_counter);
  });
  YALI_PERF_CUDA(cudaGetLastError());
}

void PoisonBuffer(void* buffer, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  YALI_PERF_CUDA(cudaMemsetAsync(buffer, 0xff, bytes, stream));
}

void FillRows(void* buffer, const int64_t* ids, size_t nrows, const AlltoAllvRows& rows,
              cudaStream_t stream) {
  if (nrows == 0 || rows.hidden == 0) return;
  DispatchType(rows.dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    FillRowsKernel<T><<<BlocksForRows(nrows), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(buffer), ids, nrows, rows);
  });
  YALI_PERF_CUDA(cudaGetLastError());
}

void CountWrongRows(const void* buffer, const int64_t* ids, size_t nrows, const AlltoAllvRows& rows,
                    unsigned long long* wrong_counter, cudaStream_t stream) {
  if (nrows == 0 || rows.hidden == 0) return;
  DispatchType(rows.dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    CountWrongRowsKernel<T><<<BlocksForRows(nrows), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(buffer), ids, nrows, rows, wrong_counter);
  });
  YALI_PERF_CUDA(cudaGetLastError());
}

void CountWrongWords(const int64_t* got, const int64_t* expected, size_t n,
                     unsigned long long* wrong_counter, cudaStream_t stream) {
  if (n == 0) return;
  CountWrongWordsKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(got, expected, n,
                                                                       wrong_counter);
  YALI_PERF_CUDA(cudaGetLastError());
}

void LaunchChecksum(const void* buffer, size_t bytes, unsigned long long* checksum,
                    cudaStream_t stream) {
  if (bytes == 0) return;
  ChecksumKernel<<<BlocksFor(std::max<size_t>(1, bytes / 2)), kThreadsPerBlock, 0, stream>>>(
      static_cast<const uint8_t*>(buffer), bytes, checksum);
  YALI_PERF_CUDA(cudaGetLastError());
}

}  // namespace yali_perf
