// What the harness needs to know about one collective, nccl-tests style: one struct per
// collective, so that AllGather, ReduceScatter, ... slot in beside AllReduce without touching the
// timing loops.
//
// Correctness needs no data exchange between ranks: every rank's input is a pure function of
// (seed, rank, index), so each rank regenerates all ranks' inputs on its own GPU and computes the
// expected output in float64.
#ifndef YALI_PERF_COLLECTIVES_H_
#define YALI_PERF_COLLECTIVES_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend.h"
#include "perf_args.h"

namespace yali_perf {

// Everything that determines one rank's input values and the expected output.
struct DataSpec {
  DType dtype;
  RedOp op;
  size_t count;  // elements, as passed to the collective
  uint64_t seed;
  int rank;
  int nranks;
  // Relative rounding per reduction step that the library under test may add
  // (Backend::AccumulationEpsilon).
  double accumulation_eps;
};

struct Collective {
  const char* name;  // the JSON "collective"
  const char* bus_factor_text;

  // Bytes of each rank's input and output buffer for `count` elements of `element_bytes`.
  size_t (*input_bytes)(size_t count, size_t element_bytes, int nranks);
  size_t (*output_bytes)(size_t count, size_t element_bytes, int nranks);

  // busBW = algBW * factor: the bandwidth each link needs, comparable across rank counts.
  double (*bus_bandwidth_factor)(int nranks);

  // Writes this rank's input (spec.rank) into `input`.
  void (*fill_input)(void* input, const DataSpec& spec, cudaStream_t stream);

  // Adds to *wrong_counter (device memory) the number of elements of this rank's `output` that
  // are outside the tolerance of the expected value. NaN always counts as wrong.
  void (*count_wrong)(const void* output, const DataSpec& spec, unsigned long long* wrong_counter,
                      cudaStream_t stream);

  // Issues the collective on local comm `local` of `backend`.
  void (*run)(Backend& backend, int local, const void* send, void* recv, size_t count,
              DType dtype, RedOp op, cudaStream_t stream);
};

extern const Collective kAllReduce;

// Sets every byte of `buffer` to 0xff: a NaN in fp32, fp16 and bf16, so an element that the
// collective fails to write is counted as wrong.
void PoisonBuffer(void* buffer, size_t bytes, cudaStream_t stream);

// *checksum (device memory, zeroed by the caller) becomes an order-independent 64-bit hash of the
// bytes of `buffer` (bytes must be even). Equal on two ranks iff (barring collisions) their
// outputs are bitwise identical.
void LaunchChecksum(const void* buffer, size_t bytes, unsigned long long* checksum,
                    cudaStream_t stream);

}  // namespace yali_perf

#endif  // YALI_PERF_COLLECTIVES_H_
