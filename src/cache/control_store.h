// Persists the control area: each update goes to the slot not holding the current state, with a
// higher update sequence, so a torn update leaves the previous state readable.
#pragma once

#include <functional>
#include <mutex>

#include "format/control_area.h"
#include "format/superblock.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

class ControlStore {
 public:
  ControlStore(const format::Superblock& superblock, format::ControlArea current, unsigned current_slot)
      : superblock_(superblock), current_(current), slot_(current_slot) {}

  format::ControlArea current() const {
    std::lock_guard lock(mutex_);
    return current_;
  }

  // Applies change to a copy of the current state and makes it durable before returning.
  void update(pmem::PmemWriter& writer, const std::function<void(format::ControlArea&)>& change);

  // Writes a fresh state into slot 0 and clears slot 1 (format).
  static void initialise(pmem::PmemWriter& writer, const format::Superblock& superblock,
                         const format::ControlArea& control);

 private:
  const format::Superblock& superblock_;
  mutable std::mutex mutex_;
  format::ControlArea current_;
  unsigned slot_;
};

}  // namespace pcached::cache
