// What goes where: the rules of libyali-nccl as pure functions (no NCCL library, no GPU), so that
// the host tests can walk every case. comm.cc and intercept.cc apply them.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include <nccl.h>

#include "core/thread_token.h"
#include "yali/yali.h"

namespace yali::nccl_abi {

// ---- YALI_NCCL_DISABLE: collectives kept on NCCL -------------------------------------------------

// A set of collectives, bit c for yaliCollective_t c.
using CollectiveMask = uint32_t;
// The collectives an NCCL program can reach (AllReduce .. AlltoAll; AlltoAllv has no NCCL call).
constexpr CollectiveMask kAllNcclCollectives = (1u << (yaliCollAlltoAll + 1)) - 1;
// ncclSend and ncclRecv ("sendrecv"): no yaliCollective_t, the mask's top bit.
constexpr CollectiveMask kSendRecvMask = 1u << 31;

// Parses "allgather,reducescatter" (YALI's collective names, vocabulary.h, and "sendrecv" for
// ncclSend and ncclRecv, in any case, with spaces allowed around the commas; "all" for every one;
// empty for none). Names it does not know are skipped and listed in *unknown (comma separated) for
// a warning.
CollectiveMask parseDisableList(const char* text, std::string* unknown);

// YALI_NCCL_REGISTER's value: whether ncclCommRegister registers with YALI too. Off unless set to
// something other than "0" or empty: NCCL's registration is local to a rank, YALI's collective
// (every rank, the same sizes in the same order, and for AllReduce's zero-copy the same offsets),
// so an unchanged NCCL program (torch's allocator hook, one thread registering for several GPUs
// outside a group, ranks registering in different orders) would fail or stall under it.
bool parseRegisterSetting(const char* value);

// ---- Creation: what NCCL makes of a communicator's config ----------------------------------------

// Whether NCCL makes a communicator with this config blocking (2.28.9 init.cc: parseCommConfig,
// copyCommConfig, envConfigOverride): `env` (NCCL_COMM_BLOCKING's value, or null), read as NCCL reads
// a numeric parameter (strtoll, base 0; empty or out of range: unset), when it is 0 or 1; else, for
// a NULL config, `inherited` (a split's or shrink's parent's blocking, its config being copied;
// true for a new comm, NCCL's default); else config->blocking, where unset (NCCL_CONFIG_UNDEF_INT),
// or in a config older than 2.14, meaning 1 (not the parent's: a config of its own is not copied).
bool blockingOf(const ncclConfig_t* config, bool inherited, const char* env);
// Whether a communicator made with `config` (NULL: the parent's, `inherited`) shares its resources
// with the splits made from it, by NCCL's rules, with NCCL_COMM_SPLIT_SHARE_RESOURCES = env (NULL:
// unset).
bool splitShareOf(const ncclConfig_t* config, bool inherited, const char* env);

// The libraries NCCL tries as its environment plugin (2.28.9 plugin/env.cc, ncclEnvPluginLoad;
// plugin/plugin_open.cc, openPluginLib), in its order, for NCCL_ENV_PLUGIN's value `setting` (null:
// unset): none for "none" (any case); "libnccl-env.so" when unset or empty; else the value, then
// "libnccl-env-<value>.so" unless the value holds a '/' or is a library name ("lib...so"). An empty
// name stands for the program itself (a prefix of "STATIC_PLUGIN", any case: dlopen(NULL)).
std::vector<std::string> envPluginCandidates(const char* setting);

// ---- Set-up: may this communicator have a YALI comm? --------------------------------------------

// What every rank tells the others when a communicator is made (allgathered over the real NCCL
// comm): its node and the settings that must agree for the ranks to route calls alike. Fixed size,
// plain bytes, the same layout on every rank.
struct RankRecord {
  // Changes whenever this struct or the set-up's rounds do, so that ranks running different
  // libyali-nccl set-ups decide "no YALI" here instead of taking different rounds (2: the id round
  // is an allreduce, comm.cc: IdMessage).
  // 3: RankRecord::nonBlocking (Session 32), which a rank of layout 2 would ignore, deciding the
  // hierarchical path where its peers decide NCCL only.
  static constexpr uint32_t kLayout = 3;
  uint32_t layout;
  CollectiveMask disabled;  // this rank's YALI_NCCL_DISABLE
  uint32_t registerYali;    // this rank's YALI_NCCL_REGISTER (0 or 1)
  // 1: this rank's comm is non-blocking, or NCCL made it in its background (comm.cc,
  // setUpYaliWhenReady). The hierarchical path's NCCL splits and legs assume a blocking comm (a
  // split of a non-blocking parent, and its legs' group ends, may return ncclInProgress), so a comm
  // spanning several nodes with such a rank is NCCL only on every rank (decideSetUp).
  uint32_t nonBlocking;
  char node[112];  // node identity (node_id.h), NUL-terminated, truncated to fit
};
static_assert(sizeof(RankRecord) == 128, "RankRecord is exchanged as 128 bytes");

// Whether YALI takes a communicator of nranks (2 to 8 GPUs); if not, *why says so. The same on
// every rank, so a comm it refuses skips the set-up's exchanges everywhere.
bool yaliTakes(int nranks, std::string* why);

RankRecord makeRecord(const std::string& node, CollectiveMask disabled, bool registerYali, bool nonBlocking = false);

// Where the ranks of a communicator live, from the records (the same on every rank). Nodes are
// numbered in the order of their lowest rank; a rank's local rank is its position among its node's
// ranks in rank order. Any placement is described: the hierarchical path reaches the ranks of a node
// and the ranks of one local index through NCCL splits, and permutes blocks where the global rank
// order asks for it (copyRuns).
struct NodeLayout {
  int nodes = 0;
  int localSize = 0;            // ranks per node when every node has as many, else 0 (uneven)
  std::vector<int> nodeOf;      // node index of each rank
  std::vector<int> localRankOf; // local rank of each rank
};
NodeLayout describeNodes(const std::vector<RankRecord>& records);

// The two splits that one rank of a hierarchical communicator makes, collective over the real comm:
// the node comm (its node's ranks, in rank order: local rank = rank in it) and the cross comm (the
// ranks of its local index on every node, in node order: node index = rank in it).
struct SplitKeys {
  int nodeColor, nodeKey, crossColor, crossKey;
};
SplitKeys splitKeys(const NodeLayout& layout, int rank);

struct SetUpVerdict {
  bool yali = false;           // make a YALI comm
  bool hierarchical = false;   // ... among each node's ranks, with NCCL across nodes (layout)
  NodeLayout layout;
  bool registerYali = false;   // ncclCommRegister also registers with YALI
  CollectiveMask disabled = 0;  // the collectives that stay on NCCL (the same on every rank)
  std::string why;             // when !yali: why NCCL only (for the log)
};

// The same answer on every rank, since every rank decides from the same records.
SetUpVerdict decideSetUp(const std::vector<RankRecord>& records);

// ---- Each collective call -------------------------------------------------------------------------

enum class Route {
  kYali,
  kNoYaliComm,   // this communicator has none (the set-up's verdict, or YALI init failed)
  kDisabled,     // YALI_NCCL_DISABLE names the collective
  kCustomOp,     // not a built-in op (ncclRedOpCreatePreMulSum, or one YALI does not know)
  kUnknownType,  // a data type YALI does not have
  kOpForType,    // an op YALI does not take for this type (avg of integers)
};

// The data type and op as the integers the program passed (an ncclDataType_t, an ncclRedOp_t). A
// program may pass any value, and one outside the enum's range, loaded as that enum, is undefined
// behaviour: decideRoute checks them as integers, before anything reads them as NCCL's enums.
struct CallShape {
  yaliCollective_t collective;
  int type;
  int op;  // ignored by collectives that do not reduce
};

Route decideRoute(bool hasYali, CollectiveMask disabled, const CallShape& call);
const char* routeReason(Route route);  // "YALI_NCCL_DISABLE", ...

// ---- Staging: a call YALI refused for this rank's buffers -------------------------------------------

// A call YALI refuses (yaliInvalidArgument) may go to NCCL only when the reason holds on every rank:
// when it lies in the call's scalars (count, type, op, root), which NCCL's semantics make the same
// everywhere. A reason in this rank's buffers (NULL, not aligned, not device memory of this GPU,
// too small, overlapping out of place) holds here alone: on NCCL this rank would wait for peers
// that wait in YALI. Such a call runs on YALI anyway, on copies of its buffers in a scratch of the
// comm's (intercept.cc: sortRefusal, stage), or inside a group on memory of the call's own, copied
// back at the group's end (stageInGroup).
//
// Where a staged call's copies of this rank's buffers lie in the staging scratch: the input the
// collective reads on this rank at offset 0, the output it writes here at recvOffset (disjoint, so
// that YALI sees no overlap), as many bytes as libyali's extentsOf says this rank reads and writes
// (core/pattern.h, the same table its own checks use); 0 for a buffer the rank does not use
// (Broadcast's and Scatter's non-root input, Reduce's and Gather's non-root output), which is then
// passed as NULL. `count` is the collective's own count argument; the sizes cannot overflow, since
// yaliAlgoInfo accepted the call.
struct StagingLayout {
  size_t sendBytes;
  size_t recvOffset;
  size_t recvBytes;
  size_t totalBytes;
};
StagingLayout stagingLayout(yaliCollective_t collective, int rank, int root, int nranks, size_t count,
                            size_t elementSize);

// ---- The hierarchical path: YALI inside each node, NCCL across nodes --------------------------------

// Which path a collective of a hierarchical communicator takes. Every input is the same on every
// rank of the comm (the call's arguments, whether it is in a capture, and the scratch size, which
// grows at the same calls everywhere), so the ranks never split between the paths. Whether the
// calling thread is inside ncclGroupStart/End is deliberately NOT an input: NCCL lets one rank make
// a call inside a group and another the same call outside one, and a route that depended on it sent
// the first rank flat while the second ran the hierarchical steps (both wait for ever). A
// hierarchical call made inside a group is instead issued, steps in order, at the outermost
// ncclGroupEnd (intercept.cc, routeHier: why that and not flat).
enum class HierRoute {
  kHierarchical,
  kNotHierarchical,  // a collective without a hierarchical form here (broadcast, alltoall, ...)
  kRefused,          // decideRoute said no (YALI_NCCL_DISABLE, op, type): its reason applies
  kTooSmall,         // nothing to move, or an AllReduce of fewer elements than localSize (no shard)
  kCaptureNoScratch, // in CUDA graph capture, and the scratch buffer it needs is not there yet
};
struct HierCall {
  yaliCollective_t collective;
  size_t count;        // the call's count argument
  size_t elementSize;
  bool capturing;
  size_t scratchBytes; // the scratch the comm has now
};
HierRoute decideHierRoute(const NodeLayout& layout, Route route, const HierCall& call);
const char* hierRouteReason(HierRoute route);
// The scratch bytes the call needs (0: none): AllGather and ReduceScatter permute nranks blocks of
// `count` elements through it; AllReduce needs none (its tail goes to NCCL, allReduceSplit).
size_t hierScratchBytes(const NodeLayout& layout, const HierCall& call);

// AllReduce of count elements over L ranks per node: each local rank owns `shard` elements of the
// first L * shard (YALI ReduceScatter, NCCL AllReduce of the shard across nodes, YALI AllGather);
// the `tail` (count % L elements) is one flat NCCL AllReduce. Both halves give every rank the same
// bits (one reduction per element, then copies), so no padding and no scratch are needed.
struct AllReduceSplit {
  size_t shard;
  size_t tail;
};
AllReduceSplit allReduceSplit(size_t count, int localSize);

// The scratch layout of AllGather and ReduceScatter: rank r's block at slot
// localRankOf[r] * nodes + nodeOf[r] (what a cross AllGather into each local rank's part and a
// node AllGather leave, and what a node ReduceScatter and a cross ReduceScatter consume). The
// program's buffer has rank r's block at slot r. A run copies `blocks` consecutive blocks from
// scratch slot `scratch` to program slot `program` (or back); runs cover every rank once, merged
// where both sides are consecutive.
struct CopyRun {
  int scratch, program, blocks;
};
int scratchSlot(const NodeLayout& layout, int rank);
std::vector<CopyRun> copyRuns(const NodeLayout& layout);

// The order of the hierarchical scratch's users across streams. Every step of a hierarchical
// AllGather or ReduceScatter reads or writes the comm's one scratch buffer on the call's stream,
// and neither library orders the copies into and out of it; torch issues one comm's all-gathers
// and reduce-scatters on two streams (FSDP2). So a call on another stream than the scratch's last
// user first waits for it, the way YALI orders a comm's launches (src/core/enqueue.cc): no event
// while the calls keep to one stream; from the first change of stream on, an event recorded after
// every user. A context is a capture (its id) or eager work (0), each ordered on its own (one
// event each: kSlots): within one capture the wait is a graph edge; eager users wait for the last
// eager one, whatever was captured in between; between contexts (a graph's replay and eager
// calls, two captures) one more event orders them once a user was captured (comm.cc:
// scratchBefore, Scratch::serial). Streams are compared by handle, and cudaStreamPerThread, one
// handle for another stream in each host thread, also by the thread: a user on it is on the last
// user's stream only if the same thread made both, and records the event at once (a later user on
// another thread could not mark it: its record would land on its own thread's stream).
class StreamOrder {
 public:
  static constexpr int kSlots = 2;  // [0]: eager users; [1]: the users of the latest capture
  struct Before {
    bool record = false;             // first change of stream: record the slot's event on recordOn
    const void* recordOn = nullptr;  // the last user's stream (nullptr: the legacy default stream)
    bool wait = false;               // the call's stream waits for the slot's event
    int slot = 0;                    // which event (the context's)
  };
  // Before a user on `stream` in `context`, made by `thread`; the caller records and waits as told.
  Before before(const void* stream, unsigned long long context,
                uint64_t thread = threadToken());
  // After the user: true when the event of slot *slot must be recorded on `stream` (every call of
  // the context once its streams changed, and every user on cudaStreamPerThread).
  bool after(const void* stream, unsigned long long context, int* slot = nullptr,
             uint64_t thread = threadToken());
  bool recordsEveryCall() const { return slots_[0].everyCall || slots_[1].everyCall; }
  // The last eager user's stream and thread, when there was one (the cross-context order marks it
  // once; not from another thread when it is cudaStreamPerThread).
  bool lastEager(const void** stream, uint64_t* thread = nullptr) const {
    *stream = slots_[0].last;
    if (thread != nullptr) *thread = slots_[0].thread;
    return slots_[0].have;
  }
  static bool perThread(const void* stream) { return stream == static_cast<const void*>(cudaStreamPerThread); }

