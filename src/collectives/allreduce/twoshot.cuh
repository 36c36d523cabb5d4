// Two-shot AllReduce (reduce-scatter, then all-gather) for medium and large messages, and the
// rooted Broadcast and Reduce built on its protocol (below: "Rooted shapes").
//
// The message is cut into tiles of nranks * slotElems elements. Within a tile, rank d owns shard d
// (a 16-byte-aligned run of q elements). The work runs in P independent pipelines: each block, or
// each of its args.teamsPerBlock teams of warps (block_ops.cuh: Team), is one. Pipeline p handles
// tiles p, p + P, ...; its k-th tile is its step k, using buffers of parity k & 1. The parts of a
// step:
//   push(k)    - for every other rank d, copy our part of shard d into d's
//                staging[parity][our rank][slot p] (NVLink writes), then publish
//                pushFlags[p][our rank] = flagValue(epoch, k) on d.
//   reduce(k)  - wait until every other rank's pushFlags[p][s] on our window reaches that value;
//                reduce our own input and the n-1 staged pieces of our shard in rank order 0..n-1
//                into our output and into result[parity][slot p]; publish resultFlags[p][our rank]
//                on every other rank.
//   pull(k)    - wait for every other rank's resultFlags[p][s]; copy their result[parity][slot p]
//                into our output (NVLink reads).
// Two teams per block give the SM a second pipeline to feed the links while one waits at a barrier,
// a release or a flag; a pipeline's phases themselves stay in order. (Measured from 64 MB up, at 32
// blocks: +0-5 %, much less than 64 blocks give; docs/PERF.md "Teams".)
// Software pipeline: push(k+1) is issued between reduce(k) and pull(k), so the wait for the peers'
// results of step k overlaps our next writes:  push(0) | reduce(0) push(1) pull(0) | reduce(1)
// push(2) pull(1) | ...
// Each rank reduces only its own shard, so all ranks hold the same bits.
//
// Variant twoshot_direct (kIntoOutputs), for outputs registered on every rank (yaliCommRegister;
// DeviceArgs::peerRecv): reduce(k) stores the reduced shard straight into every peer's output, so
// pull(k) only waits for the owners' flags and nothing is copied out. Per message byte the SMs
// load and store (n-1)/n less than twoshot_push, and every NVLink transfer stays a write. It starts
// with enterWithTag (block_ops.cuh), so that it runs only when every rank made the same call with
// registered outputs; the rest of the exchange is twoshot_push's, and writing into a peer's output
// in reduce(k) is safe because that peer's push(k) of this launch came first. (Measured at 2 GPUs
// from 16 MB: +3-7 % over the staged path; docs/PERF.md "Registered buffers".)
//
// Variant twoshot_push (kByWrites): every NVLink transfer is a write. reduce(k) also stores the
// reduced shard into every peer's gather[parity][our rank][slot b] in the same pass, and pull(k)
// becomes a local copy out of our own gather area once the owners' flags arrive. It trades NVLink
// reads for local HBM traffic. Reuse of gather parity k & 1: an owner writes it at reduce(k+2)
// after seeing our push(k+2), which we issue after our copy-out of step k.
//
// Rooted shapes (kShape, twoshot_rooted.cu): Broadcast and Reduce as twoshot_push with the same
// tiles, shards, steps and flags, only fewer bytes moved, so that the root's NVLink ports carry
// 2(n-1)/n of the message instead of (n-1) times it (a rooted exchange: the root alone sends or
// receives every piece):
//   Reduce     (reduce_twoshot): push(k) as above (a reduce-scatter); reduce(k) stores the reduced
//              shard into the root's gather[parity][our rank][slot p] only (the root: into its
//              output); pull(k) waits for every owner's flag as above, and only the root copies
//              out. Non-roots have no output (DeviceArgs::recv is null: nothing is written there,
//              not even the poison fill of a failed comm).
//   Broadcast  (broadcast_twoshot, on bytes): push(k) copies data only on the root (a scatter of
//              the root's shards into their owners' staging); every other rank publishes its push
//              flag alone. reduce(k) "reduces" one source, the root's piece (the root: its own
//              input), into our output and every peer's gather area (an all-gather); pull(k) as
//              twoshot_push. Non-roots never read their input.
// Every rank still publishes and waits for every flag of twoshot_push, in the same order, so the
// reuse argument below holds unchanged: a non-root's flag-only push(k+2) is what tells an owner
// that the rank has copied step k out of its gather area, exactly as a push with data does.
//
// Reuse (why two parities suffice): push(k+2) writes staging parity k & 1 after our wait in
// pull(k), which saw the owner's result flag of step k: the owner had finished reading that
// staging. An owner overwrites result parity k & 1 in reduce(k+2) after seeing every peer's
// push(k+2), which each issued after its pull(k). Across launches: a launch's first push comes
// after the previous launch ended, which required every peer's last result flag (so their reads of
// our pushes were done), and our first result write waits for the peers' first pushes of the new
// launch (so their pulls of the old one were done). So block and team counts, slot sizes and
// algorithms may change from launch to launch without a hazard.
#pragma once

