// Point-to-point transfers (yali.h: yaliSend, yaliRecv): the kernel that runs a group's sends and
// receives on one comm as one launch, and the host's plan of its blocks. No registry row: these
// are not collectives (no epoch, no pattern of pieces, only two ranks per transfer), and the
// selector has nothing to choose.
//
// The protocol, per ordered pair (s -> d) and channel c (a ring of kP2PSlots slots in d's window,
// device_state.h: WindowLayout::p2pRing): the slots of the ring are numbered g = 0, 1, ... for the
// comm's life; slot g lives in place g % kP2PSlots and holds one chunk (p2pChunkBytes). Sender s,
// for its next slot g:
//   1. waits until d's credit for place g % kP2PSlots of ring (s, c), in s's window, reaches
//      g - kP2PSlots + 1 (d has consumed the slot that last used this place; a credit per place,
//      so that the two teams of d's lane may finish their slots in either order);
//   2. pushes the chunk into the place, at the skew of its source address (so both ends of the
//      copy are equally aligned), with its team (a lane's block is kP2PTeams teams that take its
//      slots in turn);
//   3. team barrier; thread 0 writes the slot's shape (the call's bytes, the skew) and publishes
//      ready = g + 1 (st.release.sys: cumulative over the block's stores, device.cuh: publish).
// Receiver d, for its next slot g of (s, c): observes ready >= g + 1 (acquire), checks that the
// sender's call moves the bytes its own call does (else kFailP2PBytes on both, recordFailure),
// copies the chunk out with its team, team barrier, and posts the place's credit g + 1 into s's
// window with a relaxed store: the barrier orders the team's reads of the slot before it, and the
// credit publishes no data (a release would wait for the team's stores to dst to drain). ready and
// credit only grow, so a stale value never satisfies a wait.
// A small call's chunks take the LL route instead (YALI_P2P_LL_BYTES: p2pTravelsAsLL, below): step
// 2 writes LL packets into the place's LL slot, step 3 is its header packet, with no barrier and no
// release; the receiver waits for either announcement, polls each packet, then credits with a
// relaxed store (no release: the packets are self-validating and nothing else is published; the
// team barrier before the store orders every thread's reads of the packets before it, so the sender
// cannot overwrite a packet still to be read). Stale packets: p2pLLFlag.
// Which slots belong to which call: both ranks count every pair's slots alike (LocalState::p2pSent
// and p2pReceived), because matched calls move the same bytes and chunk i of a call goes to channel
// i % p2pChannels. One block (a lane) runs one (peer, direction, channel) for all of the launch's
// calls in order: two blocks on one ring would give credits out of order.
// Progress: within a launch every lane runs at once (the rings per pair keep a launch within
// kMaxCtas blocks, p2pRingsPerPair, so that its blocks are resident together; fewer where ranks
// share a GPU); a send never waits for anything but its receiver's consumption of the same ring,
// which the receiver's lane makes as soon as it runs. So a group whose every transfer is matched by a
// call in the peer's launch completes whatever the sizes, as NCCL's does.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "collectives/common/device_state.h"

