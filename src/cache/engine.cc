#include "cache/engine.h"

#include <spdlog/spdlog.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <ctime>
#include <random>

#include "cache/commit_protocol.h"
#include "cache/persistence_policy.h"
#include "cache/queue.h"
#include "cache/writeback.h"
#include "common/cycle_clock.h"
#include "format/layout.h"
#include "format/segment_header.h"

namespace pcached::cache {

namespace {

using format::Superblock;

std::string describe_backing(const format::BackingRecord& record) {
  const std::string size = format_size(record.size);
  if (record.kind == format::BackingKind::BlockDevice) {
    return "block device " + std::to_string(major(record.device)) + ":" + std::to_string(minor(record.device)) + " of " +
           size;
  }
  return "file (device " + std::to_string(major(record.device)) + ":" + std::to_string(minor(record.device)) +
         ", inode " + std::to_string(record.inode) + ") of " + size;
}

std::string uuid_text(const std::array<uint8_t, 16>& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += kHex[uuid[i] >> 4];
    text += kHex[uuid[i] & 15];
  }
  return text;
}

Result<Superblock> read_superblock_copy(const pmem::Region& region, unsigned copy) {
  std::array<std::byte, format::kSuperblockSize> bytes;
  if (Status status = region.read(format::kSuperblockOffsets[copy], bytes.data(), bytes.size()); !status.ok()) {
    return status;
  }
  return format::decode_superblock(bytes);
}

void write_superblock_copy(pmem::PmemWriter& writer, const Superblock& superblock, unsigned copy) {
  std::array<std::byte, format::kSuperblockSize> bytes;
  format::encode_superblock(superblock, bytes);
  writer.copy_persist(format::kSuperblockOffsets[copy], bytes.data(), bytes.size());
}

// Copy 0 first, then copy 1: a cut in between leaves copies that differ only in what this
// rewrite changed (version, flags), which examine_region takes for an update cut short.
void rewrite_superblock(pmem::PmemWriter& writer, const Superblock& superblock) {
  write_superblock_copy(writer, superblock, 0);
  write_superblock_copy(writer, superblock, 1);
}

SharedFenceClasses measure_commit_protocol(pmem::PmemWriter& writer) {
  return cache::measure_commit_protocol(writer, format::kScratchOffset, format::kScratchLength);
}

Result<Superblock> format_region(const CacheOptions& options, const pmem::Region& region,
                                 const backing::BackingDevice& backing, pmem::PmemWriter& writer) {
  const std::string& path = region.path();
  Superblock sb;
  std::random_device entropy;
  for (uint8_t& byte : sb.uuid) byte = static_cast<uint8_t>(entropy());
  sb.created_unix = static_cast<uint64_t>(std::time(nullptr));
  sb.region_size = region.size();
  sb.segment_size = options.segment_size != 0 ? options.segment_size : format::default_segment_size(region.size());
  if (!format::valid_segment_size(sb.segment_size)) {
    return Status::error(EINVAL, "segment size " + std::to_string(sb.segment_size) + " must be " +
                                     format::kSegmentSizeRule);
  }
  const uint64_t segments = (region.size() - format::kDataStart) / sb.segment_size;
  if (region.size() <= format::kDataStart || segments < format::kMinSegments) {
    return Status::error(ENOSPC, "pmem region " + path + " of " + format_size(region.size()) + " is too small for " +
                                     std::to_string(format::kMinSegments) + " segments of " +
                                     format_size(sb.segment_size) + " (needs at least " +
                                     format_size(format::kDataStart + format::kMinSegments * sb.segment_size) + ")");
  }
  sb.segment_count = static_cast<uint32_t>(std::min<uint64_t>(segments, UINT32_MAX - 1));
  sb.backing = backing.record();

  // Ordering: headers and the control area first, the superblock copies last. A format that is
  // cut short leaves no valid superblock, so it cannot be mistaken for a cache.
  for (unsigned copy = 0; copy < 2; ++copy) writer.fill_nodrain(format::kSuperblockOffsets[copy], 0, format::kBlockSize);
  writer.drain();
  for (uint32_t segment = 0; segment < sb.segment_count; ++segment) {
    write_segment_header(writer, sb, segment, {format::SegmentType::Free, 0, segment, 0});
  }
  format::ControlArea control;
  control.update_seq = 1;
  control.clean_horizon = 1;
  control.next_seq = 1;
  ControlStore::initialise(writer, sb, control);
  rewrite_superblock(writer, sb);
  spdlog::info("pmem region {}: formatted cache {}: {} segments of {}, backing {}", path, uuid_text(sb.uuid),
               sb.segment_count, format_size(sb.segment_size), describe_backing(sb.backing));
  return sb;
}

Status check_backing(const CacheOptions& options, const Superblock& sb, const backing::BackingDevice& backing) {
  const format::BackingRecord now = backing.record();
  const std::string prefix = "pmem region " + options.region_path + ": ";
  if (now.size < sb.backing.size) {
    return Status::error(ENOSPC, prefix + "backing device " + backing.path() + " is " + format_size(now.size) +
                                     ", smaller than the " + format_size(sb.backing.size) + " this cache was made for");
  }
  if (now.logical_block_size != sb.backing.logical_block_size) {
    return Status::error(EINVAL, prefix + "backing device " + backing.path() + " has " +
                                     std::to_string(now.logical_block_size) + "-byte blocks; the cache was made for " +
                                     std::to_string(sb.backing.logical_block_size));
  }
  if (!(now == sb.backing) && !options.force) {
    return Status::error(EXDEV, prefix + "the cache belongs to backing " + describe_backing(sb.backing) + ", but " +
                                    backing.path() + " is " + describe_backing(now) +
                                    "; use --force only if that is the same device under a new number");
  }
  return Status();
}

}  // namespace