#include "collectives/common/block_ops.cuh"
#include "collectives/common/device.cuh"
#include "collectives/common/tile_split.h"

namespace yali {

// 512 threads at most: it caps the registers at 128 per thread, so that one 512-thread block fits
// an SM's register file (without the bound some instantiations take up to 147 and could launch
// only 384 threads). The cost: 4-16 bytes of spills in the kAvg instantiations (its division's
// slow path), which ptxas -warn-spills reports. The selector clamps the tuning's thread count to
// what the kernels allow.
constexpr int kTwoshotMaxThreads = 512;

// Where the all-gather puts the reduced shards.
enum class Gather : int {
  kByReads = 0,      // twoshot: our result area, read by the peers
  kByWrites = 1,     // twoshot_push: every peer's gather area, copied out by the peer
  kIntoOutputs = 2,  // twoshot_direct: every peer's (registered) output
};

// Which collective the two-shot exchange computes (above: "Rooted shapes").
enum class Shape : int {
  kAllReduce = 0,  // twoshot, twoshot_push, twoshot_direct
  kReduce = 1,     // reduce_twoshot: the reduced shards go to the root only
  kBroadcast = 2,  // broadcast_twoshot: the root's shards are scattered, then all-gathered
};

template <typename T, RedOp kOp, Gather kGather, Shape kShape>
__device__ __forceinline__ void twoshot(const DeviceArgs& args, const LaunchInfo& info) {
  static_assert(kShape == Shape::kAllReduce || kGather == Gather::kByWrites,
                "the rooted shapes are twoshot_push's: gather by writes");
  const uint64_t epoch = info.epoch;
  if constexpr (kGather == Gather::kIntoOutputs) {
    if (!enterWithTag(args, args.layout.directFlags, info, kPhaseTwoshotEnter)) return;
  }
  const int n = args.nranks;
  const int me = args.rank;
  const WindowLayout& L = args.layout;
  const size_t slotElems = args.slotBytes / sizeof(T);
  const size_t tileElems = slotElems * n;
  const size_t tiles = (args.count + tileElems - 1) / tileElems;
  const T* send = static_cast<const T*>(args.send);
  T* recv = static_cast<T*>(args.recv);
  const Team team = teamOf(args.teamsPerBlock);
  const size_t slotOffset = static_cast<size_t>(team.id) * args.slotBytes;

  // Geometry of step k: tile team.id + k * team.count.
  auto stepAt = [&](uint32_t k) {
    return tileSplit(team.id + static_cast<size_t>(k) * team.count, tileElems, args.count, n, sizeof(T));
  };
  auto staging = [&](char* window, uint32_t k, int sender) {
    return window + L.staging + (static_cast<size_t>(k & 1) * n + sender) * L.stagingBytes + slotOffset;
  };
  auto resultArea = [&](char* window, uint32_t k) {
    return window + L.result + (k & 1) * L.stagingBytes + slotOffset;
  };
  auto gatherArea = [&](char* window, uint32_t k, int owner) {
    return window + L.gather + (static_cast<size_t>(k & 1) * n + owner) * L.stagingBytes + slotOffset;
  };
  auto push = [&](uint32_t k) {
    const TileSplit st = stepAt(k);
    // Broadcast: only the root has data to push; the others publish the flag alone.
    if (kShape != Shape::kBroadcast || me == args.root) {
      for (int i = 1; i < n; ++i) {
        const int d = (me + i) % n;  // start with the next rank: spreads the load over peers
        copyElems(team, reinterpret_cast<T*>(staging(args.peerWindows[d], k, me)),
                  send + st.start + st.begin(d), st.length(d));
      }
    }
    signalPeers(team, args, L.pushFlags, flagValue(epoch, k));
  };

  const size_t id = static_cast<size_t>(team.id);
  const uint32_t steps = id < tiles ? static_cast<uint32_t>((tiles - id + team.count - 1) / team.count) : 0;
  if (steps > 0) push(0);
  for (uint32_t k = 0; k < steps; ++k) {
    const TileSplit st = stepAt(k);
    const uint64_t value = flagValue(epoch, k);

    // reduce(k): our shard, in rank order; our own piece comes straight from the input.
    if (!waitPeers(team, args, L.pushFlags, value, kPhasePushWait)) return;
    const T* src[kMaxRanks];
    if constexpr (kShape == Shape::kBroadcast) {  // one source: the root's piece of our shard
      src[0] = me == args.root ? send + st.start + st.begin(me)
                               : reinterpret_cast<const T*>(staging(args.window, k, args.root));
    } else {
#pragma unroll
      for (int s = 0; s < kMaxRanks; ++s) {  // unrolled: src stays in registers
        src[s] = (s == me) ? send + st.start + st.begin(me)
                           : reinterpret_cast<const T*>(staging(args.window, k, s));
      }
    }
    // Destinations: our output, then our result area (by reads), every peer's gather area (by
    // writes) or every peer's output; Reduce: the root's gather area (the root: its output).
    T* dst[kMaxRanks];
    if constexpr (kShape == Shape::kReduce) {
      dst[0] = me == args.root ? recv + st.start + st.begin(me)
                               : reinterpret_cast<T*>(gatherArea(args.peerWindows[args.root], k, me));
    } else {
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d) {
        const int peer = (me + d) % n;
        if constexpr (kGather == Gather::kIntoOutputs) {
          dst[d] = d == 0 ? recv + st.start + st.begin(me)
                          : static_cast<T*>(args.peerRecv[peer]) + st.start + st.begin(me);
        } else if constexpr (kGather == Gather::kByWrites) {
          dst[d] = d == 0 ? recv + st.start + st.begin(me)
                          : reinterpret_cast<T*>(gatherArea(args.peerWindows[peer], k, me));
        } else {
          dst[d] = d == 0 ? recv + st.start + st.begin(me)
                          : reinterpret_cast<T*>(resultArea(args.window, k));
        }
      }
    }
    const int ndst = kShape == Shape::kReduce ? 1 : kGather == Gather::kByReads ? 2 : n;
    reduceElems<T, kOp>(team, dst, ndst, src, kShape == Shape::kBroadcast ? 1 : n, st.length(me));
    signalPeers(team, args, L.resultFlags, value);

    if (k + 1 < steps) push(k + 1);
    else allowNextGrid();

    // pull(k): every other rank's reduced shard (from its result area, or from our gather area
    // where it pushed it; twoshot_direct's owners stored it into our output already).
    if (!waitPeers(team, args, L.resultFlags, value, kPhaseResultWait)) return;
    // Reduce: only the root has an output to copy into; the others waited for the flags above
    // all the same (the owners' reads of our pushes into their staging are done).
    if constexpr (kGather != Gather::kIntoOutputs) {
      if (kShape != Shape::kReduce || me == args.root) {
        for (int i = 1; i < n; ++i) {
          const int s = (me + i) % n;
          const char* from = kGather == Gather::kByWrites ? gatherArea(args.window, k, s)
                                                          : resultArea(args.peerWindows[s], k);
          copyElems(team, recv + st.start + st.begin(s), reinterpret_cast<const T*>(from), st.length(s));
        }
      }
    }
  }
}

template <typename T, RedOp kOp, Gather kGather, Shape kShape = Shape::kAllReduce>
__global__ void __launch_bounds__(kTwoshotMaxThreads) twoshotKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<sizeof(T)>(args, [&](const LaunchInfo& info) { twoshot<T, kOp, kGather, kShape>(args, info); });
}

}  // namespace yali