namespace yali {

constexpr int kP2PThreads = 512;
// Blocks of the kernel one multiprocessor holds at once (its __launch_bounds__: at most 64
// registers per thread), for the lane cap where ranks share a GPU (comm.cc: applyGpuSharing).
constexpr int kP2PBlocksPerSM = 2;
// Teams of a lane's block (block_ops.cuh: Team), taking the lane's chunks in turn: while one team's
// thread 0 waits for its release to drain over NVLink (the step's fixed cost), the other copies.
constexpr int kP2PTeams = 2;
// The rings per ordered pair a comm lays out and uses: YALI_P2P_CHANNELS, but no more than keep a
// launch that talks to every peer both ways within kMaxCtas blocks (2 x (nranks - 1) x rings):
// every lane of a launch must be resident at once (above), beside whatever else runs on the GPU.
// 32 at 2 ranks, 16 at 3, 10 at 4, 4 at 8 (with the default 32).
inline int p2pRingsPerPair(int64_t setting, int nranks) {
  if (setting <= 0) return 0;
  const int fit = nranks > 1 ? kMaxCtas / (2 * (nranks - 1)) : static_cast<int>(setting);
  const int rings = fit < 1 ? 1 : fit;
  return setting < rings ? static_cast<int>(setting) : rings;
}
// The smallest chunk (the last of a call may be shorter).
constexpr uint64_t kP2PMinChunk = 4096;

// Small calls travel as LL packets (ll_packets.cuh: {data, flag, data, flag}, 8 payload bytes per
// 16-byte store) in the ring place's LL slot (WindowLayout::p2pLL) instead of its data slot: the
// receiver polls the packets themselves, so the sender needs no release (no wait for its NVLink
// stores to drain) and the receiver no separate announcement. A call of at most
// WindowLayout::p2pLLBytes (YALI_P2P_LL_BYTES, a setting every rank agrees on) goes so, every chunk
// of it, in chunks of kP2PLLChunkBytes; the sender's LL slot header says so, so the receiver never
// has to guess (p2p.cu: the receiver waits for either announcement).
constexpr uint64_t kP2PLLChunkBytes = kP2PMinChunk;
// An LL slot: the header packet (the sender's shape, as P2PSlotFlag::shape) then one packet per 8
// bytes of the chunk.
constexpr uint64_t kP2PLLSlotBytes = 16 * (1 + kP2PLLChunkBytes / 8);
YALI_HOST_DEVICE inline bool p2pTravelsAsLL(uint64_t bytes, uint64_t llBytes) { return bytes <= llBytes; }
// The LL route's bound for a comm with `channels` rings per pair: the setting, or where it is -1
// the calls whose chunks give each team of every ring at most kP2PLLChunksPerTeam: a team's LL
// chunks follow one another (each polled, stored and credited before the next), and two per team
// fill a ring's kP2PSlots places once, so no place is reused within the call. On 2 H200s in graphs
// (PERF.md, Session 42, relaxed credits): 512 KB as LL 11.1 us against 12.1 on the data slots; 1 MB
// (four per team) 16.1 against 14.2. With the credit still a release (Session 41), one per team was
// the best.
constexpr int kP2PLLChunksPerTeam = 2;
static_assert(kP2PTeams * kP2PLLChunksPerTeam <= kP2PSlots, "an LL call's chunks use each place of a ring once");
inline int64_t p2pLLBytesFor(int64_t setting, int channels) {
  return setting >= 0 ? setting
                      : static_cast<int64_t>(channels) * kP2PTeams * kP2PLLChunksPerTeam *
                            static_cast<int64_t>(kP2PLLChunkBytes);
}
// The packets' flag for slot `seq`: never 0 (a cleared packet's), and different for any two slots
// less than 2^31 - 1 apart. The receiver does not clear what it read: the LL slot keeps older
// chunks' packets (a shorter chunk leaves its predecessors' tail), whose flags are those of
// earlier slots of the same place. So that none of them can carry the flag of the slot being read,
// the receiver clears the whole LL slot of a place once every kP2PLLCleanPeriod slots of its ring
// (p2pClearsLLSlot), whichever route that slot took, before it credits the slot with release: a
// packet is then never more than kP2PLLCleanPeriod slots older than the slot read, well inside the
// flag's period. Before this, the receiver cleared every packet it read, and needed a release (a
// fence over NVLink) on every credit to order the clearing before the sender's next packets: 0.5
// to 1.2 us of every small send in graphs (PERF.md, Session 41).
YALI_HOST_DEVICE inline uint32_t p2pLLFlag(uint64_t seq) { return static_cast<uint32_t>(seq % 0x7fffffffu) + 1; }
constexpr uint64_t kP2PLLCleanPeriod = uint64_t{1} << 30;
static_assert(kP2PLLCleanPeriod % kP2PSlots == 0 && kP2PLLCleanPeriod + kP2PSlots < 0x7fffffffu,
              "each place cleared once a period; the oldest packet's flag is not the current one");
// Whether the receiver clears the LL slot of slot `seq`'s place after consuming it: the first slot
// of each place in every period (slots 0-3 of a new comm, whose window starts zeroed, too).
YALI_HOST_DEVICE inline bool p2pClearsLLSlot(uint64_t seq) { return seq % kP2PLLCleanPeriod < kP2PSlots; }

// The chunk of a call of `bytes` (every ring's slot holds one): an LL call's is kP2PLLChunkBytes;
// another's spreads its bytes over every team of every ring (channels x kP2PTeams chunks), in 4 KB
// multiples, at least kP2PMinChunk and at most a slot. Where one chunk per team would exceed
// kP2PPipelineChunk, the chunks are halved, down to kP2PPipelineChunk, so that each team has two:
// the receiver copies the first out while the second arrives (a team's one chunk is written, then
// copied out, nothing overlapping). Smaller chunks cost a handshake each: 16 and 32 KB slots were
// slower from 2 MB up. On 2 H200s (PERF.md, Session 42): 8 MB in 64 KB chunks 37.6 us in graphs
// against 38.7 in 128 KB ones, 39.2 against 40.1 eager. From the call's bytes and the comm's
// agreed settings alone, so sender and receiver cut it alike (chunk i on ring i % channels).
constexpr uint64_t kP2PPipelineChunk = 64 << 10;
YALI_HOST_DEVICE inline uint64_t p2pRoundUpChunk(uint64_t bytes, uint64_t parts) {
  return ((bytes + parts - 1) / parts + kP2PMinChunk - 1) / kP2PMinChunk * kP2PMinChunk;
}
YALI_HOST_DEVICE inline uint64_t p2pChunkBytes(uint64_t bytes, int channels, uint64_t slotBytes, uint64_t llBytes) {
  if (p2pTravelsAsLL(bytes, llBytes)) return kP2PLLChunkBytes;
  const uint64_t parts = static_cast<uint64_t>(channels) * kP2PTeams;
  uint64_t chunk = p2pRoundUpChunk(bytes, parts);
  if (chunk > kP2PPipelineChunk) {
    const uint64_t two = p2pRoundUpChunk(bytes, 2 * parts);
    chunk = two > kP2PPipelineChunk ? two : kP2PPipelineChunk;
  }
  if (chunk < kP2PMinChunk) chunk = kP2PMinChunk;
  return chunk < slotBytes ? chunk : slotBytes;
}

// The lanes of a launch of `ops` on `rank` (one per block), into lanes[0..return) and *copyLanes:
// for each peer with sends (receives), min(channels, the most chunks of one of them) lanes, then
// the copy lanes (a share of every copy to self each). 0 when there is nothing to move.
// `channels`: the rings per pair that the comm's transfers use (yaliComm::p2pChannels).
int planP2PLanes(const std::vector<P2POp>& ops, int channels, const WindowLayout& layout, P2PLane* lanes,
                 uint32_t* copyLanes);

// Launches the kernel for `ops` with the planned lanes, `frame` carrying the comm's rank, windows,
// state and timeout (DeviceArgs: everything but the collective's fields).
cudaError_t launchP2P(const DeviceArgs& frame, const std::vector<P2POp>& ops, int channels, const P2PLane* lanes,
                      int nlanes, uint32_t copyLanes, bool programmatic, cudaStream_t stream);

// Loads the kernels' module now (comm set-up: registry.h, maxLaunchableThreads, says why).
cudaError_t loadP2PKernels();

}  // namespace yali
