#include "cache/writeback.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>

#include "cache/engine.h"
#include "cache/lost_ranges.h"
#include "cache/reclaim_cost.h"
#include "common/thread_name.h"
#include "format/layout.h"

namespace pcached::cache {

namespace {

using format::kSectorSize;

constexpr size_t kDefaultBounce = 4 * MiB;
constexpr uint64_t kMaxWrite = 1 * MiB;
constexpr unsigned kFailuresBeforeGivingUp = 5;
constexpr size_t kMaxSegmentsPerGc = 16;
constexpr uint64_t kMinFreeSegments = 2;
// Every batch ends with a flush of the backing device and an update of the control area. Chasing
// the head of the journal a few KiB at a time spends writeback on those, and takes the CPU and
// the device from the foreground: a batch smaller than kGatherBytes, with nobody waiting for
// writeback, is followed by a pause of kGatherDelay (cut short by a kick) so that the next one
// gathers more.
constexpr uint64_t kGatherBytes = 1 * MiB;
constexpr std::chrono::milliseconds kGatherDelay{50};
// Writeback that only keeps dirty data down takes the CPU only when nothing else wants it: the
// foreground I/O path (the queue threads) and the applications come first. Without that, on a
// machine short of CPU, writeback at full speed takes the CPU the writes it follows need (in the
// test VM, 4 KiB random writes at 14 k IOPS instead of 23 k).
constexpr int kBackgroundNice = 19;

// Whether this thread, once at background priority, may go back to nice `normal`: with
// CAP_SYS_NICE (root), or an RLIMIT_NICE that allows it (the systemd unit's LimitNICE=+0 allows 0).
bool may_return_to(int normal) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NICE, &limit) == 0 &&
      (limit.rlim_cur == RLIM_INFINITY || static_cast<int64_t>(limit.rlim_cur) >= 20 - normal)) {
    return true;
  }
  std::ifstream status("/proc/self/status");
  constexpr unsigned kCapSysNice = 23;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> kCapSysNice) & 1;
  }
  return false;
}

std::byte* aligned_buffer(size_t bytes) { return static_cast<std::byte*>(std::aligned_alloc(4096, bytes)); }

// Counts the completions of a group of submissions and remembers the first failure.
struct Completions {
  size_t pending = 0;
  int error = 0;
};

class GroupedCompletion final : public io::CompletionHandler {
 public:
  GroupedCompletion(Completions& group, int expected, bool any_result = false)
      : group_(group), expected_(expected), any_result_(any_result) {}
  void on_completion(int result) override {
    if (any_result_ && result < 0) spdlog::debug("backing discard failed: {}", std::strerror(-result));
    if (!any_result_ && result != expected_ && group_.error == 0) group_.error = result < 0 ? result : -EIO;
    --group_.pending;
  }

 private:
  Completions& group_;
  int expected_;
  bool any_result_;
};

}  // namespace

Writeback::Writeback(Engine& engine)
    : engine_(engine), writer_(engine.make_writer()), relocation_(engine, writer_), bounce_(aligned_buffer(kDefaultBounce), std::free),
      bounce_size_(kDefaultBounce), tunables_(engine.tunables_) {
  auto ring = io::Ring::create(128);
  if (!ring.ok()) {
    spdlog::critical("cache on {}: writeback cannot start: {}", engine.options_.region_path, ring.status().message());
    std::abort();
  }
  ring_ = std::move(ring.value());
}

Writeback::~Writeback() { stop(); }

void Writeback::start() { thread_ = std::thread([this] { run(); }); }

void Writeback::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  progress_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Writeback::kick() {
  // Writers on a full cache kick on every commit: one that finds a kick pending is done without
  // touching the mutex.
  if (kicked_.exchange(true, std::memory_order_acq_rel)) return;
  {
    // Taken so that the worker cannot miss the flag between testing it and going to sleep.
    std::lock_guard lock(mutex_);
  }
  wake_.notify_all();
}

void Writeback::add_to(CacheStats& stats) const {
  stats.writeback_bytes = bytes_.load();
  stats.writeback_batches = batches_.load();
  stats.writeback_errors = errors_.load();
  stats.writeback_dead_keys_skipped = dead_keys_skipped_.load();
  stats.writeback_lost_bytes = lost_bytes_.load();
  stats.gc_runs = gc_runs_.load();
  stats.segments_reclaimed = reclaimed_.load();
  stats.gc_moved_bytes = relocation_.moved_bytes();
  stats.gc_moved_dirty_bytes = relocation_.moved_dirty_bytes();
  stats.gc_evicted_bytes = evicted_bytes_.load();
  stats.gc_commit_waits = relocation_.commit_waits();
  stats.gc_index_searches = index_searches_.load();
  stats.writeback_stalled = stalled_.load();
  stats.writeback_eager = eager_.load();
}

