// The background worker of a cache: writes dirty data back to the backing device in journal
// order, moves the clean horizon, and reclaims journal and data segments (GC). It runs on its own
// thread with its own io_uring, so queue threads never wait for it except when no segment is free.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/journal.h"
#include "io/ring.h"
#include "pcached/cache.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

class Engine;

class Writeback {
 public:
  explicit Writeback(Engine& engine);
  ~Writeback();

  void start();
  void stop();
  // Wakes the worker (a writer waits for space, a queue went away).
  void kick();
  // Returns once every key numbered before the call is clean (written back and flushed), or with
  // the error that keeps writeback from getting there after repeated tries.
  Status write_back_everything();

  void add_to(CacheStats& stats) const;

 private:
  // A run of sectors to write back from the bounce buffer, or to discard on the backing device.
  struct Piece {
    uint64_t sector;
    uint32_t sectors;
    size_t buffer_offset;
    bool discard = false;
  };

  void run();
  // One round: collect, write, flush, advance. Returns true when it wrote or advanced anything.
  bool write_back_batch();
  struct CursorUpdate {
    uint32_t slot;
    JournalPosition position;
  };
  // Gathers whole key sets from the journals, copying their live data into the bounce buffer;
  // discards become pieces of their own, for the sectors no newer key has written since.
  void collect(std::vector<Piece>& pieces, std::vector<CursorUpdate>& cursors);
  void grow_bounce(size_t bytes);
  // Writes the pieces (adjacent ones coalesced), then flushes; 0 or a negative errno.
  int write_and_flush(const std::vector<Piece>& pieces);
  void advance_horizon();
  void reclaim_journals();
  void collect_garbage();
  bool gc_needed() const;

  Engine& engine_;
  std::unique_ptr<io::Ring> ring_;
  pmem::PmemWriter writer_;
  std::unique_ptr<std::byte, void (*)(void*)> bounce_;
  size_t bounce_size_ = 0;

  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable progress_;
  bool stop_ = false;
  bool kicked_ = false;
  int last_error_ = 0;
  std::atomic<unsigned> consecutive_failures_{0};

  std::atomic<uint64_t> bytes_{0}, batches_{0}, errors_{0}, gc_runs_{0}, reclaimed_{0};
  std::atomic<bool> stalled_{false};
};

}  // namespace pcached::cache
