// The DRAM index: which logical sectors are cached, and where. Sharded by LBA range (1 MiB
// stripes spread over the shards), each shard a B-tree under its own reader/writer lock, so
// queues rarely meet on a lock. Extents never cross a stripe.
//
// Every extent carries the sequence number of the key that wrote it; a change applies only where
// it is newer than what is there. So the outcome does not depend on the order in which racing
// queues reach the index, and recovery, which applies keys in sequence order, rebuilds exactly
// what the running cache had.
#pragma once

#include <absl/container/btree_map.h>
#include <absl/functional/function_ref.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "cache/live_sectors.h"
#include "cache/segment_activity.h"
#include "cache/segment_contents.h"

namespace pcached::cache {

struct Extent {
  static constexpr uint32_t kZero = 1u << 0;  // reads as zeros; no data in the region
  static constexpr uint32_t kFill = 1u << 1;  // clean copy of backing data, not journaled
  // Dirty data writeback could not read (media error): the backing device holds older data, so
  // reads must fail rather than fall back to it.
  static constexpr uint32_t kLost = 1u << 2;
  // A discard's tombstone: no data, reads as zeros. It keeps a write numbered before the discard
  // but applied to the index after it (another queue) from showing, as replay in sequence order
  // would not show it either. Dropped once writeback has passed the discard.
  static constexpr uint32_t kDiscarded = 1u << 3;

  // Whether the extent's sectors are in the region (not zeros, not a tombstone).
  bool has_data() const { return !(flags & (kZero | kDiscarded)); }
  // Whether the extent counts as cached content (zeros do; a tombstone does not).
  bool counts_as_cached() const { return !(flags & kDiscarded); }

  uint32_t sectors = 0;
  uint32_t flags = 0;
  uint64_t location = 0;  // byte offset of the first sector's data in the region
  uint64_t seq = 0;       // key sequence number; fills use 0 so that every write wins over them
};

// One piece of a lookup: cached (extent describes the piece exactly, location adjusted), a
// discard's tombstone (not cached; extent has kDiscarded) or a gap that must come from the
// backing device.
struct Piece {
  uint64_t sector;
  uint32_t sectors;
  bool cached;
  Extent extent;  // meaningful when cached or discarded

  // Discarded, and the discard not yet passed down to the backing device: the device may be
  // punching the hole right now, so it must not be read there.
  bool discarded() const { return !cached && (extent.flags & Extent::kDiscarded); }
};

// Counts the bytes a shard's B-tree holds, so the index can report its DRAM use exactly.
template <typename T>
struct CountingAllocator {
  using value_type = T;
  std::atomic<int64_t>* bytes;

  explicit CountingAllocator(std::atomic<int64_t>* counter) : bytes(counter) {}
  template <typename U>
  CountingAllocator(const CountingAllocator<U>& other) : bytes(other.bytes) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    bytes->fetch_add(static_cast<int64_t>(n * sizeof(T)), std::memory_order_relaxed);
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    bytes->fetch_sub(static_cast<int64_t>(n * sizeof(T)), std::memory_order_relaxed);
    std::allocator<T>().deallocate(p, n);
  }
  template <typename U>
  bool operator==(const CountingAllocator<U>& other) const { return bytes == other.bytes; }
};

class ExtentIndex {
 public:
  static constexpr unsigned kStripeShift = 11;  // 2048 sectors = 1 MiB
  static constexpr uint64_t kStripeSectors = uint64_t{1} << kStripeShift;
  static constexpr unsigned kShards = 64;

  // Maps [sector, sector+sectors) to data at location (or zeros), wherever no newer extent is.
  void insert(uint64_t sector, uint32_t sectors, uint64_t location, uint64_t seq, uint32_t flags);
  // Drops cached data older than seq in the range.
  void remove(uint64_t sector, uint32_t sectors, uint64_t seq);
  // A discard numbered seq: drops older data and leaves a tombstone where nothing newer is.
  void discard(uint64_t sector, uint32_t sectors, uint64_t seq);
  // Removes the tombstones of the range older than seq (writeback has passed their discards).
  void drop_tombstones(uint64_t sector, uint32_t sectors, uint64_t seq);
  // Sets flag on the extents of the range that the key with sequence number seq wrote.
  void mark(uint64_t sector, uint32_t sectors, uint64_t seq, uint32_t flag);

  // Visits the range stripe by stripe, in order, under each stripe's shard lock:
  // the visitor may copy the cached data while no one can evict it. The visitor also gets the
  // shard's change count, for insert_fill.
  // (A function reference and pieces gathered on the stack: a read hit allocates nothing.)
  using StripeVisitor = absl::FunctionRef<void(std::span<const Piece> pieces, uint64_t change_count)>;
  void lookup(uint64_t sector, uint32_t sectors, StripeVisitor visitor) const;

  // Inserts clean data read from the backing device, only if the stripe's shard has not changed
  // since change_count was taken (so a fill never hides a write, discard or eviction that raced
  // with the backing read). [sector, sector+sectors) must lie within one stripe.
  bool insert_fill(uint64_t sector, uint32_t sectors, uint64_t location, uint64_t change_count);

