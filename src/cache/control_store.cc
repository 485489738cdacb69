#include "cache/control_store.h"

#include <array>

namespace pcached::cache {

void ControlStore::update(pmem::PmemWriter& writer, const std::function<void(format::ControlArea&)>& change) {
  std::lock_guard lock(mutex_);
  format::ControlArea next = current_;
  change(next);
  next.update_seq = current_.update_seq + 1;
  const unsigned target = slot_ ^ 1u;
  std::array<std::byte, format::kControlSize> bytes;
  format::encode_control_area(next, superblock_.salt(), bytes);
  writer.copy_persist(format::kControlOffsets[target], bytes.data(), bytes.size());
  current_ = next;
  slot_ = target;
}

void ControlStore::initialise(pmem::PmemWriter& writer, const format::Superblock& superblock,
                              const format::ControlArea& control) {
  std::array<std::byte, format::kControlSize> bytes;
  format::encode_control_area(control, superblock.salt(), bytes);
  writer.copy_nodrain(format::kControlOffsets[0], bytes.data(), bytes.size());
  writer.fill_nodrain(format::kControlOffsets[1], 0, format::kControlSize);
  writer.drain();
}

}  // namespace pcached::cache