size_t LatencyHistogram::bucket_of(std::chrono::nanoseconds elapsed) {
  // Bucket i holds spans up to 2^i us: the first i with ns <= 1000 * 2^i, that is with
  // (ns - 1) / 1000 < 2^i. Integers only: under an emulator (qemu TCG) every floating-point
  // operation is a call into software floating point, and this runs for every request.
  static_assert(kLatencyBucketBase == 1e-6, "the bucket arithmetic counts in microseconds");
  const auto ns = static_cast<uint64_t>(std::max<int64_t>(elapsed.count(), 1));
  return std::min<size_t>(std::bit_width((ns - 1) / 1000), kLatencyBuckets);
}

void LatencyHistogram::record(std::chrono::nanoseconds elapsed) {
  QueueCounters::bump(counts[bucket_of(elapsed)]);
  QueueCounters::bump(count);
  QueueCounters::bump(sum_ns, static_cast<uint64_t>(elapsed.count()));
}

void LatencyHistogram::add_to(LatencySnapshot& snapshot) const {
  for (size_t i = 0; i < counts.size(); ++i) snapshot.counts[i] += counts[i].load(std::memory_order_relaxed);
  snapshot.count += count.load(std::memory_order_relaxed);
  snapshot.sum_seconds += static_cast<double>(sum_ns.load(std::memory_order_relaxed)) * 1e-9;
}

void QueueCounters::add_to(CacheStats& s) const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  s.reads += get(reads);
  s.read_hits += get(read_hits);
  s.read_partial_hits += get(read_partial_hits);
  s.read_misses += get(read_misses);
  s.read_bytes += get(read_bytes);
  s.writes += get(writes);
  s.write_bytes += get(write_bytes);
  s.discards += get(discards);
  s.write_zeroes += get(write_zeroes);
  s.flushes += get(flushes);
  s.fills += get(fills);
  s.fill_bytes += get(fill_bytes);
  s.promotions_deferred += get(promotions_deferred);
  s.bypassed_reads += get(bypassed_reads);
  s.bypassed_writes += get(bypassed_writes);
  s.bypassed_bytes += get(bypassed_bytes);
  s.direct_writes += get(direct_writes);
  s.direct_write_errors += get(direct_write_errors);
  s.backing_flushes += get(backing_flushes);
  s.data_crc_errors += get(data_crc_errors);
  s.backing_read_errors += get(backing_read_errors);
  s.media_errors += get(media_errors);
  for (size_t op = 0; op < kOpCount; ++op) latency[op].add_to(s.latency[op]);
  if (copies != nullptr) {
    for (size_t m = 0; m < s.copies.size(); ++m) {
      for (size_t c = 0; c < s.copies[m].size(); ++c) {
        s.copies[m][c] += get(copies->copies[m][c]);
        s.copy_bytes[m][c] += get(copies->bytes[m][c]);
      }
    }
  }
}

