// The window's byte layout (collectives/common/device_state.h: WindowLayout), from the settings and
// the regions the comm's algorithms need (collectives/registry.h: Region). Host only; no CUDA call.
#pragma once

#include <stdint.h>

#include "collectives/common/device_state.h"
#include "collectives/registry.h"
#include "core/env.h"

namespace yali {

// The window's byte layout (device_state.h) for a comm of `nranks` with settings `s`, holding the
// regions in `regions` (registry.h: Region; windowRegionsFor(s, nranks) on a comm). Every other
// region keeps its offset and gets no bytes. Peers write into our window at the offsets of their
// own layout: every rank must compute the same one, so `regions` may depend only on what every
// rank has alike (selector.h: choosableAlgos). kAllRegions gives every region, as every comm had
// before the layout followed the registry.
WindowLayout computeLayout(int nranks, const Settings& s, uint32_t regions);
// The regions computeLayout lays out for `regions`: those, kAlwaysRegions, and ceFlags (256 bytes,
// kept in every window: it comes first, so leaving it out would move every other region of every
// comm whose copy-engine rows are off, which is every default comm; that layout has not run on a
// GPU).
constexpr uint32_t laidOutRegions(uint32_t regions) { return regions | kAlwaysRegions | kRegionCeFlags; }

}  // namespace yali
