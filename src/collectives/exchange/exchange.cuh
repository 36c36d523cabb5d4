// The exchange kernels: every collective but AllReduce, as a pattern of pieces. A piece is
// DeviceArgs::pieceBytes bytes that one rank sends to one receiver; the host describes each rank's
// part as data (DeviceArgs::sendTo, recvFrom and the offset masks: core/pattern.cc fills them per
// collective), and three kernels move the pieces:
//   exchangeLL      small messages: each piece as LL packets into the receiver's LL area, one step,
//                   no barrier (reduceScatter_ll, allgather_ll, ...);
//   exchangeStaged  any size: each piece cut into slots, pipelined through the receiver's staging
//                   area with a flag per slot and a credit back (*_staged);
//   exchangeDirect  registered outputs: each piece written straight into the receiver's output
//                   (*_direct).
// Receiving either copies each piece to its place (AllGather, Broadcast, Gather, Scatter,
// AlltoAll: instantiated once, on bytes) or reduces all pieces, in rank order 0..n-1, into the
// output (ReduceScatter, Reduce: one instantiation per type and op). Our own piece moves locally.
//
// The launch covenant, which every kernel of every collective keeps and the reuse of the window's
// epoch-parity areas (LL packets, oneshot_pull's copy-in) relies on: no rank's launch e ends
// before every peer has started its launch e. Then a rank that writes parity p again at launch
// e + 2 does so after its launch e + 1 ended, i.e. after every peer started e + 1, i.e. after every
// peer's launch e (the last reader of parity p) ended. All-to-all patterns keep it by receiving
// from every peer. Rooted patterns leave some pairs silent (a Broadcast receiver hears only the
// root), so their launches also exchange arrival flags (DeviceArgs::arrive): block 0 publishes
// arriveFlags[rank] = flagValue(epoch, 0) on every peer when it starts, and waits for every
// peer's before it ends.
//
// The staged exchange keeps a second rule, the one two-shot keeps too: a launch ends only after
// every receiver has consumed every piece we pushed into its staging (the drain below), so the
// next launch, of any algorithm, may push into staging at once.
#pragma once

#include "collectives/common/block_ops.cuh"
#include "collectives/common/device.cuh"
#include "collectives/common/ll_packets.cuh"