Result<std::unique_ptr<Cache>> Cache::open(const CacheOptions& options) {
  auto engine = Engine::open(options);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<Cache>(std::move(engine.value()));
}

Engine::Engine(const CacheOptions& options, std::unique_ptr<pmem::Region> region,
               std::unique_ptr<backing::BackingDevice> backing, std::unique_ptr<pmem::CopyPolicy> policy,
               const Superblock& superblock)
    : options_(options),
      region_(std::move(region)),
      backing_(std::move(backing)),
      policy_(std::move(policy)),
      superblock_(superblock),
      segments_(std::make_unique<SegmentTable>(superblock.segment_count)),
      activity_(superblock.data_start, superblock.segment_size, superblock.segment_count),
      live_(superblock.data_start, superblock.segment_size, superblock.segment_count),
      contents_(superblock.segment_count),
      checksums_(superblock.data_start, superblock.segment_size),
      tunables_(options.tunables) {
  index_.track(&activity_, &live_, &contents_);
}

Engine::~Engine() { stop_background(); }

Result<Engine::RegionVerdict> Engine::examine_region(const CacheOptions& options, const pmem::Region& region,
                                                     const backing::BackingDevice& backing) {
  const std::string& path = region.path();
  Result<Superblock> copies[2] = {read_superblock_copy(region, 0), read_superblock_copy(region, 1)};
  // A copy with our magic and a matching checksum but fields that cannot be (EINVAL) is damage
  // to a pcached superblock too, not something else's data.
  const auto damaged = [](const Result<Superblock>& copy) {
    return copy.status().code() == format::kCorrupt || copy.status().code() == EINVAL;
  };
  const bool any_pcached = std::any_of(std::begin(copies), std::end(copies), [&](const Result<Superblock>& copy) {
    return copy.ok() || damaged(copy) || copy.status().code() == format::kNewerVersion;
  });

  if (options.format) {
    if (any_pcached && !options.force) {
      const std::string what = copies[0].ok()   ? "cache " + uuid_text(copies[0]->uuid) + " for backing " +
                                                      describe_backing(copies[0]->backing)
                               : copies[1].ok() ? "cache " + uuid_text(copies[1]->uuid) + " for backing " +
                                                      describe_backing(copies[1]->backing)
                                                : "pcached superblock (damaged or from a newer version)";
      return Status::error(EEXIST, "pmem region " + path + " holds a " + what +
                                       "; formatting destroys it, including dirty data not yet written back; "
                                       "add --force to format anyway");
    }
    return RegionVerdict{};
  }

  if (copies[0].ok() || copies[1].ok()) {
    const unsigned good = copies[0].ok() ? 0 : 1;
    Superblock sb = copies[good].value();
    bool repair = !copies[good ^ 1].ok();
    if (!repair && !(copies[good ^ 1].value() == sb)) {
      // Flags and the format version (an upgrade) change after format: copy 0 first, then copy 1.
      // A crash between the two leaves copies that differ in those only, and copy 0 is the newer.
      sb = copies[0].value();
      Superblock other = copies[1].value();
      other.flags = sb.flags;
      other.version = sb.version;
      if (!(other == sb)) {
        return Status::error(EBADMSG, "pmem region " + path + ": the two superblock copies disagree; refusing to attach");
      }
      spdlog::warn("pmem region {}: superblock copies differ in their flags or format version (an update cut short); "
                   "taking copy 0",
                   path);
      repair = true;
    }
    if (repair && !copies[good ^ 1].ok()) {
      spdlog::warn("pmem region {}: superblock copy {} is damaged ({}); rewriting it from copy {}", path, good ^ 1,
                   copies[good ^ 1].status().message(), good);
    }
    if (sb.region_size > region.size()) {
      return Status::error(ENOSPC, "pmem region " + path + " is " + format_size(region.size()) +
                                       ", smaller than the " + format_size(sb.region_size) + " it was formatted with");
    }
    if (Status status = check_backing(options, sb, backing); !status.ok()) return status;
    return RegionVerdict{sb, repair ? static_cast<int>(good ^ 1) : -1};
  }

  const int code0 = copies[0].status().code();
  const int code1 = copies[1].status().code();
  if (code0 == format::kNewerVersion || code1 == format::kNewerVersion) {
    const auto& newer = code0 == format::kNewerVersion ? copies[0] : copies[1];
    return Status::error(EPROTONOSUPPORT,
                         "pmem region " + path + ": " + newer.status().message() + "; upgrade pcached to attach it");
  }
  if (code0 == format::kBlank && code1 == format::kBlank) {
    return Status::error(ENODATA, "pmem region " + path + " is blank: it holds no cache; format it (--format) to create one");
  }
  if (damaged(copies[0]) || damaged(copies[1])) {
    return Status::error(EBADMSG, "pmem region " + path + ": both superblock copies are damaged (copy 0: " +
                                      copies[0].status().message() + "; copy 1: " + copies[1].status().message() +
                                      "); refusing to attach");
  }
  return Status::error(EMEDIUMTYPE, "pmem region " + path +
                                        " holds data that is not a pcached cache; nothing was written. --format "
                                        "overwrites it (destroying that data)");
}

