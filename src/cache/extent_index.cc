#include "cache/extent_index.h"

#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <mutex>

#include "format/layout.h"

namespace pcached::cache {

namespace {

using format::kSectorSize;

uint64_t end_of(const std::pair<const uint64_t, Extent>& entry) { return entry.first + entry.second.sectors; }

// Where the data of `sector` lies, inside an extent that starts at `start`.
uint64_t location_at(const Extent& extent, uint64_t start, uint64_t sector) {
  return extent.has_data() ? extent.location + (sector - start) * kSectorSize : 0;
}

// An extent's location: none for zeros and tombstones.
uint64_t located(uint64_t location, uint32_t flags) {
  return (flags & (Extent::kZero | Extent::kDiscarded)) ? 0 : location;
}

template <typename Map>
auto first_overlapping(Map& map, uint64_t begin) {
  auto it = map.upper_bound(begin);
  if (it != map.begin()) {
    auto prev = std::prev(it);
    if (end_of(*prev) > begin) return prev;
  }
  return it;
}

// Calls fn(start, end) for each stripe-sized piece of [sector, sector+sectors).
template <typename Fn>
void for_each_stripe(uint64_t sector, uint64_t sectors, Fn fn) {
  const uint64_t end = sector + sectors;
  while (sector < end) {
    const uint64_t stripe_end = (sector | (ExtentIndex::kStripeSectors - 1)) + 1;
    const uint64_t piece_end = std::min(end, stripe_end);
    fn(sector, piece_end);
    sector = piece_end;
  }
}

}  // namespace

void ExtentIndex::account(Shard& shard, const Extent& extent, uint64_t location, uint64_t sectors, bool removed) {
  const int64_t change = removed ? -static_cast<int64_t>(sectors) : static_cast<int64_t>(sectors);
  if (extent.counts_as_cached()) shard.sectors.fetch_add(static_cast<uint64_t>(change), std::memory_order_relaxed);
  if (!extent.has_data()) return;
  if (activity_ != nullptr) activity_->add_live(location, change);
  if (live_ == nullptr) return;
  if (removed) {
    live_->clear(location, sectors);
  } else {
    live_->set(location, sectors);
  }
}

void ExtentIndex::erase_range(Shard& shard, uint64_t begin, uint64_t end, uint64_t newer_than_seq,
                              std::vector<std::pair<uint64_t, uint64_t>>* kept) {
  Map& map = shard.map;
  auto it = first_overlapping(map, begin);
  absl::InlinedVector<std::pair<uint64_t, Extent>, 4> remainders;
  while (it != map.end() && it->first < end) {
    const uint64_t start = it->first;
    const uint64_t stop = end_of(*it);
    const Extent extent = it->second;
    if (extent.seq > newer_than_seq) {
      if (kept != nullptr) kept->emplace_back(std::max(start, begin), std::min(stop, end));
      ++it;
      continue;
    }
    it = map.erase(it);
    shard.extents.fetch_sub(1, std::memory_order_relaxed);
    const uint64_t from = std::max(start, begin);
    account(shard, extent, location_at(extent, start, from), std::min(stop, end) - from, /*removed=*/true);
    if (start < begin) {
      Extent left = extent;
      left.sectors = static_cast<uint32_t>(begin - start);
      remainders.emplace_back(start, left);
    }
    if (stop > end) {
      Extent right = extent;
      right.sectors = static_cast<uint32_t>(stop - end);
      right.location = location_at(extent, start, end);
      remainders.emplace_back(end, right);
    }
  }
  for (const auto& [start, extent] : remainders) {
    map.emplace(start, extent);
    shard.extents.fetch_add(1, std::memory_order_relaxed);
  }
}

void ExtentIndex::insert_in_stripe(Shard& shard, uint64_t begin, uint64_t end, uint64_t location, uint64_t seq,
                                   uint32_t flags) {
  if (!(flags & (Extent::kZero | Extent::kDiscarded))) note_placed(location, begin, end);
  // The common cases with one descent of the tree: nothing cached there yet, or an extent of
  // exactly this range (a block written again) that the new data replaces in place.
  if (auto it = first_overlapping(shard.map, begin); it == shard.map.end() || it->first >= end) {
    const Extent extent{static_cast<uint32_t>(end - begin), flags, located(location, flags), seq};
    shard.map.emplace_hint(it, begin, extent);
    shard.extents.fetch_add(1, std::memory_order_relaxed);
    account(shard, extent, /*removed=*/false);
    return;
  } else if (it->first == begin && end_of(*it) == end && it->second.seq <= seq) {
    account(shard, it->second, /*removed=*/true);
    it->second = Extent{static_cast<uint32_t>(end - begin), flags, located(location, flags), seq};
    account(shard, it->second, /*removed=*/false);
    return;
  }
  thread_local std::vector<std::pair<uint64_t, uint64_t>> kept;
  kept.clear();
  erase_range(shard, begin, end, seq, &kept);
  uint64_t cursor = begin;
  auto add = [&](uint64_t from, uint64_t to) {
    Extent extent;
    extent.sectors = static_cast<uint32_t>(to - from);
    extent.flags = flags;
    extent.location = located(location + (from - begin) * kSectorSize, flags);
    extent.seq = seq;
    shard.map.emplace(from, extent);
    shard.extents.fetch_add(1, std::memory_order_relaxed);
    account(shard, extent, /*removed=*/false);
  };
  for (const auto& [kept_begin, kept_end] : kept) {
    if (cursor < kept_begin) add(cursor, kept_begin);
    cursor = std::max(cursor, kept_end);
  }
  if (cursor < end) add(cursor, end);
}

void ExtentIndex::insert(uint64_t sector, uint32_t sectors, uint64_t location, uint64_t seq, uint32_t flags) {
  for_each_stripe(sector, sectors, [&](uint64_t begin, uint64_t end) {
    Shard& shard = shards_[shard_of(begin)];
    std::unique_lock lock(shard.mutex);
    insert_in_stripe(shard, begin, end, location + (begin - sector) * kSectorSize, seq, flags);
    ++shard.change_count;
  });
}

void ExtentIndex::remove_in_stripe(Shard& shard, uint64_t begin, uint64_t end, uint64_t seq) {
  erase_range(shard, begin, end, seq, nullptr);
  ++shard.change_count;
}

void ExtentIndex::remove(uint64_t sector, uint32_t sectors, uint64_t seq) {
  for_each_stripe(sector, sectors, [&](uint64_t begin, uint64_t end) {
    Shard& shard = shards_[shard_of(begin)];
    std::unique_lock lock(shard.mutex);
    remove_in_stripe(shard, begin, end, seq);
  });
}

void ExtentIndex::discard(uint64_t sector, uint32_t sectors, uint64_t seq) {
  insert(sector, sectors, 0, seq, Extent::kDiscarded);
}

void ExtentIndex::drop_tombstones(uint64_t sector, uint32_t sectors, uint64_t seq) {
  for_each_stripe(sector, sectors, [&](uint64_t begin, uint64_t end) {
    Shard& shard = shards_[shard_of(begin)];
    std::unique_lock lock(shard.mutex);
    for (auto it = first_overlapping(shard.map, begin); it != shard.map.end() && it->first < end;) {
      if ((it->second.flags & Extent::kDiscarded) && it->second.seq < seq) {
        it = shard.map.erase(it);
        shard.extents.fetch_sub(1, std::memory_order_relaxed);
      } else {
        ++it;
      }
    }
    // Not a change for fills: a fill over the range finds what it would have found.
  });
}

void ExtentIndex::mark(uint64_t sector, uint32_t sectors, uint64_t seq, uint32_t flag) {
  for_each_stripe(sector, sectors, [&](uint64_t begin, uint64_t end) {
    Shard& shard = shards_[shard_of(begin)];
    std::unique_lock lock(shard.mutex);
    for (auto it = first_overlapping(shard.map, begin); it != shard.map.end() && it->first < end; ++it) {
      if (it->second.seq == seq) it->second.flags |= flag;
    }
  });
}

void ExtentIndex::lookup(uint64_t sector, uint32_t sectors, StripeVisitor visitor) const {
  absl::InlinedVector<Piece, 8> pieces;
  for_each_stripe(sector, sectors, [&](uint64_t begin, uint64_t end) {
    const Shard& shard = shards_[shard_of(begin)];
    std::lock_guard lock(shard.mutex);
    pieces.clear();
    uint64_t cursor = begin;
    for (auto it = first_overlapping(shard.map, begin); it != shard.map.end() && it->first < end; ++it) {
      const uint64_t start = std::max(it->first, begin);
      const uint64_t stop = std::min(end_of(*it), end);
      if (cursor < start) pieces.push_back({cursor, static_cast<uint32_t>(start - cursor), false, {}});
      Extent piece = it->second;
      piece.sectors = static_cast<uint32_t>(stop - start);
      piece.location = location_at(it->second, it->first, start);
      pieces.push_back({start, piece.sectors, it->second.counts_as_cached(), piece});
      cursor = stop;
    }
    if (cursor < end) pieces.push_back({cursor, static_cast<uint32_t>(end - cursor), false, {}});
    visitor(std::span<const Piece>(pieces.data(), pieces.size()), shard.change_count);
  });
}

bool ExtentIndex::insert_fill(uint64_t sector, uint32_t sectors, uint64_t location, uint64_t change_count) {
  Shard& shard = shards_[shard_of(sector)];
  std::unique_lock lock(shard.mutex);
  if (shard.change_count != change_count) return false;
  // Unchanged since the lookup that found this range empty: it is still empty. A fill does not
  // count as a change: it only fills holes with what the backing device holds, so other fills
  // that raced with it stay valid.
  insert_in_stripe(shard, sector, sector + sectors, location, 0, Extent::kFill);
  return true;
}

ExtentIndex::Map::iterator ExtentIndex::relocate_extent(Shard& shard, Map::iterator it, Relocator relocate,
                                                       uint64_t& evicted, bool& changed) {
  Extent& extent = it->second;
  const Relocation relocation = relocate(it->first, extent);
  switch (relocation.action) {
    case Relocation::Action::Keep:
      return std::next(it);
    case Relocation::Action::Move:
      changed = true;
      account(shard, extent, /*removed=*/true);
      // The data of the key that wrote it is elsewhere now: the bits of its old segment no longer
      // say whether that key has anything left.
      if (live_ != nullptr) live_->untrace_segment_of(extent.location);
      extent.location = relocation.location;
      account(shard, extent, /*removed=*/false);
      note_placed(extent.location, it->first, it->first + extent.sectors);
      return std::next(it);
    case Relocation::Action::Evict:
      break;
  }
  changed = true;
  evicted += extent.sectors;
  account(shard, extent, /*removed=*/true);
  shard.extents.fetch_sub(1, std::memory_order_relaxed);
  return shard.map.erase(it);
}

uint64_t ExtentIndex::reclaim(std::span<const SectorRange> where, InReclaimed in_reclaimed, Relocator relocate) {
  uint64_t evicted = 0;
  // An extent may reach past the end of one range into the next: it is decided on once.
  uint64_t decided_until = 0;
  for (const SectorRange& range : where) {
    for_each_stripe(range.sector, range.sectors, [&](uint64_t begin, uint64_t end) {
      Shard& shard = shards_[shard_of(begin)];
      std::unique_lock lock(shard.mutex);
      bool changed = false;
      for (auto it = first_overlapping(shard.map, begin); it != shard.map.end() && it->first < end;) {
        if (it->first < decided_until || !it->second.has_data() || !in_reclaimed(it->second.location)) {
          ++it;
          continue;
        }
        decided_until = end_of(*it);
        it = relocate_extent(shard, it, relocate, evicted, changed);
      }
      // A fill that looked before a move finds the shard changed and is dropped: harmless, and it
      // keeps insert_fill's rule simple (nothing it did not see has happened).
      if (changed) ++shard.change_count;
    });
  }
  return evicted;
}

uint64_t ExtentIndex::reclaim_everywhere(InReclaimed in_reclaimed, Relocator relocate) {
  uint64_t evicted = 0;
  for (Shard& shard : shards_) {
    std::unique_lock lock(shard.mutex);
    bool changed = false;
    for (auto it = shard.map.begin(); it != shard.map.end();) {
      if (!it->second.has_data() || !in_reclaimed(it->second.location)) {
        ++it;
        continue;
      }
      it = relocate_extent(shard, it, relocate, evicted, changed);
    }
    if (changed) ++shard.change_count;
  }
  return evicted;
}

ExtentIndex::RangeState ExtentIndex::probe(uint64_t sector, uint32_t sectors, uint64_t dirty_from) const {
  RangeState state;
  for_each_stripe(sector, sectors, [&](uint64_t begin, uint64_t end) {
    if (state.dirty) return;
    const Shard& shard = shards_[shard_of(begin)];
    std::lock_guard lock(shard.mutex);
    for (auto it = first_overlapping(shard.map, begin); it != shard.map.end() && it->first < end; ++it) {
      // A tombstone is not cached data, but one at or above dirty_from is a discard not yet
      // passed down: dirty, for whoever would write to the device under it. Lost data never
      // reached the device either.
      if (it->second.counts_as_cached()) state.cached = true;
      if (it->second.seq >= dirty_from || (it->second.flags & Extent::kLost)) {
        state.dirty = true;
        return;
      }
    }
  });
  return state;
}

std::vector<Piece> ExtentIndex::live_pieces(uint64_t sector, uint32_t sectors, uint64_t seq) const {
  std::vector<Piece> live;
  lookup(sector, sectors, [&](std::span<const Piece> pieces, uint64_t) {
    for (const Piece& piece : pieces) {
      if (piece.cached && piece.extent.seq == seq) live.push_back(piece);
    }
  });
  return live;
}

uint64_t ExtentIndex::extents() const {
  uint64_t total = 0;
  for (const Shard& shard : shards_) total += shard.extents.load(std::memory_order_relaxed);
  return total;
}

uint64_t ExtentIndex::memory_bytes() const {
  int64_t total = 0;
  for (const Shard& shard : shards_) total += shard.memory.load(std::memory_order_relaxed);
  return static_cast<uint64_t>(total);
}

uint64_t ExtentIndex::cached_sectors() const {
  uint64_t total = 0;
  for (const Shard& shard : shards_) total += shard.sectors.load(std::memory_order_relaxed);
  return total;
}

uint64_t ExtentIndex::sectors_at_or_above(uint64_t seq) const {
  uint64_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mutex);
    for (const auto& [start, extent] : shard.map) {
      if (extent.seq >= seq && extent.counts_as_cached()) total += extent.sectors;
    }
  }
  return total;
}

void ExtentIndex::for_each_extent(absl::FunctionRef<void(uint64_t sector, const Extent& extent)> visit) const {
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mutex);
    for (const auto& [start, extent] : shard.map) visit(start, extent);
  }
}

std::vector<std::pair<uint64_t, Extent>> ExtentIndex::extents_numbered(uint64_t from, uint64_t to) const {
  std::vector<std::pair<uint64_t, Extent>> found;
  for_each_extent([&](uint64_t start, const Extent& extent) {
    if (extent.seq >= from && extent.seq < to) found.emplace_back(start, extent);
  });
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.second.seq < b.second.seq; });
  return found;
}

}  // namespace pcached::cache