  // What GC does with one extent of a segment it reclaims: drops it (its reads go to the backing
  // device), moves it to `location`, or keeps it where it is (dirty data with nowhere to go: its
  // segment is then not reclaimed).
  struct Relocation {
    enum class Action { Evict, Move, Keep };
    Action action = Action::Evict;
    uint64_t location = 0;  // Move
  };
  // For every extent with data in `where` (sorted, disjoint: SegmentContents::ranges of the
  // segments GC reclaims) located where in_reclaimed(location) holds: relocate(first sector,
  // extent) decides, and does the copy, under the shard's lock held exclusively, so that nobody
  // reads or changes the extent meanwhile. Returns the sectors evicted.
  using InReclaimed = absl::FunctionRef<bool(uint64_t location)>;
  using Relocator = absl::FunctionRef<Relocation(uint64_t sector, const Extent& extent)>;
  uint64_t reclaim(std::span<const SectorRange> where, InReclaimed in_reclaimed, Relocator relocate);
  // The same over the whole index, for when `where` cannot be trusted: a segment still holds live
  // data after reclaim (which would mean a placement was never noted).
  uint64_t reclaim_everywhere(InReclaimed in_reclaimed, Relocator relocate);

  // What a range holds: anything cached at all, and anything written by a key at or above
  // dirty_from (the clean horizon: data not yet on the backing device) or lost (Extent::kLost).
  struct RangeState {
    bool cached = false;
    bool dirty = false;
  };
  RangeState probe(uint64_t sector, uint32_t sectors, uint64_t dirty_from) const;

  // The pieces of [sector, sector+sectors) still owned by the key with sequence number seq.
  std::vector<Piece> live_pieces(uint64_t sector, uint32_t sectors, uint64_t seq) const;

  uint64_t extents() const;
  // DRAM held by the index's trees.
  uint64_t memory_bytes() const;
  uint64_t cached_sectors() const;
  // Cached sectors written by keys at or above seq: the dirty data, given the clean horizon.
  uint64_t sectors_at_or_above(uint64_t seq) const;
  // The extents (tombstones included) written by keys numbered in [from, to), with their first
  // sectors, in sequence order. A scan of the whole index: for rare repairs, not the I/O path.
  std::vector<std::pair<uint64_t, Extent>> extents_numbered(uint64_t from, uint64_t to) const;
  // Visits every extent (tombstones included) with its first sector, shard by shard, each under
  // its shard's lock: in no particular order. For a detach's checkpoint.
  void for_each_extent(absl::FunctionRef<void(uint64_t sector, const Extent& extent)> visit) const;

  // Keeps activity's live-sector counts and the live sectors' bits in step with every extent that
  // holds data in the region, and notes in contents where each piece of data is placed (activity
  // says which segment a location is in). Set once, before any other use.
  void track(SegmentActivity* activity, LiveSectors* live, SegmentContents* contents) {
    activity_ = activity;
    live_ = live;
    contents_ = contents;
  }

  static unsigned shard_of(uint64_t sector) { return static_cast<unsigned>((sector >> kStripeShift) % kShards); }

 private:
  using Map = absl::btree_map<uint64_t, Extent, std::less<uint64_t>,
                               CountingAllocator<std::pair<const uint64_t, Extent>>>;
  struct alignas(64) Shard {
    Shard() : map(CountingAllocator<std::pair<const uint64_t, Extent>>(&memory)) {}
    // Exclusive for readers too. A std::shared_mutex (glibc's pthread rwlock) here lost a wakeup
    // under load: a lookup and writeback's drop_tombstones both slept on a stripe's lock that
    // was free, and the I/O hung. Readers hold it for a copy, and queues rarely share a stripe.
    mutable std::mutex mutex;
    std::atomic<int64_t> memory{0};
    Map map;
    uint64_t change_count = 0;  // under mutex
    std::atomic<uint64_t> sectors{0};
    std::atomic<uint64_t> extents{0};
  };

  // Applies a change to one stripe piece under its shard's exclusive lock.
  void insert_in_stripe(Shard& shard, uint64_t begin, uint64_t end, uint64_t location, uint64_t seq, uint32_t flags);
  void remove_in_stripe(Shard& shard, uint64_t begin, uint64_t end, uint64_t seq);
  // GC's decision for the extent at `it`, whose data is in a reclaimed segment; returns the next.
  Map::iterator relocate_extent(Shard& shard, Map::iterator it, Relocator relocate, uint64_t& evicted, bool& changed);
  void erase_range(Shard& shard, uint64_t begin, uint64_t end, uint64_t newer_than_seq,
                   std::vector<std::pair<uint64_t, uint64_t>>* kept);
  // Keeps the shard's cached-sector count and the segments' live data in step with `sectors` of
  // extent, starting at `location` (the extent's own or further in), added or (removed) taken away.
  void account(Shard& shard, const Extent& extent, uint64_t location, uint64_t sectors, bool removed);
  void account(Shard& shard, const Extent& extent, bool removed) {
    account(shard, extent, extent.location, extent.sectors, removed);
  }

  // Data of [begin, end) was placed at location.
  void note_placed(uint64_t location, uint64_t begin, uint64_t end) {
    if (contents_ != nullptr) contents_->note(activity_->segment_of(location), begin, end - begin, location);
  }

  std::array<Shard, kShards> shards_;
  SegmentActivity* activity_ = nullptr;
  LiveSectors* live_ = nullptr;
  SegmentContents* contents_ = nullptr;
};

}  // namespace pcached::cache
