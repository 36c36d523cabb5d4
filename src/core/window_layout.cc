#include "core/window_layout.h"

#include "collectives/p2p/p2p.h"
#include "collectives/registry.h"

namespace yali {
namespace {

size_t alignUp(size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

WindowLayout computeLayout(int nranks, const Settings& s, uint32_t regions) {
  WindowLayout L{};
  regions = laidOutRegions(regions);
  size_t off = alignUp(sizeof(WindowHeader));
  // Each region at the next offset; `bytes` of it only when laid out (a region left out has its
  // offset and no bytes: the guard in enqueue.cc keeps every launch off it).
  auto place = [&](size_t* at, uint32_t region, size_t bytes) {
    *at = off;
    if (regions & region) off += bytes;
  };
  const size_t n = static_cast<size_t>(nranks);
  // Outside the epoch-stamped areas: the rebase never clears it (its words are 0 between calls).
  place(&L.ceFlags, kRegionCeFlags, alignUp(sizeof(uint32_t) * 2 * kMaxRanks));
  place(&L.pushFlags, kRegionPushFlags, alignUp(sizeof(uint64_t) * kMaxPipelines * kMaxRanks));
  place(&L.resultFlags, kRegionResultFlags, alignUp(sizeof(uint64_t) * kMaxPipelines * kMaxRanks));
  place(&L.directFlags, kRegionDirectFlags, alignUp(sizeof(uint64_t) * 3 * kMaxCtas * kMaxRanks));
  place(&L.arriveFlags, kRegionArriveFlags, alignUp(sizeof(uint64_t) * kMaxRanks));
  // 8 payload bytes per 16-byte packet; 0 without the area, so that no LL choice fits it.
  L.llSlotBytes = regions & kRegionLL ? 2 * static_cast<size_t>(s.llBufferBytes) : 0;
  place(&L.ll, kRegionLL, 2 * n * L.llSlotBytes);
  place(&L.counts, kRegionCounts, 2 * static_cast<size_t>(kMaxRanks) * kMaxLocalExperts * 16);  // a packet each
  L.stampedBytes = off - L.pushFlags;  // the rebase clears the laid-out regions of this range
  L.stagingBytes = static_cast<size_t>(s.stagingBytes);
  place(&L.staging, kRegionStaging, 2 * n * L.stagingBytes);
  place(&L.result, kRegionResult, 2 * L.stagingBytes);
  place(&L.gather, kRegionGather, 2 * n * L.stagingBytes);
  L.copyInBytes = regions & kRegionCopyIn ? static_cast<size_t>(s.pullBufferBytes) : 0;  // likewise
  place(&L.copyIn, kRegionCopyIn, 2 * L.copyInBytes);
  // Point-to-point (p2p.cu): the flags and credits at their full shape, the rings for this world.
  // Outside the epoch-stamped areas: the rebase never clears them.
  const bool p2p = (regions & kRegionP2P) != 0;
  L.p2pChannels = p2p ? static_cast<size_t>(p2pRingsPerPair(s.p2pChannels, nranks)) : 0;
  L.p2pSlotBytes = p2p ? static_cast<size_t>(s.p2pSlotBytes) : 0;
  L.p2pSlotStride = p2p ? alignUp(L.p2pSlotBytes + 16) : 0;  // room for the skew (0..15)
  L.p2pLLBytes = p2p ? static_cast<size_t>(p2pLLBytesFor(s.p2pLLBytes, static_cast<int>(L.p2pChannels))) : 0;
  place(&L.p2pFlags, kRegionP2P, alignUp(sizeof(P2PSlotFlag) * kMaxRanks * kMaxP2PChannels * kP2PSlots));
  place(&L.p2pCredits, kRegionP2P, alignUp(sizeof(uint64_t) * kMaxRanks * kMaxP2PChannels * kP2PSlots));
  place(&L.p2pLL, kRegionP2P, alignUp(n * L.p2pChannels * kP2PSlots * kP2PLLSlotBytes));
  place(&L.p2pRing, kRegionP2P, n * L.p2pChannels * kP2PSlots * L.p2pSlotStride);
  place(&L.local, kRegionLocal, alignUp(sizeof(LocalState)));
  L.total = off;
  return L;
}

}  // namespace yali
