#include "metrics/cache_collector.h"

#include <prometheus/text_serializer.h>

#include <limits>
#include <sstream>

namespace pcached::metrics {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Builds one family at a time: a value per cache, with the cache's labels and any extra ones.
class FamilyBuilder {
 public:
  FamilyBuilder(std::vector<MetricFamily>& out, std::string name, std::string help, MetricType type)
      : family_(out.emplace_back(MetricFamily{std::move(name), std::move(help), type, {}})) {}

  void add(const CacheSample& cache, double value, std::vector<ClientMetric::Label> extra = {}) {
    ClientMetric metric;
    metric.label = {{"cache", cache.name}, {"device", cache.device}};
    metric.label.insert(metric.label.end(), extra.begin(), extra.end());
    if (family_.type == MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family_.metric.push_back(std::move(metric));
  }

 private:
  MetricFamily& family_;
};

}  // namespace

std::vector<MetricFamily> cache_families(const std::vector<CacheSample>& caches) {
  std::vector<MetricFamily> out;
  out.reserve(32);
  auto counter = [&](const char* name, const char* help, auto value) {
    FamilyBuilder family(out, name, help, MetricType::Counter);
    for (const CacheSample& c : caches) family.add(c, static_cast<double>(value(c.stats)));
  };
  auto gauge = [&](const char* name, const char* help, auto value) {
    FamilyBuilder family(out, name, help, MetricType::Gauge);
    for (const CacheSample& c : caches) family.add(c, static_cast<double>(value(c.stats)));
  };
  using S = cache::CacheStats;

  {
    FamilyBuilder reads(out, "pcached_read_requests_total", "Read requests by result: hit, partial (hit), miss.",
                        MetricType::Counter);
    for (const CacheSample& c : caches) {
      reads.add(c, static_cast<double>(c.stats.read_hits), {{"result", "hit"}});
      reads.add(c, static_cast<double>(c.stats.read_partial_hits), {{"result", "partial"}});
      reads.add(c, static_cast<double>(c.stats.read_misses), {{"result", "miss"}});
    }
  }
  counter("pcached_read_bytes_total", "Bytes read through the cache device.", [](const S& s) { return s.read_bytes; });
  counter("pcached_write_requests_total", "Write requests.", [](const S& s) { return s.writes; });
  counter("pcached_write_bytes_total", "Bytes written through the cache device.", [](const S& s) { return s.write_bytes; });
  counter("pcached_discard_requests_total", "Discard requests.", [](const S& s) { return s.discards; });
  counter("pcached_write_zeroes_requests_total", "Write-zeroes requests.", [](const S& s) { return s.write_zeroes; });
  counter("pcached_flush_requests_total", "Flush requests.", [](const S& s) { return s.flushes; });
  counter("pcached_fill_bytes_total", "Bytes put in the cache after read misses.", [](const S& s) { return s.fill_bytes; });
  counter("pcached_promotions_deferred_total", "Read misses not put in the cache yet (promote_after).",
          [](const S& s) { return s.promotions_deferred; });
  {
    FamilyBuilder bypassed(out, "pcached_bypassed_requests_total",
                           "Requests of sequential streams past the cutoff that bypassed the cache.", MetricType::Counter);
    for (const CacheSample& c : caches) {
      bypassed.add(c, static_cast<double>(c.stats.bypassed_reads), {{"op", "read"}});
      bypassed.add(c, static_cast<double>(c.stats.bypassed_writes), {{"op", "write"}});
    }
  }
  counter("pcached_bypassed_bytes_total", "Bytes of requests that bypassed the cache.",
          [](const S& s) { return s.bypassed_bytes; });
  counter("pcached_backing_writes_total",
          "Writes sent to the backing device in the foreground (writethrough, writearound, bypass).",
          [](const S& s) { return s.direct_writes; });
  counter("pcached_backing_write_errors_total", "Foreground writes the backing device failed.",
          [](const S& s) { return s.direct_write_errors; });
  counter("pcached_backing_flushes_total", "Flushes forwarded to the backing device after foreground writes.",
          [](const S& s) { return s.backing_flushes; });
  {
    FamilyBuilder mode(out, "pcached_cache_mode", "1 for the cache's current mode, 0 for the others.", MetricType::Gauge);
    for (const CacheSample& c : caches) {
      for (auto m : {cache::CacheMode::Writeback, cache::CacheMode::Writethrough, cache::CacheMode::Writearound}) {
        mode.add(c, c.stats.tunables.mode == m ? 1 : 0, {{"mode", std::string(cache::to_string(m))}});
      }
    }
  }
  // The other settings (pcached set), in base units.
  {
    FamilyBuilder policy(out, "pcached_gc_policy", "1 for the cache's GC policy, 0 for the others.", MetricType::Gauge);
    for (const CacheSample& c : caches) {
      for (auto p : {cache::GcPolicy::CostBenefit, cache::GcPolicy::Fifo}) {
        policy.add(c, c.stats.tunables.gc_policy == p ? 1 : 0, {{"policy", std::string(cache::to_string(p))}});
      }
    }
  }
  gauge("pcached_gc_threshold_ratio", "GC reclaims clean segments while more than this share of segments is in use.",
        [](const S& s) { return s.tunables.gc_threshold / 100.0; });
  gauge("pcached_read_miss_fill_enabled", "1 if read misses are copied into the cache.",
        [](const S& s) { return s.tunables.read_miss_fill ? 1 : 0; });
  gauge("pcached_promote_after_misses", "Misses of a 4 KiB block before it is filled into the cache.",
        [](const S& s) { return s.tunables.promote_after; });
  gauge("pcached_sequential_cutoff_bytes", "Sequential streams longer than this bypass the cache (0: off).",
        [](const S& s) { return s.tunables.sequential_cutoff; });
  gauge("pcached_data_crc_enabled", "1 if cached data is checksummed and verified on read.",
        [](const S& s) { return s.tunables.data_crc ? 1 : 0; });
  {
    FamilyBuilder watermark(out, "pcached_writeback_watermark_ratio",
                            "Dirty share of the capacity where eager writeback starts (high) and stops (low).",
                            MetricType::Gauge);
    for (const CacheSample& c : caches) {
      watermark.add(c, c.stats.tunables.writeback_low / 100.0, {{"level", "low"}});
      watermark.add(c, c.stats.tunables.writeback_high / 100.0, {{"level", "high"}});
    }
  }
  gauge("pcached_writeback_rate_limit_bytes_per_second", "Writeback rate limit outside eager and idle writeback (0: none).",
        [](const S& s) { return s.tunables.writeback_rate; });
  gauge("pcached_writeback_idle_seconds", "Foreground quiet time after which writeback runs unthrottled (0: never).",
        [](const S& s) { return s.tunables.writeback_idle_ms / 1000.0; });
  gauge("pcached_capacity_bytes", "Data capacity of the pmem region.", [](const S& s) { return s.capacity_bytes; });
  gauge("pcached_device_size_bytes", "Size of the cached device (the backing device).",
        [](const S& s) { return s.device_bytes; });
  gauge("pcached_cached_bytes", "Bytes of the device held in the cache.", [](const S& s) { return s.cached_bytes; });
  gauge("pcached_dirty_bytes", "Cached bytes not yet written back.", [](const S& s) { return s.dirty_bytes; });
  {
    FamilyBuilder segments(out, "pcached_segments", "Segments of the pmem region by state.", MetricType::Gauge);
    for (const CacheSample& c : caches) {
      segments.add(c, c.stats.segments_free, {{"state", "free"}});
      segments.add(c, c.stats.segments_data, {{"state", "data"}});
      segments.add(c, c.stats.segments_journal, {{"state", "journal"}});
      segments.add(c, c.stats.segments_bad, {{"state", "bad"}});
    }
  }
  gauge("pcached_pmem_bad_ranges", "Known bad ranges (media errors) of the pmem region.",
        [](const S& s) { return s.bad_ranges; });
  gauge("pcached_pmem_bad_bytes", "Bytes of the pmem region in known bad ranges.",
        [](const S& s) { return s.bad_bytes; });
  counter("pcached_writeback_bytes_total", "Bytes written back to the backing device.",
          [](const S& s) { return s.writeback_bytes; });
  counter("pcached_writeback_errors_total", "Failed writeback attempts (retried).",
          [](const S& s) { return s.writeback_errors; });
  counter("pcached_writeback_lost_bytes_total",
          "Dirty bytes that could not be written back: their only copy hit a pmem media error.",
          [](const S& s) { return s.writeback_lost_bytes; });
  gauge("pcached_lost_ranges",
        "Ranges of dirty data lost to pmem media errors before writeback, this run or earlier; their reads fail.",
        [](const S& s) { return s.lost_ranges; });
  gauge("pcached_lost_bytes", "Bytes in pcached_lost_ranges.", [](const S& s) { return s.lost_bytes; });
  gauge("pcached_writeback_stalled", "1 while writeback keeps failing and retries with backoff.",
        [](const S& s) { return s.writeback_stalled ? 1 : 0; });
  gauge("pcached_volatile_writeback",
        "1 while writeback runs on a region whose persistence domain may not survive power loss (override).",
        [](const S& s) { return s.volatile_writeback ? 1 : 0; });
  {
    FamilyBuilder domain(out, "pcached_persistence_domain_info", "The region's persistence domain (value 1).",
                         MetricType::Gauge);
    for (const CacheSample& c : caches) domain.add(c, 1, {{"domain", c.stats.persistence_domain}});
  }
  gauge("pcached_writeback_eager", "1 while dirty data is above the high watermark, on its way to the low one.",
        [](const S& s) { return s.writeback_eager ? 1 : 0; });
  counter("pcached_writeback_dead_keys_skipped_total",
          "Journal keys writeback passed without an index lookup, all of their data replaced since.",
          [](const S& s) { return s.writeback_dead_keys_skipped; });
  counter("pcached_gc_runs_total", "Segment garbage collection runs.", [](const S& s) { return s.gc_runs; });
  counter("pcached_gc_reclaimed_segments_total", "Segments reclaimed by GC.", [](const S& s) { return s.segments_reclaimed; });
  counter("pcached_gc_moved_bytes_total", "Live data GC moved out of the segments it reclaimed, rather than evicting it.",
          [](const S& s) { return s.gc_moved_bytes; });
  counter("pcached_gc_moved_dirty_bytes_total",
          "Of the data GC moved, the dirty data: moved under a journaled key instead of being written back first.",
          [](const S& s) { return s.gc_moved_dirty_bytes; });
  counter("pcached_gc_index_searches_total",
          "GC runs that searched the whole index for live data their segments' contents lists missed (should stay 0).",
          [](const S& s) { return s.gc_index_searches; });
  counter("pcached_gc_commit_waits_total",
          "GC runs that could not make their moves durable at once (a memory failure took their journal room): "
          "their victims waited.",
          [](const S& s) { return s.gc_commit_waits; });
  counter("pcached_gc_evicted_bytes_total", "Live clean data GC evicted from the segments it reclaimed.",
          [](const S& s) { return s.gc_evicted_bytes; });
  counter("pcached_writer_waits_total", "Writes that waited for a free segment.", [](const S& s) { return s.writer_waits; });
  counter("pcached_backing_read_errors_total", "Failed reads from the backing device.",
          [](const S& s) { return s.backing_read_errors; });
  counter("pcached_media_errors_total", "Reads that hit a pmem media error.", [](const S& s) { return s.media_errors; });
  counter("pcached_data_crc_errors_total", "Read hits whose cached data did not match its checksum (data_crc).",
          [](const S& s) { return s.data_crc_errors; });
  gauge("pcached_recovery_duration_seconds", "How long the last attach (recovery) took.",
        [](const S& s) { return s.recovery_seconds; });
  gauge("pcached_recovery_restored_clean_bytes",
        "Clean data the last detach's checkpoint kept in the cache through the last attach.",
        [](const S& s) { return s.restored_clean_bytes; });
  gauge("pcached_index_bytes", "DRAM held by the extent index.", [](const S& s) { return s.index_bytes; });
  gauge("pcached_index_extents", "Extents in the index.", [](const S& s) { return s.extents; });
  gauge("pcached_live_map_bytes", "DRAM held by the live-sector map (a bit per sector of the data area).",
        [](const S& s) { return s.live_map_bytes; });

  {
    static constexpr const char* kOps[cache::kOpCount] = {"read", "write", "flush", "discard", "write_zeroes"};
    MetricFamily& family = out.emplace_back(MetricFamily{
        "pcached_request_duration_seconds", "Time the engine took per request, by operation.", MetricType::Histogram, {}});
    for (const CacheSample& c : caches) {
      for (size_t op = 0; op < cache::kOpCount; ++op) {
        const cache::LatencySnapshot& snapshot = c.stats.latency[op];
        ClientMetric metric;
        metric.label = {{"cache", c.name}, {"device", c.device}, {"op", kOps[op]}};
        metric.histogram.sample_count = snapshot.count;
        metric.histogram.sample_sum = snapshot.sum_seconds;
        uint64_t cumulative = 0;
        double bound = cache::kLatencyBucketBase;
        for (size_t i = 0; i < cache::kLatencyBuckets; ++i, bound *= 2) {
          cumulative += snapshot.counts[i];
          metric.histogram.bucket.push_back({cumulative, bound});
        }
        metric.histogram.bucket.push_back({snapshot.count, std::numeric_limits<double>::infinity()});
        family.metric.push_back(std::move(metric));
      }
    }
  }
  {
    static constexpr const char* kMethods[pmem::kCopyMethodCount] = {"nt", "clflushopt", "clwb", "cached"};
    FamilyBuilder copies(out, "pcached_pmem_copies_total", "Copies into pmem by method and size class.", MetricType::Counter);
    FamilyBuilder bytes(out, "pcached_pmem_copy_bytes_total", "Bytes copied into pmem by method and size class.",
                        MetricType::Counter);
    for (const CacheSample& c : caches) {
      for (size_t m = 0; m < pmem::kCopyMethodCount; ++m) {
        for (size_t k = 0; k < c.stats.copies[m].size(); ++k) {
          const std::vector<ClientMetric::Label> labels = {{"method", kMethods[m]},
                                                           {"size_class", std::to_string(512u << k)}};
          copies.add(c, static_cast<double>(c.stats.copies[m][k]), labels);
          bytes.add(c, static_cast<double>(c.stats.copy_bytes[m][k]), labels);
        }
      }
    }
  }

  MetricFamily& build = out.emplace_back(MetricFamily{"pcached_build_info", "pcached build.", MetricType::Gauge, {}});
  ClientMetric info;
  info.label = {{"version", PCACHED_VERSION}};
  info.gauge.value = 1;
  build.metric.push_back(info);
  return out;
}

std::string exposition(const std::vector<MetricFamily>& families) {
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, families);
  return text.str();
}

}  // namespace pcached::metrics