Result<std::unique_ptr<Engine>> Engine::open(const CacheOptions& options) {
  if (Status status = validate(options.tunables); !status.ok()) return status;
  // Before any queue can take a reading (a no-op after the first cache of the process).
  CycleClock::calibrate();
  pmem::RegionOptions region_options;
  region_options.path = options.region_path;
  region_options.allow_volatile = options.allow_volatile_region;
  region_options.min_size = format::kDataStart + format::kMinSegments * format::kMinSegmentSize;
  for (const auto& [offset, length] : options.injected_bad_ranges) {
    region_options.injected_bad_ranges.push_back({offset, length});
  }
  auto region = pmem::Region::open(region_options);
  if (!region.ok()) return region.status();
  auto backing = backing::BackingDevice::open(options.backing_path);
  if (!backing.ok()) return backing.status();
  // Writeback needs a region that keeps dirty data through a power cut (or the operator's
  // override, given now or recorded in the superblock).
  const pmem::PersistenceDomain domain = pmem::persistence_domain_of(*region.value());

  // Ordering: everything that can refuse the region is decided before the first store to it (the
  // copy-method calibration writes to the region's scratch area): a region holding something
  // else, or a cache this open may not attach, is left exactly as it was.
  auto verdict = examine_region(options, *region.value(), *backing.value());
  if (!verdict.ok()) return verdict.status();
  const bool recorded =
      verdict->superblock && (verdict->superblock->flags & Superblock::kAllowVolatileWriteback) != 0;
  if (Status status = check_mode_for_domain(options.region_path, domain, options.tunables.mode,
                                            options.allow_volatile_writeback || recorded);
      !status.ok()) {
    return status;
  }

  // Read before the first store: the calibrations below overwrite the scratch area it lies in.
  CheckpointRead clean;
  if (verdict->superblock) {
    clean = read_clean_checkpoint(*region.value(), *verdict->superblock,
                                  backing.value()->size() >> format::kSectorShift);
  }

  pmem::CopyPolicySettings policy_settings = options.copy_policy;
  policy_settings.scratch_offset = format::kScratchOffset;
  policy_settings.scratch_length = format::kScratchLength;
  auto policy = pmem::make_copy_policy(*region.value(), policy_settings);
  if (!policy.ok()) return policy.status();

  pmem::PmemWriter writer(*region.value(), *policy.value(), options.persist_observer);
  // Ordering: erased before anything this attach does can make it stale (a write, GC, writeback
  // raising the horizon), so that it is never read again after this attach has begun, whatever
  // happens to it. (The calibration before this wrote only to the scratch area.)
  if (clean.present) erase_clean_checkpoint(writer);
  Result<Superblock> superblock = verdict->superblock
                                      ? Result<Superblock>(*verdict->superblock)
                                      : format_region(options, *region.value(), *backing.value(), writer);
  if (!superblock.ok()) return superblock.status();
  if (verdict->repair_copy >= 0) write_superblock_copy(writer, superblock.value(), verdict->repair_copy);
  const Superblock before = superblock.value();
  if (superblock->version < format::kFormatVersion) {
    // Before the first key set of the new format is written: a pcached that reads only the old
    // version then refuses the cache as newer, rather than as damaged.
    spdlog::info("pmem region {}: upgrading the cache's format from version {} to {}", options.region_path,
                 superblock->version, format::kFormatVersion);
    superblock->version = format::kFormatVersion;
  }
  if (options.allow_volatile_writeback && !recorded) superblock->flags |= Superblock::kAllowVolatileWriteback;
  if (superblock.value() != before) rewrite_superblock(writer, superblock.value());
  if (!pmem::survives_power_loss(domain)) {
    spdlog::warn("pmem region {}: persistence domain {}: {}", options.region_path, pmem::to_string(domain),
                 options.tunables.mode == CacheMode::Writeback
                     ? "writeback allowed by --allow-volatile-writeback; dirty data is lost at a power cut"
                     : "the backing device stays complete (" + std::string(to_string(options.tunables.mode)) + ")");
  }

  auto engine = std::unique_ptr<Engine>(new Engine(options, std::move(region.value()), std::move(backing.value()),
                                                   std::move(policy.value()), superblock.value()));
  engine->domain_ = domain;
  engine->shared_fence_classes_ = options.commit_shared_fence_classes ? *options.commit_shared_fence_classes
                                                                      : measure_commit_protocol(writer);
  engine->allow_volatile_writeback_ = options.allow_volatile_writeback || recorded;
  const auto started = std::chrono::steady_clock::now();
  if (Status status = engine->recover(clean.checkpoint); !status.ok()) return status;
  engine->recovery_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  engine->writeback_ = std::make_unique<Writeback>(*engine);
  engine->writeback_->start();
  spdlog::info("cache on {}: attached in {:.3f} s ({} keys replayed, {} of clean data kept), backing {}; {}",
               options.region_path, engine->recovery_seconds_, engine->recovered_keys_,
               format_size(engine->restored_clean_bytes_), options.backing_path,
               describe_commit_protocol(engine->shared_fence_classes_.load()));
  return engine;
}

