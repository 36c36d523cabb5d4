// The copy-engine algorithms (*_ce: AllGather, Broadcast, Gather, Scatter, AlltoAll): the data
// moves by the GPU's copy engines and the ranks synchronize by stream memory operations, so a call
// runs no kernel and takes no SM from the caller's compute (what FSDP users overlap their
// all-gathers with). NCCL 2.28 offers the same under NCCL_CTA_POLICY_ZERO on symmetric windows.
//
// Pull, never push: each rank copies into its own output, from every peer's input (registered
// memory, mapped here). A rank thus writes only its own memory, which is what makes the waits
// bounded safely (below): releasing a rank's stream after a failure can leave only its own output
// undefined, never a peer's memory overwritten.
//
// What every rank must pass (else it takes another algorithm, and a mix of ranks that took *_ce and
// ranks that did not times out, like a mix of registered and unregistered buffers):
//   - sendbuff inside memory registered on every rank (yaliCommRegister), at the same byte offset
//     within the corresponding registration on every rank (in-place AllGather: the outputs at the
//     same offset). Ranks that read nothing of their own input (Broadcast and Scatter receivers)
//     pass one laid out like the root's, as NCCL's symmetric windows ask;
//   - an eager call: inside a stream capture the call takes another algorithm (the host's watch
//     below cannot see a graph's replays);
//   - no two ranks of the comm on one GPU in one process (comm.cc: commInitAll): their streams
//     share the GPU's hardware queues, where a wait at a queue's head holds up everything behind
//     it, the peer's write it waits for included. One process per rank keeps separate queues.
//
// One call on the caller's stream S, rank r, tag t (a digest of the call that every rank's must
// equal: algorithm, count, type, root, registration, offset; never 0):
//   1. ready: write t into ready[r] of every peer's window; wait until our ready[p] == t for every
//      peer p (its input is ready: its earlier work on its stream has ended); set our ready[p] = 0.
//   2. copy: each peer's piece for us, peer input -> our output, on a side stream per peer (the
//      copy engines work on them at once), our own piece locally on S; S waits for them all.
//   3. done: write t into done[r] of every peer's window; wait until our done[p] == t for every
//      peer; set our done[p] = 0. When the call ends, every peer has read our input: the caller
//      may overwrite it.
//   4. gate: wait until our window's remoteFailure word is 0. A released call (below) still sends
//      its done words, but the release comes only after the host saw the writes of its failure word
//      into the peers' windows complete. So a call whose done wait passed on a word that a peer sent after its release
//      stops here, and so does one that read data the peer wrote after the released call ended:
//      either ends with that peer's failure instead of without an error on an input the peer's
//      program may since have overwritten. A call that passed before the failure word arrived read
//      the peer's input as it was. This relies on the GPUs making a completed write into a peer's
//      memory visible there before later work that the writer's host orders after it, which CUDA
//      does not document.
// Why the resets lose nothing: peer p writes ready[p] of its next call only after its done wait of
// this call, which needs our done write, which follows our reset of ready[p] on S; likewise p's next
// done write follows its next ready wait, which needs our next ready write, after our done reset.
// The writes carry CUDA's default memory barrier, so what the writer did before is visible first.
//
// Bounded waits. A stream memory wait cannot time out; the host watches instead. Each call records
// three events (started, ready passed, ended); one job per comm on the reaper thread (reaper.h)
// polls the oldest call in flight every few milliseconds:
//   - ended: the call is over (HostStatus::eagerDone advances, as a kernel's blocks count themselves
//     into LocalState::eagerBlocksEnded as they end);
//   - started more than YALI_TIMEOUT_MS ago and not ended: a timeout (the phase says which wait),
//     recorded as a kernel would record it (HostStatus, LocalState::failed, and every peer's
//     WindowHeader::remoteFailure at once, so their kernels refuse to run);
//   - the comm failed, was aborted, or was destroyed with the call unfinished (yaliCommDestroy gave
//     up waiting for it and told the peers before returning: recorded as the destroy's code,
//     closeCopyEngine);
//   - a peer failed or aborted (it wrote our window's remoteFailure word, which the watch reads by a
//     4-byte copy at each poll while the call waits): recorded as kFailRemote, as a kernel waiting
//     for that peer would record it.
// In the last three cases the job releases the call. First it writes the failure into the peers'
// remoteFailure words again (ours; for kFailRemote the origin's code and rank, into every peer but
// the origin) and records an event after those writes; at a later poll, once the event is
// complete (should a write or the record fail, it tries again at the next poll), it writes t into all of
// our ready and done words and 0 into our remoteFailure word (step 4's gate), again every 10 ms
// until the call has ended (pull: the rest of the call copies into our own output only). Only the
// oldest call is released, so a release cannot race another call's resets.
// A CUDA call failing while the host queues a call (half-way: some of its steps queued) fails the
// comm (kFailHost; its peers' remoteFailure words are written at once) and leaves the call in
// flight, so that the watch releases it in turn if it has not ended by itself (its end: `ended`
// recorded after what was queued, or, if that record fails too, its stream going idle); a failed comm's calls
// are refused, also those queued in a group before the failure (a release leaves the tag in our
// words: an identical call would pass them).
#pragma once

#include "yali/yali.h"

struct yaliComm;

namespace yali {

struct PlannedLaunch;

// Whether the driver offers what the copy-engine algorithms need (its memory operations); comms
// where it does not never choose them.
bool copyEngineAvailable();

// Issues one *_ce call (plan.args: the pattern, peerRecv[s] = rank s's input as mapped here,
// callTag). The caller holds comm->mutex; the stream is not capturing.
yaliResult_t issueCopyEngine(yaliComm* comm, PlannedLaunch& plan);

// yaliCommDestroy and yaliCommAbort: the comm's calls in flight are released at the watch's next
// poll.
// `code`: what a call still unfinished is recorded as failing with, unless the comm already failed
// (kFailAborted; a destroy that gave up: kFailTimeout, or kFailAborted when an abort cut it short).
void closeCopyEngine(yaliComm* comm, int code);

}  // namespace yali
