// `yali-perf --tune`: measures YALI's crossovers on this machine and writes a tuning table that
// YALI loads through YALI_TUNING_FILE (format: src/tuning/selector.h).
//
// For the current world size and the GPU's compute-capability major, four steps (tune_plan.h)
// choose the two-shot geometry, the two-shot min slot, the LL geometry and the LL/two-shot
// threshold. YALI reads its settings when a communicator is created, so every candidate gets
// communicators of its own: a one-line table in a temporary file named by YALI_TUNING_FILE, the
// algorithm forced with YALI_ALGO, comms created, timed (the events method of the sweep:
// out-of-place, back-to-back, the slowest rank), checked once, destroyed.
//
// Then, for each exchange collective of --tune-colls (all by default), with those AllReduce
// choices in the table: step 5, `<coll>_ll_max`, `<coll>_ll` against `<coll>_staged` (both forced)
// at pieces of 4K, 8K, ... up to the LL capacity, every size checked; step 6, for the collectives
// with a `<coll>_direct` row (allgather, broadcast, scatter, alltoall), `<coll>_direct_min`:
// both buffers of every rank registered with yaliCommRegister (as -R 1 does), direct forced
// against the selector's own choice with `<coll>_direct_min=0` (LL up to step 5's value, staged
// above), at pieces of 4K, 8K, ... up to what the buffers hold. If the library will not run direct
// on those buffers, that key is left to the built-in table and the file says why. The keys go onto
// the same line as AllReduce's (keys in bytes per piece, the selector's unit); the header prints
// the number of configurations and measurements (CountTuneRuns).
#ifndef YALI_PERF_TUNE_H_
#define YALI_PERF_TUNE_H_

#include "backend.h"
#include "harness.h"
#include "perf_args.h"
#include "report.h"

namespace yali_perf {

// Runs --tune on `world` (streams made, buffers of TuneLargestMessageBytes() or as much as fits)
// with `yali`, which holds no comms on entry or on return. Every process of a multi-process job
// calls it in step; rank 0 prints, writes args.tune_out and, with -J, the JSON. Returns the exit
// code: 0, or 1 when some result was wrong (the table is still written, from correct candidates).
int RunTune(World& world, Backend& yali, const PerfArgs& args, const RunInfo& info);

}  // namespace yali_perf

#endif  // YALI_PERF_TUNE_H_