Result<uint32_t> Engine::claim_journal_slot() {
  for (uint32_t slot = 0; slot < format::kMaxJournals; ++slot) {
    std::lock_guard lock(journals_[slot].mutex);
    if (!journals_[slot].in_use) {
      journals_[slot].in_use = true;  // claimed; JournalWriter::start fills in the rest
      journals_[slot].relocation = false;
      return slot;
    }
  }
  return Status::error(EBUSY, "cache on " + options_.region_path + ": all " + std::to_string(format::kMaxJournals) +
                                  " journals are in use (older journals still hold dirty data); retry after writeback");
}

void Engine::name_journal(pmem::PmemWriter& writer, uint32_t slot) {
  const ChainSegment head = journals_[slot].chain.front();
  control_->update(writer, [&](format::ControlArea& control) {
    control.journals[slot] = {head.segment, head.generation};
    control.next_seq = std::max(control.next_seq, next_seq_.load());
  });
}

Result<std::unique_ptr<CacheQueue>> Engine::create_queue(io::Ring& ring) {
  auto slot = claim_journal_slot();
  if (!slot.ok()) return slot.status();
  auto queue = std::make_unique<EngineQueue>(*this, ring, *slot);
  if (Status status = queue->start(); !status.ok()) return status;
  return std::unique_ptr<CacheQueue>(std::move(queue));
}

