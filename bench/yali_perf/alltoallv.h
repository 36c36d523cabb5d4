// -C alltoallv: YALI's uneven exchange measured as a Mixture-of-Experts layer uses it, in every
// form, against NCCL's grouped send/recv as torch issues it, on the same buffers and routing.
//
// A case is (dtype, distribution, tokens per rank): every rank routes its tokens
// (alltoallv_plan.h), sorts its rows by global expert into World's send buffer, and each column of
// VarColumns() runs through the harness (RunCase: precheck, checked call on poisoned outputs,
// warmup, timing, reduction over ranks) as its own case. The rows are checked exactly against the
// reference layouts, and so are the count and offset outputs.
//
// Buffers: World's send buffer holds the rows in send order (the combine's output), its receive
// buffer the dispatch's expert-major output (the combine's input) or the 1-D forms' rank-major one;
// each case adds, per rank, its counts (inputs, outputs and their reference: VarWords) and the row
// ids of the three layouts, freed after the case.
#ifndef YALI_PERF_ALLTOALLV_H_
#define YALI_PERF_ALLTOALLV_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend.h"
#include "harness.h"
#include "perf_args.h"
#include "report.h"

namespace yali_perf {

// False, with *error, when the run cannot be laid out on `nranks` ranks (experts not a multiple of
// nranks, too many experts per rank for YALI).
bool CheckAlltoAllvWorld(const AlltoAllvArgs& args, int nranks, std::string* error);

// The bytes per rank of the largest send or receive buffer any case of the run needs (World's
// send and recv are allocated at that size).
size_t AlltoAllvBufferBytes(const PerfArgs& args, int nranks);

// The lines the report prints above the table: what each column calls, how it is timed and
// checked (each starting with "# ").
std::string AlltoAllvPreamble(const PerfArgs& args, int nranks);

// Runs every case on `world` with `backends` (their comms made, World's buffers allocated), in
// step on every process. `absent` says, per library name, why a library of VarColumns() is not in
// `backends`. `use_buffers_of(backend)` points World's slots at the send and receive buffers that
// library runs on (NCCL's own: Backend::WantsOwnBuffers), before each of its cells. The printer
// rank prints the table, the #wrong summary and, with -J, the JSON (with `info`). Returns the
// #wrong over every column, line and rank.
uint64_t RunAlltoAllv(World& world, const std::vector<Backend*>& backends,
                      const std::map<std::string, std::string>& absent, const PerfArgs& args,
                      const RunInfo& info, bool printer,
                      const std::function<void(const Backend&)>& use_buffers_of);

}  // namespace yali_perf

#endif  // YALI_PERF_ALLTOALLV_H_
