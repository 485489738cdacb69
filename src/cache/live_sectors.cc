#include "cache/live_sectors.h"

#include <algorithm>

#include "format/layout.h"

namespace pcached::cache {

namespace {

constexpr uint64_t kBitsPerWord = 64;

// The bits of word `word` that [first, end) (sector numbers from the data start) covers.
uint64_t mask_in_word(uint64_t word, uint64_t first, uint64_t end) {
  const uint64_t word_first = word * kBitsPerWord;
  const uint64_t from = std::max(first, word_first) - word_first;
  const uint64_t to = std::min(end, word_first + kBitsPerWord) - word_first;
  const uint64_t high = to == kBitsPerWord ? ~uint64_t{0} : (uint64_t{1} << to) - 1;
  return high & ~((uint64_t{1} << from) - 1);
}

uint64_t word_count(uint64_t segment_size, uint32_t segment_count) {
  return (uint64_t{segment_count} * segment_size / format::kSectorSize + kBitsPerWord - 1) / kBitsPerWord;
}

}  // namespace

LiveSectors::LiveSectors(uint64_t data_start, uint64_t segment_size, uint32_t segment_count)
    : data_start_(data_start),
      segment_size_(segment_size),
      segment_count_(segment_count),
      words_(std::make_unique<std::atomic<uint64_t>[]>(word_count(segment_size, segment_count))),
      traced_(std::make_unique<std::atomic<uint64_t>[]>(segment_count)) {}

uint64_t LiveSectors::memory_bytes() const {
  return (word_count(segment_size_, segment_count_) + segment_count_) * sizeof(std::atomic<uint64_t>);
}

template <typename Apply>
void LiveSectors::for_each_word(uint64_t location, uint64_t sectors, Apply apply) const {
  const uint64_t first = (location - data_start_) / format::kSectorSize;
  const uint64_t end = first + sectors;
  for (uint64_t word = first / kBitsPerWord; word * kBitsPerWord < end; ++word) {
    if (!apply(words_[word], mask_in_word(word, first, end))) return;
  }
}

void LiveSectors::set(uint64_t location, uint64_t sectors) {
  for_each_word(location, sectors, [](std::atomic<uint64_t>& word, uint64_t mask) {
    word.fetch_or(mask, std::memory_order_relaxed);
    return true;
  });
}

void LiveSectors::clear(uint64_t location, uint64_t sectors) {
  for_each_word(location, sectors, [](std::atomic<uint64_t>& word, uint64_t mask) {
    word.fetch_and(~mask, std::memory_order_relaxed);
    return true;
  });
}

bool LiveSectors::any(uint64_t location, uint64_t sectors) const {
  bool found = false;
  for_each_word(location, sectors, [&](const std::atomic<uint64_t>& word, uint64_t mask) {
    found = (word.load(std::memory_order_relaxed) & mask) != 0;
    return !found;
  });
  return found;
}

void LiveSectors::trace(uint32_t segment, uint32_t generation) {
  traced_[segment].store(uint64_t{generation} + 1, std::memory_order_relaxed);
}

void LiveSectors::untrace_segment_of(uint64_t location) {
  untrace(static_cast<uint32_t>((location - data_start_) / segment_size_));
}

void LiveSectors::untrace(uint32_t segment) { traced_[segment].store(0, std::memory_order_relaxed); }

bool LiveSectors::dead(uint32_t segment, uint32_t generation, uint64_t location, uint64_t sectors) const {
  if (segment >= segment_count_ || traced_[segment].load(std::memory_order_relaxed) != uint64_t{generation} + 1) {
    return false;
  }
  return !any(location, sectors);
}

}  // namespace pcached::cache
