// The engine's current tunables, shared by its queues and its writeback worker. Changes are rare
// and readers many: a reader keeps its own copy and takes a fresh one only when the version
// moved (one relaxed load per request on the queue threads).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "pcached/tunables.h"

namespace pcached::cache {

class TunablesStore {
 public:
  explicit TunablesStore(const Tunables& initial) : value_(initial) {}

  Tunables get() const {
    std::lock_guard lock(mutex_);
    return value_;
  }
  void set(const Tunables& value) {
    std::lock_guard lock(mutex_);
    value_ = value;
    version_.fetch_add(1, std::memory_order_release);
  }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mutex_;
  Tunables value_;
  std::atomic<uint64_t> version_{1};
};

// A thread's copy of the tunables, refreshed when the store's version changes.
class TunablesView {
 public:
  explicit TunablesView(const TunablesStore& store) : store_(store) {}
  const Tunables& get() {
    const uint64_t version = store_.version();
    if (version != version_) {
      value_ = store_.get();
      version_ = version;
    }
    return value_;
  }

 private:
  const TunablesStore& store_;
  Tunables value_;
  uint64_t version_ = 0;
};

}  // namespace pcached::cache