Writeback::Pace Writeback::pace(const Tunables& tunables) {
  const auto now = std::chrono::steady_clock::now();
  // Eager from the high watermark down to the low one. Dirty data is estimated from above as the
  // live data of the segments that may hold some: writes spread over a small range leave a little
  // dirty data in every segment they pass through, and counting those segments whole made
  // writeback eager (at normal priority, no rate limit) for a few MiB of dirty data.
  const SegmentTable& segments = *engine_.segments_;
  uint64_t dirty_sectors = 0;
  for (uint32_t segment : segments.dirty_data_segments(engine_.clean_horizon_.load())) {
    dirty_sectors += engine_.activity_.live_sectors(segment);
  }
  const uint64_t segment_sectors = (engine_.superblock_.segment_size - format::kSegmentHeaderSize) / kSectorSize;
  const uint64_t dirty_percent = dirty_sectors * 100 / std::max<uint64_t>(1, uint64_t{segments.count()} * segment_sectors);
  if (dirty_percent >= tunables.writeback_high) eager_ = true;
  if (dirty_percent <= tunables.writeback_low) eager_ = false;
  // Idle: no foreground request for writeback_idle_ms.
  const uint64_t requests = engine_.foreground_requests();
  if (requests != last_requests_) {
    last_requests_ = requests;
    last_activity_ = now;
  }
  const bool idle = tunables.writeback_idle_ms != 0 &&
                    now - last_activity_ >= std::chrono::milliseconds(tunables.writeback_idle_ms);
  // The token bucket refills at the rate, holding at most one second's worth.
  const double rate = static_cast<double>(tunables.writeback_rate);
  if (!engine_.options_.freeze_writeback_rate) {
    tokens_ = std::min(rate, tokens_ + rate * std::chrono::duration<double>(now - last_refill_).count());
  }
  last_refill_ = now;
  // A writer waiting for a free segment: the cache is full, whatever frees room soonest.
  if (tunables.writeback_rate == 0 || eager_ || idle || urgent_.load() > 0 || engine_.segments_->waiters() > 0) {
    return {true, SIZE_MAX};
  }
  if (gc_needed(tunables) && gc_needs_writeback_) {
    // GC moves the dirty data of segments little enough live; when that does not find it the
    // segments it wants, it reclaims the oldest once they are clean: writing back the keys below
    // the horizon that makes them clean is all it needs. Everything newer stays dirty (and
    // overwrites of it never reach the device), as the rate limit and the watermarks want.
    if (const uint64_t horizon = horizon_for_gc(tunables); horizon > engine_.clean_horizon_.load()) {
      return {true, SIZE_MAX, horizon};
    }
  }
  if (tokens_ < 1) return {false, 0};
  return {true, static_cast<size_t>(tokens_)};
}

bool Writeback::in_flight(uint64_t sector, uint32_t sectors) const { return in_flight_.overlaps(sector, sectors); }

void Writeback::run() {
  name_this_thread("pcached-wb");
  // What the daemon runs at (nice 0, or what its unit or its caller chose) is normal priority.
  errno = 0;
  normal_nice_ = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  if (errno != 0) normal_nice_ = 0;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stop_) return;
    }
    if (std::chrono::steady_clock::now() - last_decay_ >= std::chrono::seconds(1)) {
      engine_.activity_.decay();
      last_decay_ = std::chrono::steady_clock::now();
    }
    const Tunables& tunables = tunables_.get();
    const Pace allowed = pace(tunables);
    set_background(!eager_ && urgent_.load() == 0 && !gc_needed(tunables));
    const uint64_t written_before = bytes_.load();
    const bool progressed = allowed.go && write_back_batch(allowed.budget, allowed.seq_limit);
    reclaim_journals();
    collect_garbage(tunables);
    progress_.notify_all();
    bool gather = false;
    if (progressed && consecutive_failures_ == 0) {
      const bool backlog = bytes_.load() - written_before >= kGatherBytes;
      if (backlog || urgent_.load() > 0 || eager_ || gc_needed(tunables)) continue;
      gather = true;
    }
    std::unique_lock lock(mutex_);
    // After a failure, back off (50 ms doubling to 5 s) before retrying the same data. When the
    // rate limit holds writeback back, the pause lets the bucket refill.
    auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(engine_.options_.writeback_interval);
    if (gather) {
      pause = std::max(pause, kGatherDelay);
    } else if (consecutive_failures_ > 0) {
      pause = std::chrono::milliseconds(std::min(5000u, 50u << std::min(consecutive_failures_.load(), 7u)));
    } else if (!allowed.go) {
      pause = std::max(pause, std::chrono::milliseconds(10));
    }
    wake_.wait_for(lock, pause, [&] { return stop_ || kicked_.load(std::memory_order_acquire); });
    kicked_.store(false, std::memory_order_release);
  }
}

void Writeback::set_background(bool background) {
  if (background == background_ || priority_refused_ || normal_nice_ >= kBackgroundNice) return;
  if (background && !may_return_to(normal_nice_)) {
    // Down there, writeback could not come back up when it is needed: it stays at normal priority.
    priority_refused_ = true;
    spdlog::info("cache on {}: writeback stays at normal CPU priority (lowering it when it is not needed takes "
                 "CAP_SYS_NICE or an RLIMIT_NICE of 20 to undo)",
                 engine_.options_.region_path);
    return;
  }
  // Per thread on Linux: the queue threads keep their priority.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), background ? kBackgroundNice : normal_nice_) != 0) {
    // Checked above; should the system refuse all the same, stay where we are.
    priority_refused_ = true;
    spdlog::warn("cache on {}: writeback keeps {} CPU priority: {}", engine_.options_.region_path,
                 background_ ? "background" : "normal", std::strerror(errno));
    return;
  }
  background_ = background;
}