 private:
  struct Slot {
    bool have = false;               // a user of the context came
    const void* last = nullptr;      // its stream
    uint64_t thread = 0;             // and the thread that made it (threadToken: cudaStreamPerThread)
    bool everyCall = false;          // the context changed streams: every user records
    unsigned long long context = 0;  // the capture's id (slot 1)
  };
  Slot& slotOf(unsigned long long context, int* index);
  Slot slots_[kSlots];
};

// ---- Group order: a key per communicator that every rank of it shares --------------------------

// A group's calls on comms that span several nodes wait for the group's end (intercept.cc, "Calls
// deferred to the outermost ncclGroupEnd") and run there comm by comm, in the order of these keys,
// each comm's calls in call order: NCCL orders a group's comms by a hash of theirs (group.cc,
// ncclGroupCommJoin, by commHash), so a program may make a group's calls on several comms in a
// different order on each rank, and every rank must still run them in one order. The key is made
// from what every rank of the comm passed to create it, so it needs no exchange:
//  - ncclCommInitRank, InitRankConfig, InitRankScalable, Grow: the unique ids' bytes;
//  - a split or shrink: the parent's key, the parent's count of splits and shrinks before it (every
//    rank of the parent makes them in one order, as NCCL requires) and the color (a shrink: -2);
//  - ncclCommInitAll: 0 (every rank in this process: one node, never a deferred call).
uint64_t commKeyOfIds(const void* ids, size_t bytes);
uint64_t childCommKey(uint64_t parentKey, uint64_t childIndex, int color);

// ---- Results ---------------------------------------------------------------------------------------

// YALI's results 0..7 are NCCL's. yaliTimeout (a peer never arrived, reported on every survivor)
// becomes ncclRemoteError: NCCL's word for "a peer failed or left", which is what a timeout says
// about the peer; ncclSystemError would blame a local OS call. Programs built against NCCL < 2.30
// know no ncclTimeout, so it is not used even where the header has it.
ncclResult_t toNcclResult(yaliResult_t result);

// Power-of-2 size class of a message, for logging once per class: floor(log2(bytes)), 0 for 0.
int sizeClass(size_t bytes);

}  // namespace yali::nccl_abi
