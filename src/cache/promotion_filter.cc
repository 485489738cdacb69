#include "cache/promotion_filter.h"

namespace pcached::cache {

bool PromotionFilter::record_miss(uint64_t sector, unsigned promote_after) {
  if (promote_after <= 1) return true;
  const uint64_t block = sector >> 3;  // 4 KiB
  const size_t slot = static_cast<size_t>((block * 0x9E3779B97F4A7C15ull) >> (64 - kBits));
  std::atomic<uint8_t>& count = counts_[slot];
  // Relaxed and racy on purpose: two queues missing the same block at once may count once.
  const unsigned seen = count.load(std::memory_order_relaxed) + 1u;
  if (seen >= promote_after) {
    count.store(0, std::memory_order_relaxed);
    return true;
  }
  count.store(static_cast<uint8_t>(seen), std::memory_order_relaxed);
  return false;
}

}  // namespace pcached::cache
