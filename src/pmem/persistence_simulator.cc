#include "pmem/persistence_simulator.h"

#include <algorithm>
#include <cstring>
#include <random>

namespace pcached::pmem {

namespace {

struct LineRange {
  uint64_t first;
  uint64_t end;  // exclusive
};

LineRange lines_of(uint64_t offset, size_t len) {
  return {offset / kCacheLine, (offset + len + kCacheLine - 1) / kCacheLine};
}

constexpr size_t kWord = 8;

}  // namespace

PersistenceSimulator::PersistenceSimulator(const Region& region)
    : region_(region),
      eadr_(region.granularity() == Granularity::Byte),
      durable_(region.base(), region.base() + region.size()) {}

PersistenceSimulator::Line PersistenceSimulator::snapshot(uint64_t line) const {
  Line content;
  std::memcpy(content.data(), region_.base() + line * kCacheLine, kCacheLine);
  return content;
}

void PersistenceSimulator::capture(uint64_t offset, size_t len) {
  auto& mine = awaiting_fence_[std::this_thread::get_id()];
  const LineRange range = lines_of(offset, len);
  for (uint64_t line = range.first; line < range.end; ++line) {
    mine[line] = snapshot(line);
    dirty_.erase(line);
  }
}

void PersistenceSimulator::count_event() {
  ++events_;
  if (cut_event_ != 0 && events_ == cut_event_ && !cut_done_) {
    cut_done_ = true;
    on_cut_(image_locked(cut_));
  }
}

void PersistenceSimulator::arm_cut(uint64_t event, const PowerCut& cut, CutHandler on_cut) {
  std::lock_guard lock(mutex_);
  cut_event_ = event;
  cut_ = cut;
  on_cut_ = std::move(on_cut);
  cut_done_ = false;
}

bool PersistenceSimulator::cut_done() const {
  std::lock_guard lock(mutex_);
  return cut_done_;
}

void PersistenceSimulator::on_store(uint64_t offset, size_t len, StoreKind kind) {
  std::lock_guard lock(mutex_);
  count_event();
  if (kind == StoreKind::NonTemporal || eadr_) {
    // On eADR a cached store is as good as a flushed one: durable once the thread fences.
    // Streaming stores leave nothing dirty in the cache (libpmem2 flushes the partial edge lines
    // it writes with ordinary stores), but they sit in write-combining buffers until a fence.
    capture(offset, len);
    return;
  }
  const LineRange range = lines_of(offset, len);
  for (uint64_t line = range.first; line < range.end; ++line) dirty_.insert(line);
}

void PersistenceSimulator::on_flush(uint64_t offset, size_t len) {
  std::lock_guard lock(mutex_);
  count_event();
  capture(offset, len);
}

void PersistenceSimulator::on_fence() {
  std::lock_guard lock(mutex_);
  count_event();
  auto mine = awaiting_fence_.find(std::this_thread::get_id());
  if (mine == awaiting_fence_.end()) return;
  for (const auto& [line, content] : mine->second) {
    std::memcpy(durable_.data() + line * kCacheLine, content.data(), kCacheLine);
  }
  awaiting_fence_.erase(mine);
}

std::vector<std::byte> PersistenceSimulator::image_after_power_cut(const PowerCut& cut) const {
  std::lock_guard lock(mutex_);
  return image_locked(cut);
}

std::vector<std::byte> PersistenceSimulator::image_locked(const PowerCut& cut) const {
  std::vector<std::byte> image = durable_;
  std::set<uint64_t> candidates = dirty_;
  for (const auto& [thread, lines] : awaiting_fence_) {
    for (const auto& entry : lines) candidates.insert(entry.first);
  }
  std::mt19937_64 rng(cut.seed);
  std::bernoulli_distribution keep(std::clamp(cut.keep_unpersisted, 0.0, 1.0));
  std::bernoulli_distribution new_word(0.5);
  for (uint64_t line : candidates) {
    if (!keep(rng)) continue;
    const Line content = snapshot(line);
    std::byte* target = image.data() + line * kCacheLine;
    for (size_t word = 0; word < kCacheLine; word += kWord) {
      if (!cut.tear_words || new_word(rng)) std::memcpy(target + word, content.data() + word, kWord);
    }
  }
  return image;
}

size_t PersistenceSimulator::unpersisted_lines() const {
  std::lock_guard lock(mutex_);
  std::set<uint64_t> lines = dirty_;
  for (const auto& [thread, pending] : awaiting_fence_) {
    for (const auto& entry : pending) lines.insert(entry.first);
  }
  return lines.size();
}

uint64_t PersistenceSimulator::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

}  // namespace pcached::pmem
