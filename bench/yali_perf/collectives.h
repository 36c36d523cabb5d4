// What the harness needs to know about one collective, nccl-tests style: one struct per
// collective (the library call or calls it makes), so that every collective runs through the same
// timing loops. Their shapes (counts, in-place offsets, busBW) are in coll_shape.h.
//
// Correctness needs no data exchange between ranks: every rank's input is a pure function of
// (seed, rank, index), so each rank regenerates the inputs it needs on its own GPU and computes its
// expected output independently: reductions in float64 with a tolerance (floating types) or
// exactly, with two's-complement wrap-around (integer types); data movement bit for bit.
#ifndef YALI_PERF_COLLECTIVES_H_
#define YALI_PERF_COLLECTIVES_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend.h"
#include "coll_shape.h"
#include "perf_args.h"

namespace yali_perf {

// Everything that determines one rank's input values and its expected output.
struct DataSpec {
  CollId coll = CollId::kAllReduce;
  DType dtype = DType::kFloat;
  RedOp op = RedOp::kSum;  // the inputs' distribution depends on it (prod keeps products in range)
  size_t count = 0;        // elements passed to the call (CollShape::count)
  uint64_t seed = 0;
  int rank = 0;
  int nranks = 1;
  int root = 0;
  // Relative rounding per reduction step that the library under test may add
  // (Backend::AccumulationEpsilon).
  double accumulation_eps = 0;
};

// What one rank passes for one case: its buffers where this placement puts them (the harness
// applies CollShape's in-place offsets).
struct RankCall {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // CollShape::count
  DType dtype = DType::kFloat;
  RedOp op = RedOp::kSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
};

struct Collective {
  CollId id;
  // Groups of library calls that make one call of this collective (rs_ag: the reducescatter of
  // every rank, then the allgather of every rank). The harness brackets each phase with
  // GroupStart/GroupEnd across the local comms.
  int phases;
  // Issues phase `phase` on local comm `local`. False, with *refusal, when the library refused it
  // (nothing enqueued for this phase on this rank).
  bool (*issue)(Backend& backend, int local, const RankCall& call, int phase, cudaStream_t stream,
                std::string* refusal);
  // Backend::Precheck of every call the collective makes.
  bool (*precheck)(Backend& backend, int local, const RankCall& call, std::string* refusal);
  // The algorithm the library says it runs (rs_ag: both calls', "a+b").
  AlgoChoice (*describe)(Backend& backend, int local, const RankCall& call);
};

const Collective& CollectiveFor(CollId coll);

// Writes `elements` elements of this rank's input (spec.rank) into `input`: element j is the
// value of (seed, rank, j).
void FillInput(void* input, size_t elements, const DataSpec& spec, cudaStream_t stream);

// Adds to *wrong_counter (device memory) the number of the `elements` elements of this rank's
// `output` that differ from the expected output of spec.coll (beyond the tolerance, for floating
// reductions). NaN always counts as wrong.
void CountWrong(const void* output, size_t elements, const DataSpec& spec,
                unsigned long long* wrong_counter, cudaStream_t stream);

// Sets every byte of `buffer` to 0xff: NaN in every floating type (fp8 included), so an element
// that the collective fails to write is counted as wrong. (For integer types 0xff.. is -1 or the
// largest value, which the inputs avoid for the data-moving collectives; a reduction may produce
// it, so an unwritten element is missed with probability 2^-bits.)
void PoisonBuffer(void* buffer, size_t bytes, cudaStream_t stream);

// *checksum (device memory, zeroed by the caller) becomes an order-independent 64-bit hash of the
// bytes of `buffer`. Equal on two ranks iff (barring collisions) their outputs are bitwise
// identical.
void LaunchChecksum(const void* buffer, size_t bytes, unsigned long long* checksum,
                    cudaStream_t stream);

// ---- -C alltoallv's rows (alltoallv_plan.h) ----------------------------------------------------
// A buffer of rows is described by a row id per position (device int64): RowId, or kNoRow where no
// row belongs (padding, past the end), which must hold the poison.

// What fixes the elements of every row of one case.
struct AlltoAllvRows {
  DType dtype = DType::kBfloat16;
  size_t hidden = 0;         // elements per row
  size_t rows_per_rank = 0;  // RoutingSpec::RowsPerRank: decodes a row id into (rank, row)
  uint64_t seed = 0;         // RowSeed
};

// Writes `nrows` rows of rows.hidden elements into `buffer`, row r being the row ids[r] (all-ones
// bytes for kNoRow).
void FillRows(void* buffer, const int64_t* ids, size_t nrows, const AlltoAllvRows& rows,
              cudaStream_t stream);

// Adds to *wrong_counter the number of elements of the `nrows` rows of `buffer` that differ, bit
// for bit, from what FillRows would write for `ids`.
void CountWrongRows(const void* buffer, const int64_t* ids, size_t nrows, const AlltoAllvRows& rows,
                    unsigned long long* wrong_counter, cudaStream_t stream);

// Adds to *wrong_counter the number of the `n` int64 values at `got` that differ from `expected`
// (both device memory): the count and offset outputs.
void CountWrongWords(const int64_t* got, const int64_t* expected, size_t n,
                     unsigned long long* wrong_counter, cudaStream_t stream);

}  // namespace yali_perf

#endif  // YALI_PERF_COLLECTIVES_H_