void Writeback::grow_bounce(size_t bytes) {
  bounce_.reset(aligned_buffer(bytes));
  bounce_size_ = bytes;
}

bool Writeback::Batch::overlaps(uint64_t begin, uint64_t end) const {
  auto it = taken.upper_bound(begin);
  if (it != taken.begin() && std::prev(it)->second > begin) return true;
  return it != taken.end() && it->first < end;
}

bool Writeback::take_piece(const format::Key& key, const cache::Piece& piece, Batch& batch,
                           std::vector<format::LostRange>& lost) {
  if (key.kind == format::KeyKind::Discard) {
    // Passed down here, in journal order, rather than by the queue when the request came: a
    // discard reaching the device after newer data of its sectors was written back would erase
    // it. Sectors a newer key wrote are left alone; a newer key that comes later goes to a later
    // batch (the overlap check), after this one is done.
    if (piece.cached && piece.extent.seq > key.seq) return true;
    if (batch.overlaps(piece.sector, piece.sector + piece.sectors)) return false;
    batch.pieces.push_back({piece.sector, piece.sectors, 0, /*discard=*/true});
    return true;
  }
  // (Lost data was counted when it was found; it is not read again.)
  if (!piece.cached || piece.extent.seq != key.seq || (piece.extent.flags & Extent::kLost)) return true;
  const uint64_t bytes = uint64_t{piece.sectors} * kSectorSize;
  if (batch.used + bytes > bounce_size_ || batch.overlaps(piece.sector, piece.sector + piece.sectors)) return false;
  std::byte* destination = bounce_.get() + batch.used;
  if (piece.extent.flags & Extent::kZero) {
    std::memset(destination, 0, bytes);
  } else if (Status read = engine_.region_->read(piece.extent.location, destination, bytes); !read.ok()) {
    // The only copy of this data is unreadable: nothing can be written back for it. Its segment
    // is kept out of GC, so that reads of these sectors keep failing with EIO instead of serving
    // the older data the backing device holds.
    spdlog::error("cache on {}: dirty sectors {}+{} lost to a media error: {}", engine_.options_.region_path,
                  piece.sector, piece.sectors, read.message());
    errors_.fetch_add(1);
    lost_bytes_.fetch_add(bytes);
    lost_data_segments_.insert(engine_.superblock_.segment_at(piece.extent.location));
    lost.push_back({piece.sector, piece.sectors, key.seq});
    return true;
  }
  // Registered while the shard lock still keeps the piece from being discarded or replaced:
  // whoever changes it afterwards sees it in flight.
  in_flight_.add(piece.sector, piece.sectors);
  batch.pieces.push_back({piece.sector, piece.sectors, batch.used});
  batch.used += bytes;
  return true;
}