uint64_t Engine::foreground_requests() const {
  std::lock_guard lock(queues_mutex_);
  uint64_t total = retired_.reads + retired_.writes + retired_.discards + retired_.write_zeroes + retired_.flushes;
  for (const QueueCounters* queue : queues_) {
    for (const auto* counter : {&queue->reads, &queue->writes, &queue->discards, &queue->write_zeroes, &queue->flushes}) {
      total += counter->load(std::memory_order_relaxed);
    }
  }
  return total;
}

void Engine::register_queue(QueueCounters* counters) {
  std::lock_guard lock(queues_mutex_);
  queues_.push_back(counters);
}

void Engine::unregister_queue(QueueCounters* counters) {
  std::lock_guard lock(queues_mutex_);
  counters->add_to(retired_);
  std::erase(queues_, counters);
}

uint64_t Engine::first_pending_seq(uint32_t slot, const JournalPosition& from, const JournalPosition& limit) const {
  JournalReader reader(*region_, superblock_, slot, from);
  std::vector<format::Key> keys;
  if (reader.next(keys, &limit)) return keys.front().seq;
  // Stopped short of the limit: damage, whose keys are pending whatever their numbers (writeback
  // goes past it, see Writeback::pass_damage).
  return reader.position() == limit ? 0 : std::max<uint64_t>(clean_horizon_.load(), 1);
}

uint64_t Engine::compute_horizon() {
  // Read before any journal is looked at: a key numbered below this was numbered after its
  // journal stored its inflight_seq (see EngineQueue::number), so the loop below sees it (in
  // flight, or published and pending). A key numbered later is at or above it. Reading the
  // counter after the loop instead would let a journal that was still starting (or idle) when
  // visited slip a key under the horizon.
  const uint64_t ceiling = next_seq_.load(std::memory_order_acquire);
  uint64_t horizon = ceiling;
  for (uint32_t slot = 0; slot < format::kMaxJournals; ++slot) {
    JournalState& journal = journals_[slot];
    JournalPosition cursor, published;
    uint64_t bound = UINT64_MAX;
    {
      std::lock_guard lock(journal.mutex);
      if (!journal.in_use || journal.relocation) continue;
      cursor = journal.cursor;
      published = journal.published;
      // A write in flight bounds the horizon; an idle journal can only get numbers at or above
      // the ceiling. Read under the mutex, so that a write seen published (inflight_seq cleared)
      // is seen in `published` too.
      if (const uint64_t inflight = journal.inflight_seq.load(std::memory_order_relaxed); inflight != 0) {
        bound = inflight;
      }
    }
    if (!(cursor == published)) {
      const uint64_t pending = first_pending_seq(slot, cursor, published);
      if (pending != 0) bound = std::min(bound, pending);
    }
    horizon = std::min(horizon, bound);
  }
  return std::max(horizon, clean_horizon_.load());
}

CacheStats Engine::stats() const {
  CacheStats s;
  {
    // Counters first: those of departed queues, plus each live queue's.
    std::lock_guard lock(queues_mutex_);
    s = retired_;
    for (const QueueCounters* queue : queues_) queue->add_to(s);
  }
  s.tunables = tunables_.get();
  s.persistence_domain = std::string(pmem::to_string(domain_));
  s.volatile_writeback = s.tunables.mode == CacheMode::Writeback && !pmem::survives_power_loss(domain_);
  s.capacity_bytes = uint64_t{superblock_.segment_count} * superblock_.segment_size;
  s.segment_bytes = superblock_.segment_size;
  s.device_bytes = backing_->size();
  s.logical_block_size = backing_->logical_block_size();
  s.cached_bytes = index_.cached_sectors() * format::kSectorSize;
  s.clean_horizon = clean_horizon_.load();
  s.next_seq = next_seq_.load();
  for (const format::LostRange& range : control_->lost()) {
    ++s.lost_ranges;
    s.lost_bytes += uint64_t{range.sectors} * format::kSectorSize;
  }
  s.dirty_bytes = index_.sectors_at_or_above(s.clean_horizon) * format::kSectorSize;
  s.extents = index_.extents();
  s.index_bytes = index_.memory_bytes();
  s.live_map_bytes = live_.memory_bytes();
  s.segments_total = segments_->count();
  s.segments_free = segments_->free_count();
  s.segments_data = segments_->count_of(SegmentUse::Data);
  s.segments_journal = segments_->count_of(SegmentUse::Journal);
  s.segments_bad = segments_->count_of(SegmentUse::Bad);
  for (const pmem::BadRange& range : region_->bad_ranges()) {
    ++s.bad_ranges;
    s.bad_bytes += range.length;
  }
  s.writer_waits = segments_->total_waits();
  s.media_errors = std::max(s.media_errors, region_->media_errors());
  if (writeback_) writeback_->add_to(s);
  s.recovery_seconds = recovery_seconds_;
  s.recovered_keys = recovered_keys_;
  s.restored_clean_bytes = restored_clean_bytes_;
  return s;
}

