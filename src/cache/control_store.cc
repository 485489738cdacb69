#include "cache/control_store.h"

#include <array>

namespace pcached::cache {

void ControlStore::update(pmem::PmemWriter& writer, const std::function<void(format::ControlArea&)>& change) {
  std::lock_guard lock(mutex_);
  format::ControlArea next = current_;
  change(next);
  next.update_seq = current_.update_seq + 1;
  std::array<std::byte, format::kControlSlotBytes> bytes;
  const size_t used = format::encode_control_area(next, superblock_.salt(), bytes);
  // Ordering: slot 0, durable, then slot 1, durable. A crash tears at most one of them and the
  // other holds the old or the new state; damage to one later leaves the other identical and
  // current. (Alternating slots would leave only the previous state, which may not name a
  // journal registered since.)
  writer.copy_persist(format::kControlOffsets[0], bytes.data(), used);
  writer.copy_persist(format::kControlOffsets[1], bytes.data(), used);
  current_ = next;
}

void ControlStore::repair(pmem::PmemWriter& writer, unsigned slot) {
  std::lock_guard lock(mutex_);
  std::array<std::byte, format::kControlSlotBytes> bytes;
  const size_t used = format::encode_control_area(current_, superblock_.salt(), bytes);
  // The other slot is whole and current: a crash here tears only this one, again.
  writer.copy_persist(format::kControlOffsets[slot], bytes.data(), used);
}

void ControlStore::initialise(pmem::PmemWriter& writer, const format::Superblock& superblock,
                              const format::ControlArea& control) {
  std::array<std::byte, format::kControlSlotBytes> bytes;
  const size_t used = format::encode_control_area(control, superblock.salt(), bytes);
  writer.copy_persist(format::kControlOffsets[0], bytes.data(), used);
  writer.copy_persist(format::kControlOffsets[1], bytes.data(), used);
}

}  // namespace pcached::cache
