// Discards passed down to the backing device and not completed yet.
//
// The backing device may carry out a discard and a write of the same sectors in either order
// while both are under way. A discard is passed down after its key is journaled, so a newer write
// of its sectors (later in the same batch, or from another queue) can reach writeback before the
// discard reaches the device; if writeback stored that write and the clean horizon passed it, a
// discard landing afterwards would erase the write's only copy. So writeback holds back data for
// sectors with a discard in flight, until the discard completes.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pcached::cache {

class DiscardsInFlight {
 public:
  // Registers a discard of [sector, sector+sectors): call before its key is numbered, so that any
  // write writeback may take without seeing it is older than the discard. Returns its ticket.
  uint64_t add(uint64_t sector, uint64_t sectors);
  // The discard completed on the backing device (successfully or not).
  void remove(uint64_t ticket);
  // Whether a discard in flight touches [sector, sector+sectors).
  bool overlaps(uint64_t sector, uint64_t sectors) const;

 private:
  struct Range {
    uint64_t ticket;
    uint64_t begin;
    uint64_t end;
  };
  mutable std::mutex mutex_;
  std::vector<Range> ranges_;
  uint64_t next_ticket_ = 1;
  std::atomic<size_t> count_{0};  // ranges_.size(): writeback looks without locking when it is 0
};

}  // namespace pcached::cache