std::string Engine::copy_policy_description() const {
  std::string text = policy_->origin() + ":";
  const pmem::PolicyTable table = policy_->table();
  for (size_t i = 0; i < table.size(); ++i) {
    text += " " + format_size(pmem::size_class_bytes(i)) + "=" + std::string(pmem::to_string(table[i]));
  }
  return text + "; " + describe_commit_protocol(shared_fence_classes_.load());
}

Status Engine::set(const std::string& key, const std::string& value) {
  const std::string where = "cache on " + options_.region_path;
  std::lock_guard lock(settings_mutex_);
  if (key == "copy_policy") {
    auto spec = pmem::parse_policy_spec(value);
    if (!spec.ok()) return spec.status().with_context(where + ": " + key);
    pmem::CopyPolicySettings settings = options_.copy_policy;
    settings.spec = spec.value();
    settings.scratch_offset = format::kScratchOffset;
    settings.scratch_length = format::kScratchLength;
    settings.saved_table_path.clear();  // an explicit "auto" measures again
    auto fresh = pmem::make_copy_policy(*region_, settings);
    if (!fresh.ok()) return fresh.status().with_context(where + ": " + key);
    policy_->replace(fresh.value()->table(), fresh.value()->origin());
    if (!options_.commit_shared_fence_classes) {
      pmem::PmemWriter writer = make_writer();
      shared_fence_classes_ = measure_commit_protocol(writer);
    }
    return Status();
  }
  const Tunables before = tunables_.get();
  Tunables changed = before;
  if (Status status = apply_setting(changed, key, value); !status.ok()) return status.with_context(where);
  if (Status status = check_mode_for_domain(options_.region_path, domain_, changed.mode, allow_volatile_writeback_);
      !status.ok()) {
    return status;
  }
  tunables_.set(changed);
  writeback_->kick();
  if (before.mode == CacheMode::Writeback && changed.mode != CacheMode::Writeback) {
    // From now on writes reach the backing device (except over data still dirty, which keeps
    // taking writes in the cache so that writeback cannot overwrite them with older data).
    // What was dirty is written back before the switch is reported done.
    if (Status status = writeback_->write_back_everything(); !status.ok()) {
      return status.with_context(where + ": mode is now " + std::string(to_string(changed.mode)) +
                                 ", but the data that was dirty is not all written back yet");
    }
  }
  return Status();
}

Status Engine::flush_all(const FlushProgress& progress) {
  if (!writeback_) return Status::error(ESHUTDOWN, "cache is closed");
  return writeback_->write_back_everything(progress);
}

void Engine::stop_background() {
  if (segments_) segments_->shut_down();
  if (writeback_) writeback_->stop();
}

void Engine::interrupt_waits() {
  if (writeback_) writeback_->interrupt_waits();
}

void Engine::abandon() {
  stop_background();
  closed_ = true;
}