bool Writeback::take_key_set(const std::vector<format::Key>& keys, uint64_t horizon, Batch& batch, bool check_liveness) {
  const size_t pieces_before = batch.pieces.size();
  const size_t used_before = batch.used;
  std::vector<format::LostRange> lost;
  bool fits = true;
  for (const format::Key& key : keys) {
    const bool passed_down = format::has_data(key.kind) || key.kind == format::KeyKind::Zero ||
                             key.kind == format::KeyKind::Discard;
    if (key.seq < horizon || !passed_down) continue;
    if (key.kind == format::KeyKind::WrittenThrough && key.seq >= engine_.run_first_seq_) {
      // Its data reached the device before the key was written: only the flush is owed.
      batch.written_through = true;
      continue;
    }
    // Most keys writeback passes under a steady load were replaced long ago: their sectors' bits
    // say so without a lookup (data is placed, and its bits set, before its key is published).
    if (check_liveness && format::has_data(key.kind) &&
        engine_.live_.dead(key.segment, key.generation,
                           engine_.superblock_.segment_offset(key.segment) + uint64_t{key.offset_sectors} * kSectorSize,
                           key.sectors)) {
      dead_keys_skipped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // The parts of the key no newer key has replaced, copied while the shard lock keeps them from
    // being replaced or evicted under us.
    engine_.index_.lookup(key.sector, key.sectors, [&](std::span<const cache::Piece> found, uint64_t) {
      for (const cache::Piece& piece : found) {
        if (fits) fits = take_piece(key, piece, batch, lost);
      }
    });
    // Marked once the shard lock is released: once clean, such data must not be read from the
    // backing device in its place.
    for (const format::LostRange& range : lost) {
      engine_.index_.mark(range.sector, range.sectors, range.seq, Extent::kLost);
      newly_lost_.push_back(range);
    }
    lost.clear();
    if (!fits) break;
  }
  if (!fits) {
    batch.pieces.resize(pieces_before);
    batch.used = used_before;
    return false;
  }
  for (size_t i = pieces_before; i < batch.pieces.size(); ++i) {
    batch.taken.emplace(batch.pieces[i].sector, batch.pieces[i].sector + batch.pieces[i].sectors);
  }
  return true;
}

void Writeback::collect(size_t budget, uint64_t seq_limit, std::vector<Piece>& pieces,
                        std::vector<CursorUpdate>& cursors, bool& written_through, std::vector<Damage>& damaged) {
  const uint64_t horizon = engine_.clean_horizon_.load();
  const size_t limit = std::min(budget, bounce_size_);
  Batch batch(pieces);
  // The journals' pending key sets are taken in sequence order, merged across the journals: the
  // oldest dirty data goes first, whichever queue wrote it. The clean horizon is the lowest number
  // still pending in any journal, and only its advance lets journal segments go. (Taken one
  // journal after the other, a budget smaller than the first journal's live data never reached
  // the others: with two queues the horizon stood still while the first queue's newest data was
  // written back, and the journals grew until they crowded out the data.)
  struct Scan {
    Scan(Engine& engine, uint32_t slot, JournalPosition cursor, JournalPosition published)
        : slot(slot), cursor(cursor), published(published),
          reader(*engine.region_, engine.superblock_, slot, cursor), done(cursor) {
      read_ahead();
    }

    uint32_t slot;
    JournalPosition cursor;
    JournalPosition published;
    JournalReader reader;
    JournalPosition done;           // after the last key set taken
    std::vector<format::Key> keys;  // the next key set, read ahead
    bool has_next = false;

    void read_ahead() { has_next = reader.next(keys, &published); }
    // A set's keys are numbered in a row (EngineQueue::number): its first has the lowest number.
    // An empty set has nothing to write back and is taken at once.
    uint64_t first_seq() const { return keys.empty() ? 0 : keys.front().seq; }
  };
  std::deque<Scan> scans;  // (a deque: the readers stay where they are)
  for (uint32_t slot = 0; slot < format::kMaxJournals; ++slot) {
    JournalState& journal = engine_.journals_[slot];
    JournalPosition cursor, published;
    bool relocation = false;
    {
      std::lock_guard lock(journal.mutex);
      if (!journal.in_use) continue;
      cursor = journal.cursor;
      published = journal.published;
      relocation = journal.relocation;
    }
    if (cursor == published) continue;
    if (relocation) {
      // Moved data is written back by the keys it moved from: passed, so that the journal's
      // segments can go once the horizon is past their keys.
      cursors.push_back({slot, published});
      continue;
    }
    scans.emplace_back(engine_, slot, cursor, published);
  }
  std::vector<format::Key> keys;
  while (batch.used < limit) {
    Scan* oldest = nullptr;
    for (Scan& scan : scans) {
      if (scan.has_next && (oldest == nullptr || scan.first_seq() < oldest->first_seq())) oldest = &scan;
    }
    if (oldest == nullptr) break;
    // Each journal's sets come in sequence order: once the oldest set of them all is numbered past
    // the limit, every one is.
    if (!oldest->keys.empty() && oldest->first_seq() >= seq_limit) break;
    keys.swap(oldest->keys);
    if (!take_key_set(keys, horizon, batch)) {
      // One key set larger than the whole buffer: make room and try it again next round.
      if (pieces.empty()) grow_bounce(bounce_size_ * 2);
      break;
    }
    oldest->done = oldest->reader.position();
    oldest->read_ahead();
  }
  for (const Scan& scan : scans) {
    if (!(scan.done == scan.cursor)) cursors.push_back({scan.slot, scan.done});
    // Stopped short of its published end: what is there cannot be read, or is not a key set.
    if (!scan.has_next && !(scan.reader.position() == scan.published)) {
      damaged.push_back({scan.slot, scan.reader.position(), scan.published,
                         scan.reader.damage().empty() ? "no key set where one was published" : scan.reader.damage()});
    }
  }
  if (batch.written_through) written_through = true;
}

int Writeback::write_and_flush(const std::vector<Piece>& pieces) {
  // With no pieces this is the flush alone (keys whose data was written through).
  Completions group;
  std::vector<std::unique_ptr<GroupedCompletion>> handlers;
  size_t i = 0;
  while (i < pieces.size()) {
    if (pieces[i].discard) {
      // Adjacent ones together (a long discard comes in one piece per index stripe).
      uint64_t sectors = pieces[i].sectors;
      size_t j = i + 1;
      while (j < pieces.size() && pieces[j].discard && pieces[j].sector == pieces[i].sector + sectors) {
        sectors += pieces[j].sectors;
        ++j;
      }
      // Advisory: a device that cannot discard (or fails to) keeps the old data, which is as
      // good as any for discarded sectors.
      handlers.push_back(std::make_unique<GroupedCompletion>(group, 0, /*any_result=*/true));
      ++group.pending;
      engine_.backing_->discard(*ring_, pieces[i].sector * kSectorSize, sectors * kSectorSize, handlers.back().get());
      i = j;
      continue;
    }
    // Coalesce runs that are adjacent on the device and in the buffer.
    uint64_t sector = pieces[i].sector;
    uint64_t sectors = pieces[i].sectors;
    const size_t offset = pieces[i].buffer_offset;
    size_t j = i + 1;
    while (j < pieces.size() && !pieces[j].discard && pieces[j].sector == sector + sectors &&
           pieces[j].buffer_offset == offset + sectors * kSectorSize && (sectors + pieces[j].sectors) * kSectorSize <= kMaxWrite) {
      sectors += pieces[j].sectors;
      ++j;
    }
    const auto bytes = static_cast<uint32_t>(sectors * kSectorSize);
    handlers.push_back(std::make_unique<GroupedCompletion>(group, static_cast<int>(bytes)));
    ++group.pending;
    engine_.backing_->write(*ring_, bounce_.get() + offset, sector * kSectorSize, bytes, handlers.back().get());
    i = j;
  }
  while (group.pending > 0) ring_->wait_and_dispatch(std::chrono::milliseconds(100));
  if (group.error != 0) return group.error;

  // Invariant 4: keys become clean only after their data is on the device and the device flushed.
  handlers.push_back(std::make_unique<GroupedCompletion>(group, 0));
  ++group.pending;
  engine_.backing_->flush(*ring_, handlers.back().get());
  while (group.pending > 0) ring_->wait_and_dispatch(std::chrono::milliseconds(100));
  return group.error;
}

bool Writeback::write_back_batch(size_t budget, uint64_t seq_limit) {
  std::vector<Piece> pieces;
  std::vector<CursorUpdate> cursors;
  std::vector<Damage> damaged;
  bool written_through = false;
  collect(budget, seq_limit, pieces, cursors, written_through, damaged);
  record_lost();
  {
    // Every write of the batch is complete when this block ends, whatever happened.
    struct ClearInFlight {
      Writeback& self;
      ~ClearInFlight() { self.in_flight_.clear(); }
    } clear_in_flight{*this};
    if (!pieces.empty() || written_through) {
      const int result = write_and_flush(pieces);
      if (result != 0) {
        note_write_failure(result);
        return false;
      }
      uint64_t bytes = 0;
      for (const Piece& piece : pieces) bytes += piece.discard ? 0 : uint64_t{piece.sectors} * kSectorSize;
      tokens_ -= static_cast<double>(bytes);
      bytes_.fetch_add(bytes);
      batches_.fetch_add(1);
    }
  }
  for (const CursorUpdate& update : cursors) {
    std::lock_guard lock(engine_.journals_[update.slot].mutex);
    engine_.journals_[update.slot].cursor = update.position;
  }
  for (const Damage& damage : damaged) {
    if (!pass_damage(damage)) return false;
  }
  stalled_ = false;
  consecutive_failures_ = 0;
  const uint64_t before = engine_.clean_horizon_.load();
  advance_horizon();
  return !pieces.empty() || !cursors.empty() || !damaged.empty() || engine_.clean_horizon_.load() != before;
}

void Writeback::note_write_failure(int result) {
  errors_.fetch_add(1);
  write_failures_.fetch_add(1);
  stalled_ = true;
  ++consecutive_failures_;
  {
    std::lock_guard lock(mutex_);
    last_error_ = -result;
  }
  spdlog::warn("cache on {}: writeback to {} failed ({}), attempt {}; dirty data stays on pmem and is retried",
               engine_.options_.region_path, engine_.backing_->path(), std::strerror(-result), consecutive_failures_);
}

JournalPosition Writeback::where_journal_goes_on(const Damage& damage, uint64_t& until) const {
  std::vector<ChainSegment> chain;
  {
    JournalState& journal = engine_.journals_[damage.slot];
    std::lock_guard lock(journal.mutex);
    chain.assign(journal.chain.begin(), journal.chain.end());
  }
  const format::Superblock& superblock = engine_.superblock_;
  // The next whole record in the damaged segment or a later one of its chain (as the writer keeps
  // it in DRAM: the link may be what was lost), else the journal's end.
  until = engine_.next_seq_.load();
  auto segment = std::find_if(chain.begin(), chain.end(), [&](const ChainSegment& c) { return c.segment == damage.at.segment; });
  uint64_t from = uint64_t{damage.at.offset} + format::kKeySetAlignment;
  for (; segment != chain.end(); ++segment) {
    const bool last = segment->segment == damage.published.segment;
    const uint64_t end = last ? damage.published.offset : superblock.segment_size;
    if (auto found = find_key_set(*engine_.region_, superblock, segment->segment, segment->generation, from, end)) {
      if (format::holds_keys(found->header.kind)) until = found->header.first_seq;
      return {segment->segment, segment->generation, found->offset};
    }
    if (last) break;
    from = format::kSegmentHeaderSize;
  }
  return damage.published;
}

bool Writeback::write_back_numbered(uint64_t from, uint64_t until) {
  const std::vector<std::pair<uint64_t, Extent>> extents = engine_.index_.extents_numbered(from, until);
  std::vector<format::Key> key(1);
  size_t next = 0;
  do {
    std::vector<Piece> pieces;
    Batch batch(pieces);
    while (next < extents.size()) {
      const auto& [sector, extent] = extents[next];
      key[0] = format::Key{};
      key[0].sector = sector;
      key[0].sectors = extent.sectors;
      key[0].seq = extent.seq;
      key[0].kind = (extent.flags & Extent::kDiscarded) ? format::KeyKind::Discard
                    : (extent.flags & Extent::kZero)     ? format::KeyKind::Zero
                                                         : format::KeyKind::Write;
      if (!take_key_set(key, from, batch, /*check_liveness=*/false)) {
        if (pieces.empty()) grow_bounce(bounce_size_ * 2);
        break;
      }
      ++next;
    }
    record_lost();
    // (Also with no pieces: written-through data among them is owed a flush.)
    const int result = write_and_flush(pieces);
    in_flight_.clear();
    if (result != 0) {
      note_write_failure(result);
      return false;
    }
    for (const Piece& piece : pieces) bytes_.fetch_add(piece.discard ? 0 : uint64_t{piece.sectors} * kSectorSize);
    batches_.fetch_add(1);
  } while (next < extents.size());
  return true;
}

bool Writeback::pass_damage(const Damage& damage) {
  uint64_t until = 0;  // the damaged keys are numbered below it
  const JournalPosition resume = where_journal_goes_on(damage, until);
  const uint64_t horizon = engine_.clean_horizon_.load();
  spdlog::error("cache on {}: journal {} cannot be read ({}); its dirty data numbered {}..{} is written back from the "
                "index instead, and the journal goes on at segment {} offset {}",
                engine_.options_.region_path, damage.slot, damage.what, horizon, until, resume.segment, resume.offset);
  errors_.fetch_add(1);
  if (!write_back_numbered(horizon, until)) return false;
  JournalState& journal = engine_.journals_[damage.slot];
  std::lock_guard lock(journal.mutex);
  journal.cursor = resume;
  return true;
}

void Writeback::record_lost() {
  if (newly_lost_.empty()) return;
  // Ordering: durable before the horizon passes their keys (which says their data is on the
  // backing device), so that after a crash the sectors fail their reads instead of serving the
  // older data there.
  const uint64_t next = engine_.next_seq_.load();
  engine_.control_->update(writer_, [&](format::ControlArea& control) {
    control.lost = add_lost_ranges(control.lost, newly_lost_);
    control.next_seq = std::max(control.next_seq, next);  // every key in the list is numbered below it
  });
  if (engine_.control_->lost().size() == format::kMaxLostRanges) {
    spdlog::error("cache on {}: dirty data lost to media errors in {} ranges or more: the closest ranges are merged, "
                  "and after a restart the sectors between them fail their reads too",
                  engine_.options_.region_path, format::kMaxLostRanges);
  }
  newly_lost_.clear();
}

void Writeback::advance_horizon() {
  const uint64_t horizon = engine_.compute_horizon();
  if (horizon <= engine_.clean_horizon_.load()) return;
  const uint64_t next = engine_.next_seq_.load();
  // Lost sectors written again since (or discarded) need no error any more. (Only this thread
  // changes the list.)
  const std::vector<format::LostRange> lost = engine_.control_->lost();
  std::optional<std::vector<format::LostRange>> remaining;
  if (!lost.empty()) remaining = still_lost(engine_.index_, lost);
  engine_.control_->update(writer_, [&](format::ControlArea& control) {
    control.clean_horizon = horizon;
    control.next_seq = std::max({control.next_seq, next, horizon});
    if (remaining) control.lost = *remaining;
  });
  engine_.clean_horizon_.store(horizon, std::memory_order_release);
  // Their tombstones go too: every key numbered before them is in the index by now.
  engine_.pending_discards_.remove_below(horizon, [&](uint64_t sector, uint64_t sectors) {
    engine_.index_.drop_tombstones(sector, static_cast<uint32_t>(sectors), horizon);
  });
}

void Writeback::reclaim_journals() {
  const uint64_t horizon = engine_.clean_horizon_.load();
  std::vector<std::pair<uint32_t, format::JournalHead>> heads;
  std::vector<uint32_t> emptied;
  std::vector<uint32_t> released;
  for (uint32_t slot = 0; slot < format::kMaxJournals; ++slot) {
    JournalState& journal = engine_.journals_[slot];
    std::lock_guard lock(journal.mutex);
    if (!journal.in_use || journal.chain.empty()) continue;
    bool changed = false;
    while (!journal.chain.empty()) {
      const ChainSegment front = journal.chain.front();
      const bool tail = journal.chain.size() == 1;
      if (tail && (journal.active || !(journal.cursor == journal.published))) break;
      if (front.max_seq >= horizon) break;
      // Every key in it is clean: the segment can go once the control area no longer names it.
      journal.chain.pop_front();
      released.push_back(front.segment);
      changed = true;
      if (journal.cursor.segment == front.segment && !journal.chain.empty()) {
        journal.cursor = {journal.chain.front().segment, journal.chain.front().generation,
                          static_cast<uint32_t>(format::kSegmentHeaderSize)};
      }
    }
    if (!changed) continue;
    if (journal.chain.empty()) {
      heads.emplace_back(slot, format::JournalHead{});
      emptied.push_back(slot);
    } else {
      heads.emplace_back(slot, format::JournalHead{journal.chain.front().segment, journal.chain.front().generation});
    }
  }
  if (heads.empty()) return;
  // Ordering: the control area stops naming the segments before they can be reused.
  engine_.control_->update(writer_, [&](format::ControlArea& control) {
    for (const auto& [slot, head] : heads) control.journals[slot] = head;
  });
  for (uint32_t slot : emptied) {
    std::lock_guard lock(engine_.journals_[slot].mutex);
    engine_.journals_[slot].in_use = false;
  }
  for (uint32_t segment : released) engine_.release_segment(segment);
}

void Writeback::order_by_cost(std::vector<uint32_t>& candidates) const {
  // Ties keep the oldest-sealed order.
  const SegmentActivity& activity = engine_.activity_;
  const double capacity = static_cast<double>((engine_.superblock_.segment_size - format::kSegmentHeaderSize) / kSectorSize);
  std::vector<std::pair<double, uint32_t>> ranked;
  ranked.reserve(candidates.size());
  for (uint32_t segment : candidates) {
    const uint64_t live = activity.live_sectors(segment);
    ranked.emplace_back(reclaim_cost(static_cast<double>(live) / capacity, activity.heat(segment),
                                     relocation_.worth_moving(live)),
                        segment);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < ranked.size(); ++i) candidates[i] = ranked[i].second;
}

uint64_t Writeback::segments_allowed(const Tunables& tunables) const {
  // A small cache keeps a few segments free even at a high threshold, so that a queue that fills
  // its segment rarely has to wait for GC to reclaim one.
  const uint64_t total = engine_.segments_->count();
  return std::min(total * tunables.gc_threshold / 100, total > kMinFreeSegments ? total - kMinFreeSegments : 0);
}

bool Writeback::gc_needed(const Tunables& tunables) const {
  const SegmentTable& segments = *engine_.segments_;
  const uint64_t used = segments.count() - segments.free_count();
  return segments.waiters() > 0 || used > segments_allowed(tunables);
}

size_t Writeback::segments_wanted(const Tunables& tunables) const {
  const SegmentTable& segments = *engine_.segments_;
  const uint64_t used = segments.count() - segments.free_count();
  const uint64_t allowed = segments_allowed(tunables);
  return std::clamp<size_t>(used > allowed ? used - allowed : 1, 1, kMaxSegmentsPerGc);
}

uint64_t Writeback::horizon_for_gc(const Tunables& tunables) const {
  // Not counted: segments kept for lost data, and clean ones that hold so much live data that GC
  // would rather not take them (moved or filled data, still mostly live): counting them, writeback
  // would stop short and leave GC those to evict.
  return engine_.segments_->horizon_reclaiming(segments_wanted(tunables), [&](uint32_t segment, const SegmentInfo& info) {
    return lost_data_segments_.contains(segment) ||
           (info.max_dirty_seq == 0 && !relocation_.worth_moving(engine_.activity_.live_sectors(segment)));
  });
}

std::vector<Writeback::Victim> Writeback::choose_victims(const Tunables& tunables, size_t wanted, uint64_t horizon) {
  const SegmentTable& segments = *engine_.segments_;
  std::vector<uint32_t> candidates = segments.reclaimable_data(UINT64_MAX, SIZE_MAX);
  std::erase_if(candidates, [&](uint32_t segment) { return lost_data_segments_.contains(segment); });
  if (tunables.gc_policy == GcPolicy::CostBenefit) order_by_cost(candidates);
  std::vector<Victim> victims;
  uint64_t dirty_live = 0;
  size_t dirty_count = 0;
  for (uint32_t segment : candidates) {
    if (victims.size() == wanted) break;
    const SegmentInfo info = segments.info(segment);
    const uint64_t live = engine_.activity_.live_sectors(segment);
    const bool dirty = info.max_dirty_seq >= horizon;
    const bool move = relocation_.worth_moving(live);
    if (dirty) {
      // Past the journal room of one run, the next dirty candidates wait for the next run.
      if (!move || dirty_live + live > relocation_.dirty_sectors_per_run()) continue;
      dirty_live += live;
      ++dirty_count;
    }
    victims.push_back({segment, info, dirty, move});
  }
  if (dirty_count > 0 && !relocation_.reserve_journal(dirty_live, dirty_count)) {
    std::erase_if(victims, [](const Victim& victim) { return victim.dirty; });
  }
  return victims;
}

void Writeback::release_victims(const std::vector<uint32_t>& segments) {
  const format::Superblock& superblock = engine_.superblock_;
  for (uint32_t segment : segments) {
    const uint64_t start = superblock.segment_offset(segment);
    engine_.checksums_.forget(start, start + superblock.segment_size);
    engine_.release_segment(segment);
  }
  reclaimed_.fetch_add(segments.size());
}

void Writeback::collect_garbage(const Tunables& tunables) {
  // A run whose moves could not be made durable left its victims in place: they go once the moves
  // are, and until then GC moves nothing more (nothing else is recorded behind them).
  if (!awaiting_commit_.empty()) {
    if (!relocation_.commit()) return;
    release_victims(awaiting_commit_);
    awaiting_commit_.clear();
  }
  if (!gc_needed(tunables)) return;
  relocation_.seal_when_short();
  const size_t wanted = segments_wanted(tunables);
  std::vector<Victim> victims = choose_victims(tunables, wanted, engine_.clean_horizon_.load());
  // Short of victims without writeback: the next rounds write back what the oldest need.
  gc_needs_writeback_ = victims.size() < wanted;
  if (victims.empty()) return;

  const format::Superblock& superblock = engine_.superblock_;
  const auto victim_of = [&](uint64_t location) -> const Victim* {
    // A few victims (kMaxSegmentsPerGc): searched linearly.
    const auto it = std::ranges::find(victims, superblock.segment_at(location), &Victim::segment);
    return it == victims.end() ? nullptr : &*it;
  };
  // Where little of their data is live, it moves to the worker's own segment (gc_relocation.h);
  // the rest is dropped from the index, which sends its reads to the backing device. Dirty data is
  // never dropped: if it cannot move, it and its segment stay.
  std::set<uint32_t> kept;
  const auto in_victim = [&](uint64_t location) {
    return location >= superblock.data_start && victim_of(location) != nullptr;
  };
  const auto relocate = [&](uint64_t sector, const Extent& extent) {
    const Victim& victim = *victim_of(extent.location);
    ExtentIndex::Relocation relocation;
    if (victim.move) relocation = relocation_.move(sector, extent, tunables.data_crc);
    if (relocation.action == ExtentIndex::Relocation::Action::Keep) kept.insert(victim.segment);
    return relocation;
  };
  std::vector<uint32_t> segments;  // for the contents lists and the log
  for (const Victim& victim : victims) segments.push_back(victim.segment);
  uint64_t evicted = engine_.index_.reclaim(engine_.contents_.ranges(segments, &engine_.live_), in_victim, relocate);
  // The live counts are kept apart from the contents lists: a victim they say still holds data
  // means a placement was never noted. Its data must not be lost with the segment: look everywhere.
  const bool missed = std::ranges::any_of(victims, [&](const Victim& victim) {
    return !kept.contains(victim.segment) && engine_.activity_.live_sectors(victim.segment) > 0;
  });
  if (missed) {
    index_searches_.fetch_add(1);
    spdlog::error("cache on {}: GC found live data in segments {} that their contents lists do not name; "
                  "searched the whole index for it",
                  engine_.options_.region_path, fmt::join(segments, ","));
    evicted += engine_.index_.reclaim_everywhere(in_victim, relocate);
  }
  std::erase_if(victims, [&](const Victim& victim) { return kept.contains(victim.segment); });
  // Invariant 5: a segment whose keys are not all below the horizon is retired in GC's journal,
  // with the moves of its dirty data, durably, before it is released; the next user of a segment
  // writes a higher generation before any key can name it.
  for (const Victim& victim : victims) {
    if (victim.dirty) relocation_.retire(victim.segment, victim.info.generation, victim.info.max_dirty_seq);
  }
  if (engine_.options_.gc_moved && relocation_.uncommitted()) engine_.options_.gc_moved();
  std::vector<uint32_t> released;
  for (const Victim& victim : victims) released.push_back(victim.segment);
  if (!relocation_.commit()) {
    awaiting_commit_ = std::move(released);
  } else {
    release_victims(released);
  }
  relocation_.open_if_starved();
  if (!kept.empty()) gc_needs_writeback_ = true;
  gc_runs_.fetch_add(1);
  evicted_bytes_.fetch_add(evicted * kSectorSize);
}

void Writeback::interrupt_waits() {
  {
    std::lock_guard lock(mutex_);
    interrupted_ = true;
  }
  progress_.notify_all();
}

Status Writeback::write_back_everything(const std::function<void(uint64_t dirty_bytes)>& progress) {
  const uint64_t target = engine_.next_seq_.load();
  const uint64_t failures_before = write_failures_.load();
  // Someone waits: no rate limit until it is done.
  urgent_.fetch_add(1);
  kick();
  std::unique_lock lock(mutex_);
  auto done = [&] {
    return stop_ || interrupted_ || engine_.clean_horizon_.load() >= target ||
           write_failures_.load() - failures_before >= kFailuresBeforeGivingUp;
  };
  while (!progress_.wait_for(lock, std::chrono::milliseconds(250), done)) {
    if (!progress) continue;
    lock.unlock();  // the count scans the index; the worker must not wait for it
    progress(engine_.index_.sectors_at_or_above(engine_.clean_horizon_.load()) * kSectorSize);
    lock.lock();
  }
  urgent_.fetch_sub(1);
  if (engine_.clean_horizon_.load() >= target) return Status();
  if (stop_) return Status::error(ESHUTDOWN, "writeback stopped");
  if (interrupted_) {
    return Status::error(ECANCELED, "interrupted before every dirty byte was written back (the rest stays on pmem)");
  }
  return Status::error(last_error_ != 0 ? last_error_ : EIO,
                       "writeback to " + engine_.backing_->path() + " keeps failing: " + std::strerror(last_error_));
}

}  // namespace pcached::cache
