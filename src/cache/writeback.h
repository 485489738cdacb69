// The background worker of a cache: writes dirty data back to the backing device in journal
// order, moves the clean horizon, and reclaims journal and data segments (GC). It runs on its own
// thread with its own io_uring, so queue threads never wait for it except when no segment is free.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cache/gc_relocation.h"
#include "cache/journal.h"
#include "cache/sector_ranges.h"
#include "cache/segment_table.h"
#include "cache/tunables_store.h"
#include "format/control_area.h"
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
  // progress (optional) gets the dirty bytes left about four times a second.
  Status write_back_everything(const std::function<void(uint64_t dirty_bytes)>& progress = {});
  // Makes write_back_everything() return ECANCELED, the calls waiting now and every later one.
  void interrupt_waits();

  void add_to(CacheStats& stats) const;

  // Whether data of [sector, sector+sectors) is on its way to the backing device: collected for
  // the current batch and not yet written. Such data may have left the index meanwhile (a
  // discard, a newer write), so the index alone cannot say that a write to the device now would
  // not be overwritten by it; a write that must not be goes into the cache instead.
  bool in_flight(uint64_t sector, uint32_t sectors) const;

 private:
  // A run of sectors to write back from the bounce buffer, or to discard on the backing device.
  struct Piece {
    uint64_t sector;
    uint32_t sectors;
    size_t buffer_offset;
    bool discard = false;
  };

  void run();
  // Whether this round may write back, how many bytes (the rate limit's tokens) and how far (key
  // sets numbered from seq_limit on wait), from the watermarks, idleness, waiting flushes and GC
  // pressure.
  struct Pace {
    bool go;
    size_t budget;
    uint64_t seq_limit = UINT64_MAX;
  };
  Pace pace(const Tunables& tunables);
  // One round: collect up to budget bytes of key sets below seq_limit, write, flush, advance.
  // Returns true when it wrote or advanced anything.
  bool write_back_batch(size_t budget, uint64_t seq_limit);
  struct CursorUpdate {
    uint32_t slot;
    JournalPosition position;
  };
  // Gathers whole key sets from the journals, copying their live data into the bounce buffer;
  // discards become pieces of their own, for the sectors no newer key has written since;
  // written_through is set when it passed keys whose data is on the device but maybe unflushed.
  // A journal collect() could not read before its published end (a media error, or damage).
  struct Damage {
    uint32_t slot;
    JournalPosition at;  // the record that could not be read
    JournalPosition published;
    std::string what;
  };
  void collect(size_t budget, uint64_t seq_limit, std::vector<Piece>& pieces, std::vector<CursorUpdate>& cursors,
               bool& written_through, std::vector<Damage>& damaged);
  // Moves a journal's writeback past records it cannot read. Their keys are unknown, but a
  // journal numbers its key sets in order, so theirs are numbered below the first record it has
  // past the damage: every dirty extent of the index numbered from the clean horizon up to there
  // is written back (and flushed), then the cursor goes to that record. (Extents of other
  // journals' keys among them are written again when their journals get there.) False if the
  // backing device failed; the cursor stays, and the next round tries again.
  bool pass_damage(const Damage& damage);
  // The first whole record of the damaged journal past the damage (or its published end), and in
  // `until` the number its keys start at (the next number to be given when that is unknown).
  JournalPosition where_journal_goes_on(const Damage& damage, uint64_t& until) const;
  // Writes back, and flushes, the dirty extents of the index numbered in [from, until); false if
  // the backing device failed.
  bool write_back_numbered(uint64_t from, uint64_t until);
  // Counts a batch the backing device failed to take, for the backoff and the flush's give-up.
  void note_write_failure(int result);
  // A batch as collect() gathers it. No two of its pieces may overlap: the device may store them
  // in any order.
  struct Batch {
    explicit Batch(std::vector<Piece>& gathered) : pieces(gathered) {}
    std::vector<Piece>& pieces;
    size_t used = 0;                     // bytes of the bounce buffer
    std::map<uint64_t, uint64_t> taken;  // sector ranges of the key sets taken: start -> end
    bool written_through = false;
    bool overlaps(uint64_t begin, uint64_t end) const;
  };
  // Adds one key set's live data (keys below the clean horizon are clean already) to the batch.
  // False, and the batch as it was, if the set does not fit: the bounce buffer is full, or a
  // piece overlaps one taken before (it goes to a later batch, after that one is on the device).
  // (check_liveness: keys the sectors' bits show replaced are passed without a lookup; only for
  // keys read from a journal, whose location is where they were written.)
  bool take_key_set(const std::vector<format::Key>& keys, uint64_t horizon, Batch& batch, bool check_liveness = true);
  // One piece of a key, found in the index under its shard's lock; false if it does not fit.
  // Data that cannot be read is recorded in `lost` instead (marked once the lock is released).
  bool take_piece(const format::Key& key, const cache::Piece& piece, Batch& batch,
                  std::vector<format::LostRange>& lost);
  void grow_bounce(size_t bytes);
  // Writes the pieces (adjacent ones coalesced), then flushes; 0 or a negative errno.
  int write_and_flush(const std::vector<Piece>& pieces);
  // Puts the dirty data collect found unreadable into the control area's lost ranges.
  void record_lost();
  void advance_horizon();
  void reclaim_journals();
  void collect_garbage(const Tunables& tunables);
  struct Victim {
    uint32_t segment;
    SegmentInfo info;
    bool dirty;  // keys at or above the clean horizon name it: retired once its dirty data moved
    bool move;   // little enough of it live for its live data to move rather than be dropped
  };
  // Up to `wanted` segments, best first: clean sealed ones, and dirty ones little enough live for
  // their dirty data to move (gc_relocation.h), as many as one run's journal room allows.
  std::vector<Victim> choose_victims(const Tunables& tunables, size_t wanted, uint64_t horizon);
  // Gives reclaimed segments back to the allocator (their data moved or gone, the moves durable).
  void release_victims(const std::vector<uint32_t>& segments);
  // Cost-benefit order of GC candidates (given oldest-sealed first).
  void order_by_cost(std::vector<uint32_t>& candidates) const;
  // How many segments may be in use before GC reclaims some: gc_threshold's share, but a couple
  // short of all of them.
  uint64_t segments_allowed(const Tunables& tunables) const;
  bool gc_needed(const Tunables& tunables) const;
  // How many segments GC should reclaim now (at least 1, at most kMaxSegmentsPerGc).
  size_t segments_wanted(const Tunables& tunables) const;
  // The clean horizon at which GC finds the segments it wants: writeback driven by GC goes that
  // far and no further. UINT64_MAX when fewer data segments are sealed.
  uint64_t horizon_for_gc(const Tunables& tunables) const;
  // The worker's CPU priority: background (nice kBackgroundNice) while writeback only keeps dirty
  // data down, normal when it is needed (above the high watermark, GC short of room, a flush or
  // detach waiting).
  void set_background(bool background);

  Engine& engine_;
  std::unique_ptr<io::Ring> ring_;
  pmem::PmemWriter writer_;
  GcRelocation relocation_;  // after writer_, which it writes with
  std::unique_ptr<std::byte, void (*)(void*)> bounce_;
  size_t bounce_size_ = 0;
  TunablesView tunables_;  // the worker thread's copy

  std::chrono::steady_clock::time_point last_decay_ = std::chrono::steady_clock::now();
  // Pacing, on the worker thread.
  double tokens_ = 0;
  std::chrono::steady_clock::time_point last_refill_ = std::chrono::steady_clock::now();
  uint64_t last_requests_ = 0;
  std::chrono::steady_clock::time_point last_activity_ = std::chrono::steady_clock::now();
  std::atomic<unsigned> urgent_{0};  // write_back_everything() callers waiting
  bool interrupted_ = false;          // interrupt_waits() was called (under mutex_)
  std::atomic<bool> eager_{false};   // between the watermarks, coming down from the high one
  bool background_ = false;          // the worker runs at background priority
  // GC's last run found fewer victims than it wanted without writeback making more clean.
  bool gc_needs_writeback_ = false;
  int normal_nice_ = 0;              // the worker's priority when it is needed (as it started)
  bool priority_refused_ = false;    // the system refused a priority change (logged once)

  SectorRanges in_flight_;  // sector ranges of the batch being written

  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable progress_;
  bool stop_ = false;
  std::atomic<bool> kicked_{false};
  int last_error_ = 0;
  std::atomic<unsigned> consecutive_failures_{0};

  std::atomic<uint64_t> bytes_{0}, batches_{0}, errors_{0}, gc_runs_{0}, reclaimed_{0}, evicted_bytes_{0},
      index_searches_{0};
  std::atomic<uint64_t> dead_keys_skipped_{0};
  // Batches the backing device failed to take (errors_ counts data lost to media errors too):
  // what makes a flush give up.
  std::atomic<uint64_t> write_failures_{0};
  // Dirty data whose only copy hit a media error, and the segments that hold it (never reclaimed
  // during this attach). Touched by the worker thread only.
  std::atomic<uint64_t> lost_bytes_{0};
  std::set<uint32_t> lost_data_segments_;
  std::vector<format::LostRange> newly_lost_;  // found by collect, not yet in the control area
  std::atomic<bool> stalled_{false};
  // A GC run's victims, kept until its moves are durable (GcRelocation::commit). Worker thread only.
  std::vector<uint32_t> awaiting_commit_;
};

}  // namespace pcached::cache
