// Persists the control area: every update is written to both slots in turn, each made durable
// before the next, so one slot is always whole and current (or, mid-update, whole and previous).
// That holds only if both slots are whole when an update begins; recovery repairs a slot a crash
// left torn or behind before the first update.
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "format/control_area.h"
#include "format/superblock.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

class ControlStore {
 public:
  ControlStore(const format::Superblock& superblock, format::ControlArea current)
      : superblock_(superblock), current_(current) {}

  format::ControlArea current() const {
    std::lock_guard lock(mutex_);
    return current_;
  }

  // The lost ranges alone, for those that need nothing else (no copy of the whole area).
  std::vector<format::LostRange> lost() const {
    std::lock_guard lock(mutex_);
    return current_.lost;
  }

  // Applies change to a copy of the current state and makes it durable before returning. Both
  // slots must be whole and current before (see repair()).
  void update(pmem::PmemWriter& writer, const std::function<void(format::ControlArea&)>& change);

  // Rewrites `slot` with the current state, durably: recovery does it when that slot is torn,
  // damaged or behind, before anything calls update().
  void repair(pmem::PmemWriter& writer, unsigned slot);

  // Writes a fresh state into both slots (format).
  static void initialise(pmem::PmemWriter& writer, const format::Superblock& superblock,
                         const format::ControlArea& control);

 private:
  const format::Superblock& superblock_;
  mutable std::mutex mutex_;
  format::ControlArea current_;
};

}  // namespace pcached::cache