namespace yali {

__device__ __forceinline__ bool hasBit(uint32_t mask, int i) { return (mask >> i) & 1u; }

// Where pieces start (device_state.h: the pattern's masks).
__device__ __forceinline__ size_t srcOffset(const DeviceArgs& a, int d) {
  return hasBit(a.srcByRank, d) ? static_cast<size_t>(d) * a.pieceBytes : 0;
}
__device__ __forceinline__ size_t dstOffset(const DeviceArgs& a, int s) {
  return hasBit(a.dstByRank, s) ? static_cast<size_t>(s) * a.pieceBytes : 0;
}
__device__ __forceinline__ size_t peerDstOffset(const DeviceArgs& a, int d) {
  return hasBit(a.peerDstByRank, d) ? static_cast<size_t>(a.rank) * a.pieceBytes : 0;
}

// The arrival flags of the launch covenant (above): publish at the start, wait at the end, by
// block 0's first nranks threads. The end's wait is followed by a block barrier, so that thread 0
// leaves the launch (leaveLaunch) only after it.
__device__ __forceinline__ void publishArrival(const DeviceArgs& args, uint64_t epoch) {
  if (!args.arrive || blockIdx.x != 0) return;
  const int peer = threadIdx.x;
  if (peer < args.nranks && peer != args.rank)
    publish(reinterpret_cast<uint64_t*>(args.peerWindows[peer] + args.layout.arriveFlags) + args.rank,
            flagValue(epoch, 0));
}

__device__ __forceinline__ void awaitArrivals(const DeviceArgs& args, uint64_t epoch) {
  if (!args.arrive || blockIdx.x != 0) return;
  const int peer = threadIdx.x;
  if (peer < args.nranks && peer != args.rank)
    waitAtLeast(args, reinterpret_cast<const uint64_t*>(args.window + args.layout.arriveFlags) + peer,
                flagValue(epoch, 0), kPhaseExchangeArrive);
  __syncthreads();
}

// ---- exchangeLL -------------------------------------------------------------------------------------
//
// Sender s's packets for receiver d go to d's LL area, slot [epoch & 1][s]; packet p carries bytes
// [8p, 8p + 8) of the piece. Thread t of the grid handles packets t, t + stride, ... in both
// phases: it sends packet p of every piece, then receives packet p of every piece. So in place
// (a piece's output overlapping an input piece at the same offset: ReduceScatter's and Gather's
// in-place layouts) packet p of the input is read before packet p of the output is written, by the
// same thread. Reuse of the LL slots across launches: the covenant above (the same argument as
// one-shot AllReduce's, allreduce/oneshot_ll.cuh).
template <typename T, RedOp kOp, bool kReduce>
__device__ __forceinline__ void exchangeLL(const DeviceArgs& args, uint64_t epoch) {
  const uint32_t flag = static_cast<uint32_t>(epoch);
  const int parity = static_cast<int>(epoch & 1);
  const int n = args.nranks;
  const int me = args.rank;
  const WindowLayout& L = args.layout;
  const size_t count = args.pieceBytes / sizeof(T);  // elements per piece
  const size_t packets = (args.pieceBytes + 7) / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  publishArrival(args, epoch);

  const size_t mySlot = L.ll + (static_cast<size_t>(parity) * n + me) * L.llSlotBytes;
  for (size_t p = first; p < packets; p += stride) {
    for (int i = 0; i < n; ++i) {
      const int d = (me + i) % n;  // from the next rank on: spreads the stores over the links
      if (!hasBit(args.sendTo, d)) continue;
      const uint2 payload = loadPayload8(reinterpret_cast<const T*>(send + srcOffset(args, d)), p, count);
      storeVolatile16(reinterpret_cast<uint4*>(args.peerWindows[d] + mySlot) + p, makePacket(payload, flag));
    }
  }
  allowNextGrid();

  const uint4* area = reinterpret_cast<const uint4*>(args.window + L.ll + static_cast<size_t>(parity) * n * L.llSlotBytes);
  const size_t slotPackets = L.llSlotBytes / sizeof(uint4);
  WaitGuard guard(args);
  bool ok = true;
  for (size_t p = first; ok && p < packets; p += stride) {
    if constexpr (kReduce) {
      // recvFrom holds every rank (or none: Reduce's other ranks): the reduction runs in rank
      // order, the same bits everywhere.
      if (args.recvFrom == 0) break;
      PayloadAccumulator<T, kOp> acc;
      for (int s = 0; s < n; ++s) {
        uint2 payload;
        if (!waitPacket(area + s * slotPackets + p, flag, guard, kPhaseExchangeLL, &payload)) {
          ok = false;
          break;
        }
        if (s == 0) acc.start(payload);
        else acc.add(payload);
      }
      if (ok) storePayload8(reinterpret_cast<T*>(recv + 0), p, count, acc.result(n));
    } else {
      for (int s = 0; s < n; ++s) {
        if (!hasBit(args.recvFrom, s)) continue;
        uint2 payload;
        if (!waitPacket(area + s * slotPackets + p, flag, guard, kPhaseExchangeLL, &payload)) {
          ok = false;
          break;
        }
        storePayload8(reinterpret_cast<T*>(recv + dstOffset(args, s)), p, count, payload);
      }
    }
  }
  // A failed wait has recorded the failure; every later wait of this launch gives up at once.
  awaitArrivals(args, epoch);
}

// ---- exchangeStaged ---------------------------------------------------------------------------------
//
// Each piece is cut into slots of S = DeviceArgs::slotBytes bytes (a 256-byte multiple); slot g of
// every piece is global step g. Block b is pipeline b of P = gridDim.x and handles steps b, b + P,
// ...; its j-th is its local step j, using staging parity j & 1. Its parts:
//   push(j)    - for every receiver d (sendTo, not us): wait for d's credit of step j - 2 (j >= 2:
//                d has consumed our pieces of parity j & 1), copy slot g of our piece for d into
//                d's staging[j & 1][our rank][slot b], then publish pushFlags[b][our rank] =
//                flagValue(epoch, j) on d.
//   consume(j) - wait until every sender s (recvFrom, not us) has published pushFlags[b][s] on our
//                window; copy each sender's slot to recv + dstOffset(s) + g*S (our own from our
//                input), or reduce all of them in rank order into recv + g*S; then publish our
//                credit resultFlags[b][our rank] = flagValue(epoch, j) on every sender.
// Who runs them: in the copying collectives a rank that both pushes and consumes splits each block
// into two teams of whole warps (block_ops.cuh: Team), the first running push(0), push(1), ... and
// then the drain (wait for every receiver's credit of our last step), the second consume(0),
// consume(1), ...; the pushes' NVLink stores then stay in flight while the other warps make the
// local copies (made one after the other in one block, the links idled during every local copy:
// AllGather, Broadcast and Scatter out of place ran 20 % slower than in place at 1 GB on 2 H200s;
// split, AllGather 1 GB out of place went from 235 to 273 GB/s busBW, docs/PERF.md Session 37).
// ReduceScatter lost by the split (206 to 178 GB/s, with the consume team's loads four vectors
// deep or one), so the reducing collectives do not split; nor does a rank that only pushes or only
// consumes, or a block too small to split: there the whole block runs push(0), then for j >= 1
// push(j) and consume(j - 1), then consume(last) and the drain.
// A receiver's credits come in step order, so the last one covers all: when the launch ends (both
// teams have ended), every receiver has consumed everything we pushed (the rule above), and across
// launches staging needs nothing more. Progress: push(j) waits for a credit the receiver gives in
// its consume(j - 2), which waits only for our push(j - 2); consume(j) waits for the senders'
// push(j); neither depends on a later step of anyone, whether the ranks split or not.
// In place: consume(j) reads input slot g and writes output slot g, each element's input before its
// output, by one team; a push reads other input (ReduceScatter's output is our own piece of the
// input, which no push reads; AllGather's input is our piece of the output, which the own-piece
// copy skips and no consume writes; in the rooted collectives the root's own copy is skipped and no
// other input is written).
template <typename T, RedOp kOp, bool kReduce>
__device__ __forceinline__ void exchangeStaged(const DeviceArgs& args, uint64_t epoch) {
  const int n = args.nranks;
  const int me = args.rank;
  const WindowLayout& L = args.layout;
  const size_t slot = args.slotBytes;
  const size_t steps = (args.pieceBytes + slot - 1) / slot;
  const size_t pipelines = gridDim.x;
  const size_t id = blockIdx.x;
  const uint32_t mine = id < steps ? static_cast<uint32_t>((steps - id + pipelines - 1) / pipelines) : 0;
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  const uint32_t receivers = args.sendTo & ~(1u << me);
  const uint32_t senders = args.recvFrom & ~(1u << me);
  publishArrival(args, epoch);

  // The teams: pipeline b's flags rows are the block's (id b) in both; barrier and shared words by
  // index (0: pushes, 1: consumes).
  const int half = static_cast<int>(blockDim.x) / 2;
  const bool split = !kReduce && receivers != 0 && args.recvFrom != 0 && half >= 64 && half % 32 == 0;
  const int index = split && static_cast<int>(threadIdx.x) >= half ? 1 : 0;
  const Team team = split ? Team{static_cast<int>(id), static_cast<int>(pipelines), index, half,
                                 static_cast<int>(threadIdx.x) - index * half}
                          : wholeBlock();
  const bool pushes = receivers != 0 && (!split || index == 0);
  const bool consumes = !split || index == 1;

  auto offsetOf = [&](uint32_t j) { return (id + static_cast<size_t>(j) * pipelines) * slot; };
  auto lengthOf = [&](uint32_t j) { return min(slot, args.pieceBytes - offsetOf(j)); };
  auto staging = [&](char* window, uint32_t j, int sender) {
    return window + L.staging + (static_cast<size_t>(j & 1) * n + sender) * L.stagingBytes + id * slot;
  };
  auto push = [&](uint32_t j) {
    if (j >= 2 && !waitPeers(team, args, L.resultFlags, flagValue(epoch, j - 2), kPhaseExchangeCredit, receivers))
      return false;
    const size_t off = offsetOf(j), len = lengthOf(j);
    for (int i = 1; i < n; ++i) {
      const int d = (me + i) % n;  // from the next rank on: spreads the stores over the links
      if (hasBit(receivers, d)) copyBytes(team, staging(args.peerWindows[d], j, me), send + srcOffset(args, d) + off, len);
    }
    signalPeers(team, args, L.pushFlags, flagValue(epoch, j), receivers);
    return true;
  };
  auto consume = [&](uint32_t j) {
    if (!waitPeers(team, args, L.pushFlags, flagValue(epoch, j), kPhaseExchangePieces, senders)) return false;
    const size_t off = offsetOf(j), len = lengthOf(j);
    if constexpr (kReduce) {
      if (hasBit(args.recvFrom, me)) {  // every rank's piece, ours from the input
        const T* src[kMaxRanks];
#pragma unroll
        for (int s = 0; s < kMaxRanks; ++s)  // unrolled: src stays in registers
          src[s] = reinterpret_cast<const T*>(s == me ? send + srcOffset(args, me) + off : staging(args.window, j, s));
        reduceRun<T, kOp>(team, reinterpret_cast<T*>(recv + 0 + off), src, n, len);  // rank order 0..n-1
      }
    } else {
      for (int s = 0; s < n; ++s) {
        if (!hasBit(args.recvFrom, s)) continue;
        const char* from = s == me ? send + srcOffset(args, me) + off : staging(args.window, j, s);
        copyBytes(team, recv + dstOffset(args, s) + off, from, len);
      }
    }
    signalPeers(team, args, L.resultFlags, flagValue(epoch, j), senders);
    return true;
  };

  // Iteration k: push(k) (k < mine), and consume(k) when split, consume(k - 1) when not (k >= 1).
  // One call site each, so that each is inlined once (every (type, op) of the reducing kernel
  // compiles them).
  bool ok = true;
  for (uint32_t k = 0; ok && mine > 0 && k <= mine; ++k) {
    if (pushes && k < mine) ok = push(k);
    const bool consumeNow = consumes && (split ? k < mine : k >= 1);
    if (ok && consumeNow) ok = consume(split ? k : k - 1);
  }
  if (ok && pushes && mine > 0)
    waitPeers(team, args, L.resultFlags, flagValue(epoch, mine - 1), kPhaseExchangeCredit, receivers);
  if (split) __syncthreads();  // both teams have ended: the drain above covers the launch
  allowNextGrid();
  awaitArrivals(args, epoch);
}

// ---- exchangeDirect ---------------------------------------------------------------------------------
//
// For outputs registered on every rank (DeviceArgs::peerRecv: every rank's registration base as
// mapped here):
//   enter  - thread p writes our output's offset within its registration into peer p's
//            directFlags[offsets][b][our rank], then enterWithTag (block_ops.cuh) on
//            directFlags[enter]: the same thread's release publishes the offset with the flag.
//            Once every peer's block b has entered, its output is free for this call (stream
//            order), it made the same call (collective, counts, type, root, registration), and its
//            offset is in our window; otherwise the block returns before writing anything.
//   write  - block b copies its run of each of our pieces straight into the receiver's output, at
//            the receiver's offset plus peerDstOffset[d] (NVLink writes; our own piece locally),
//            all pieces interleaved (copyJobs).
//   leave  - publishes directFlags[leave][b][our rank] = flagValue(epoch, 0) on every peer after a
//            block barrier (the release covers the block's writes) and waits for every peer's
//            block b: when our launch ends, every write into our output has landed.
// Both handshakes involve every peer, so the covenant holds without arrival flags. The offset
// words are read only between a peer's enter flag of this launch and our leave: the peer writes
// the next launch's offset after it left this one, i.e. after our leave flag.
// directFlags' planes (device_state.h): [enter][block][rank], [leave][block][rank], then the
// registered buffers' offsets [block][rank].
struct DirectPlanes {
  size_t enter, leave, offsets;
};
__device__ __forceinline__ DirectPlanes directPlanes(const DeviceArgs& args) {
  const size_t plane = sizeof(uint64_t) * kMaxCtas * kMaxRanks;
  return {args.layout.directFlags, args.layout.directFlags + plane, args.layout.directFlags + 2 * plane};
}

// The entry of the registered-buffer exchanges (exchangeDirect, exchangePull), by the whole block:
// thread p writes our registered buffer's offset within its registration (registeredOffset) into
// peer p's offset words [b][our rank], then enterWithTag; once every peer's block b has entered,
// peerOffset[p] (shared) holds peer p's offset. False when the block must stop.
__device__ __forceinline__ bool enterRegistered(const DeviceArgs& args, const LaunchInfo& info,
                                                size_t (&peerOffset)[kMaxRanks]) {
  const int n = args.nranks;
  const int me = args.rank;
  const DirectPlanes planes = directPlanes(args);
  const int peer = threadIdx.x;
  if (peer < n && peer != me)
    *reinterpret_cast<volatile uint64_t*>(reinterpret_cast<uint64_t*>(args.peerWindows[peer] + planes.offsets) +
                                          blockIdx.x * kMaxRanks + me) = args.registeredOffset;
  if (!enterWithTag(args, planes.enter, info, kPhaseDirectEnter)) return false;
  // Two statements, not one conditional expression: `cond ? args.field : *volatilePointer` is one
  // volatile lvalue, and nvcc then loads the __grid_constant__ field through a global-space volatile
  // access at its parameter-space address (compute-sanitizer: an invalid read at 0x278).
  if (peer == me) {
    peerOffset[peer] = args.registeredOffset;
  } else if (peer < n) {
    peerOffset[peer] = *reinterpret_cast<const volatile uint64_t*>(
        reinterpret_cast<const uint64_t*>(args.window + planes.offsets) + blockIdx.x * kMaxRanks + peer);
  }
  __syncthreads();
  return true;
}

// The leave of the registered-buffer exchanges: after a block barrier (the release covers the
// block's reads and writes), publish leave[b][our rank] on every peer, and wait for every peer's.
__device__ __forceinline__ void leaveRegistered(const DeviceArgs& args, const LaunchInfo& info) {
  allowNextGrid();
  const size_t leaveFlags = directPlanes(args).leave;
  signalPeers(wholeBlock(), args, leaveFlags, flagValue(info.epoch, 0));
  waitPeers(wholeBlock(), args, leaveFlags, flagValue(info.epoch, 0), kPhaseDirectLeave);
}

// Block b's run of a piece of `bytes` in the registered-buffer exchanges: one run per block, a
// multiple of 16 bytes long (the last runs short or empty), so that the runs of an aligned piece
// stay aligned.
struct BlockRun {
  size_t begin, len;
};
__device__ __forceinline__ BlockRun blockRunOf(size_t bytes) {
  const size_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const size_t begin = min(static_cast<size_t>(blockIdx.x) * per, bytes);
  return {begin, min(begin + per, bytes) - begin};
}

__device__ __forceinline__ void exchangeDirect(const DeviceArgs& args, const LaunchInfo& info) {
  const int n = args.nranks;
  const int me = args.rank;
  const Team block = wholeBlock();
  __shared__ size_t peerOffset[kMaxRanks];
  if (!enterRegistered(args, info, peerOffset)) return;
  const auto [begin, len] = blockRunOf(args.pieceBytes);
  const char* send = static_cast<const char*>(args.send);
  // Our pieces, listed by thread 0 in shared memory (a list per thread would sit in local memory),
  // then copied interleaved (copyJobs): the stores into peers' outputs stay in flight while the
  // local copy runs.
  __shared__ CopyJob jobs[kMaxRanks];
  __shared__ int jobCount;
  __shared__ bool jobsVectors;
  if (threadIdx.x == 0) {
    int count = 0;
    bool vectors = true;
    for (int i = 1; i <= n; ++i) {
      const int d = (me + i) % n;  // the next ranks first (the links share the load), ours last
      if (!hasBit(args.sendTo, d)) continue;
      jobs[count] = {static_cast<char*>(args.peerRecv[d]) + peerOffset[d] + peerDstOffset(args, d) + begin,
                     send + srcOffset(args, d) + begin, len};
      vectors = vectors && aligned16(jobs[count].dst) && aligned16(jobs[count].src);
      ++count;
    }
    jobCount = count;
    jobsVectors = vectors;
  }
  __syncthreads();
  const int count = jobCount;
  if (jobsVectors) {
    copyJobs(block, jobs, count);
  } else {
    for (int p = 0; p < count; ++p) copyBytes(block, jobs[p].dst, jobs[p].src, jobs[p].len);
  }
  leaveRegistered(args, info);
}

// ---- exchangePull -----------------------------------------------------------------------------------
//
// For inputs registered on every rank (DeviceArgs::peerRecv: every rank's input registration base as
// mapped here; registeredOffset: our input's offset within ours), a reducing pattern: ReduceScatter
// (reducescatter_pull) or Reduce (reduce_pull). The pattern's data (core/pattern.cc, core/call.cc)
// says which piece a rank reduces, and whether it reduces at all; the kernel is the same:
//   ReduceScatter - every rank reduces (recvFrom: everyone), its piece `rank` of every input
//                   (peerSrcByRank: every rank's input holds one piece per receiver, ours at
//                   rank * pieceBytes);
//   Reduce        - only the root reduces (recvFrom: everyone on the root, 0 elsewhere), the one
//                   piece of every input, at 0 (peerSrcByRank 0; pieceBytes: the whole count). The
//                   other ranks write nothing (their recv may be null) but take part in both
//                   handshakes: enter publishes their input's offset, and leave keeps their input
//                   unchanged until the root has read it.
// Per block b:
//   enter - enterRegistered: the offsets of the inputs, then the tagged handshake. Once every
//           peer's block b has entered, its input holds this call's data (stream order: the peer
//           entered after its earlier work on the stream) and keeps it until the peer leaves;
//   pull  - (the ranks that reduce) block b reduces its run of our piece, in rank order 0..n-1,
//           reading every rank's piece for us straight from its input (NVLink reads; ours locally)
//           at the rank's offset plus rank * pieceBytes where peerSrcByRank says so (else plus 0),
//           into our output at 0, so all ranks' reductions of the same piece have the same bits;
//   leave - leaveRegistered, on every rank whether it reduced or not: our launch ends, and with it
//           our program's right to overwrite our input, only after every peer's block b has read
//           its run of it (a peer publishes its leave flag after its reads: the block barrier's
//           release in leaveRegistered orders them before it).
// In place, each element of our output is read (with every source of that element) before the same
// thread writes it, and no peer reads what we write: ReduceScatter (recvbuff == sendbuff + rank *
// pieceBytes) writes our piece of our input, which the peers do not read (they read the other
// pieces); Reduce (recvbuff == sendbuff, on the root) writes the root's input, which only the root
// reads. Both handshakes involve every peer: the launch covenant holds without arrival flags.
template <typename T, RedOp kOp>
__device__ __forceinline__ void exchangePull(const DeviceArgs& args, const LaunchInfo& info) {
  const int n = args.nranks;
  const int me = args.rank;
  __shared__ size_t peerOffset[kMaxRanks];
  if (!enterRegistered(args, info, peerOffset)) return;
  if (args.recvFrom != 0) {
    const auto [begin, len] = blockRunOf(args.pieceBytes);  // bytes, whole elements
    const size_t ours = static_cast<size_t>(me) * args.pieceBytes;
    const T* src[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) {  // unrolled: src stays in registers
      const char* base = nullptr;
      if (s == me) base = static_cast<const char*>(args.send);
      else if (s < n) base = static_cast<const char*>(args.peerRecv[s]) + peerOffset[s];
      if (base != nullptr) base += (hasBit(args.peerSrcByRank, s) ? ours : 0) + begin;
      src[s] = reinterpret_cast<const T*>(base);
    }
    // The same choice and order as the staged consume (block_ops.cuh: reduceRun): rank order 0..n-1.
    reduceRun<T, kOp>(wholeBlock(), reinterpret_cast<T*>(static_cast<char*>(args.recv) + begin), src, n, len);
  }
  leaveRegistered(args, info);
  // The leave round passes on every peer's leave flag, but a peer publishes its flag before it
  // waits for ours: one that gave up during that wait (its timeout, an abort, a failure it was
  // told of) may have ended its launch, and its program overwritten its input, while this block
  // still read it. Every such peer has written a failure into our header first (recordFailure
  // tells every peer before the launch ends; an abort's device waits do the same), and its program
  // writes its input only after: checked once our reads are done (the leave round's block
  // barrier, then a system fence), so that the call ends failed, never as a silent success.
  if (threadIdx.x == 0) {
    __threadfence_system();
    if (*reinterpret_cast<volatile unsigned long long*>(&args.local->failed) == 0) peerFailed(args, kPhaseDirectLeave);
  }
}

template <typename T, RedOp kOp, bool kReduce>
__global__ void __launch_bounds__(512) exchangeLLKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<1>(args, [&](const LaunchInfo& info) { exchangeLL<T, kOp, kReduce>(args, info.epoch); });
}

template <typename T, RedOp kOp, bool kReduce>
__global__ void __launch_bounds__(512) exchangeStagedKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<1>(args, [&](const LaunchInfo& info) { exchangeStaged<T, kOp, kReduce>(args, info.epoch); });
}

__global__ void __launch_bounds__(512) exchangeDirectKernel(const __grid_constant__ DeviceArgs args);

}  // namespace yali
