#include "cache/discards_in_flight.h"

#include <algorithm>

namespace pcached::cache {

uint64_t DiscardsInFlight::add(uint64_t sector, uint64_t sectors) {
  std::lock_guard lock(mutex_);
  const uint64_t ticket = next_ticket_++;
  ranges_.push_back({ticket, sector, sector + sectors});
  count_.store(ranges_.size(), std::memory_order_release);
  return ticket;
}

void DiscardsInFlight::remove(uint64_t ticket) {
  std::lock_guard lock(mutex_);
  std::erase_if(ranges_, [ticket](const Range& range) { return range.ticket == ticket; });
  count_.store(ranges_.size(), std::memory_order_release);
}

bool DiscardsInFlight::overlaps(uint64_t sector, uint64_t sectors) const {
  // A discard registered after this load is newer than every key writeback has seen (add() comes
  // before the discard's key is numbered), so it may land before or after what writeback stores:
  // either is a valid outcome for sectors it discards.
  if (count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(mutex_);
  const uint64_t end = sector + sectors;
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const Range& range) { return range.begin < end && sector < range.end; });
}

}  // namespace pcached::cache
