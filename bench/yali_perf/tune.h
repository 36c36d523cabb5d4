// `yali-perf --tune`: measures YALI's crossovers on this machine and writes a tuning table that
// YALI loads through YALI_TUNING_FILE (format: src/tuning/selector.h).
//
// For the current world size and the GPU's compute-capability major, four steps (tune_plan.h)
// choose the two-shot geometry, the two-shot min slot, the LL geometry and the LL/two-shot
// threshold. YALI reads its settings when a communicator is created, so every candidate gets
// communicators of its own: a one-line table in a temporary file named by YALI_TUNING_FILE, the
// algorithm forced with YALI_ALGO, comms created, timed (the events method of the sweep:
// out-of-place, back-to-back, the slowest rank), checked once, destroyed.
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