Status Engine::detach(bool force, const FlushProgress& progress) {
  if (closed_) return Status::error(ESHUTDOWN, "cache is closed");
  {
    std::lock_guard lock(queues_mutex_);
    if (!queues_.empty()) return Status::error(EBUSY, "cache on " + options_.region_path + ": queues still exist");
  }
  if (!force) {
    if (Status status = writeback_->write_back_everything(progress); !status.ok()) {
      return status.with_context("cache on " + options_.region_path + ": detach could not write back dirty data");
    }
  }
  stop_background();
  closed_ = true;
  if (force) {
    // The journals keep the dirty data as they are; the update only marks the checkpoint current.
    checkpoint_and_update(clean_horizon_.load(), [&](format::ControlArea& control) {
      control.next_seq = std::max(control.next_seq, next_seq_.load());
    });
    spdlog::warn("cache on {}: forced detach; dirty data stays on pmem for the next attach", options_.region_path);
    return Status();
  }
  // Everything is on the backing device: no journal is needed any more; mark the shutdown clean.
  const uint64_t next = next_seq_.load();
  checkpoint_and_update(next, [&](format::ControlArea& control) {
    control.flags |= format::ControlArea::kCleanShutdown;
    control.clean_horizon = next;
    control.next_seq = next;
    for (auto& head : control.journals) head = format::JournalHead{};
  });
  spdlog::info("cache on {}: detached cleanly, all data written back", options_.region_path);
  return Status();
}

std::vector<format::CheckpointExtent> Engine::clean_extents(uint64_t horizon) const {
  auto clean = [&](const Extent& extent) { return extent.has_data() && extent.seq < horizon; };
  // First how many extents each segment holds, so that only the chosen ones are ever gathered.
  std::vector<uint64_t> per_segment(superblock_.segment_count, 0);
  uint64_t total = 0;
  index_.for_each_extent([&](uint64_t, const Extent& extent) {
    if (!clean(extent)) return;
    ++per_segment[activity_.segment_of(extent.location)];
    ++total;
  });
  std::vector<bool> chosen(superblock_.segment_count, true);
  if (total > format::kMaxCheckpointExtents) {
    std::vector<uint32_t> by_heat;
    for (uint32_t segment = 0; segment < superblock_.segment_count; ++segment) {
      if (per_segment[segment] != 0) by_heat.push_back(segment);
    }
    std::stable_sort(by_heat.begin(), by_heat.end(),
                     [&](uint32_t a, uint32_t b) { return activity_.heat(a) > activity_.heat(b); });
    std::fill(chosen.begin(), chosen.end(), false);
    uint64_t taken = 0;
    for (uint32_t segment : by_heat) {
      if (taken >= format::kMaxCheckpointExtents) break;
      chosen[segment] = true;
      taken += per_segment[segment];
    }
  }
  std::vector<format::CheckpointExtent> extents;
  extents.reserve(std::min<uint64_t>(total, format::kMaxCheckpointExtents));
  index_.for_each_extent([&](uint64_t sector, const Extent& extent) {
    if (!clean(extent) || extents.size() >= format::kMaxCheckpointExtents) return;
    const uint32_t segment = activity_.segment_of(extent.location);
    if (!chosen[segment]) return;
    const uint64_t offset = extent.location - superblock_.segment_offset(segment);
    extents.push_back({sector, extent.sectors, segment, static_cast<uint32_t>(offset / format::kSectorSize),
                       segments_->info(segment).generation});
  });
  std::sort(extents.begin(), extents.end(),
            [](const format::CheckpointExtent& a, const format::CheckpointExtent& b) { return a.sector < b.sector; });
  return extents;
}

void Engine::checkpoint_and_update(uint64_t horizon, const std::function<void(format::ControlArea&)>& change) {
  pmem::PmemWriter writer = make_writer();
  const std::vector<format::CheckpointExtent> extents = clean_extents(horizon);
  // Ordering: the checkpoint whole and durable before the update it belongs to. A cut before the
  // update leaves the checkpoint naming an update that never happened: the next attach ignores it.
  write_clean_checkpoint(writer, superblock_, extents, control_->current().update_seq + 1);
  control_->update(writer, change);
  uint64_t sectors = 0;
  for (const format::CheckpointExtent& extent : extents) sectors += extent.sectors;
  spdlog::info("cache on {}: checkpoint of the clean data: {} in {} extents", options_.region_path,
               format_size(sectors * format::kSectorSize), extents.size());
}

}  // namespace pcached::cache
