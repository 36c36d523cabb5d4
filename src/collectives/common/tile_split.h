// How a tile of the message is split into one shard per rank: shared by the two-shot kernels and
// direct, so that they agree on every boundary.
#pragma once

#include <cstddef>

#include "collectives/common/device_state.h"

namespace yali {

// Tile `index` of `tileElems` elements; rank d owns shard d: [begin(d), begin(d) + length(d)),
// relative to `start`. The shard length q is a 16-byte multiple, so every shard starts aligned
// in the staging areas; the last shards of the last tile may be short or empty.
struct TileSplit {
  size_t start;  // the tile's first element in the message
  size_t len;    // the tile's length (tileElems, or less for the last tile)
  size_t q;      // shard length
  YALI_HOST_DEVICE size_t begin(int d) const { return d * q < len ? d * q : len; }
  YALI_HOST_DEVICE size_t length(int d) const {
    const size_t end = (d + 1) * q < len ? (d + 1) * q : len;
    return end - begin(d);
  }
};

YALI_HOST_DEVICE inline TileSplit tileSplit(size_t index, size_t tileElems, size_t count, int n,
                                            size_t elemSize) {
  const size_t vecElems = 16 / elemSize;
  TileSplit t;
  t.start = index * tileElems;
  t.len = count - t.start < tileElems ? count - t.start : tileElems;
  t.q = ((t.len + n - 1) / n + vecElems - 1) / vecElems * vecElems;
  return t;
}

}  // namespace yali
