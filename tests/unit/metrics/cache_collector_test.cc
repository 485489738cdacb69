#include <catch2/catch.hpp>

#include "metrics/cache_collector.h"

using namespace pcached;
using namespace pcached::metrics;

TEST_CASE("cache statistics become labelled Prometheus metrics", "[metrics]") {
  CacheSample sample;
  sample.name = "db";
  sample.device = "/dev/ublkb0";
  sample.stats.read_hits = 5;
  sample.stats.read_misses = 2;
  sample.stats.write_bytes = 8192;
  sample.stats.dirty_bytes = 4096;
  sample.stats.segments_free = 7;
  sample.stats.writeback_stalled = true;
  sample.stats.lost_ranges = 2;
  sample.stats.lost_bytes = 12288;
  sample.stats.latency[static_cast<size_t>(cache::Op::Write)].counts[3] = 4;  // (4, 8] µs
  sample.stats.latency[static_cast<size_t>(cache::Op::Write)].count = 4;
  sample.stats.copies[0][3] = 9;  // nt, 4 KiB
  sample.stats.tunables.gc_threshold = 55;
  sample.stats.tunables.gc_policy = cache::GcPolicy::Fifo;
  sample.stats.tunables.sequential_cutoff = 1 << 20;
  sample.stats.tunables.writeback_high = 50;
  sample.stats.tunables.writeback_rate = 1000000;
  sample.stats.tunables.writeback_idle_ms = 250;
  sample.stats.tunables.data_crc = true;
  sample.stats.segments_bad = 2;
  sample.stats.bad_bytes = 8192;
  sample.stats.live_map_bytes = 4136;
  sample.stats.gc_commit_waits = 3;
  const std::string text = exposition(cache_families({sample}));
  INFO(text);
  CHECK(text.find(R"(pcached_read_requests_total{cache="db",device="/dev/ublkb0",result="hit"} 5)") != std::string::npos);
  CHECK(text.find(R"(pcached_read_requests_total{cache="db",device="/dev/ublkb0",result="miss"} 2)") != std::string::npos);
  CHECK(text.find(R"(pcached_write_bytes_total{cache="db",device="/dev/ublkb0"} 8192)") != std::string::npos);
  CHECK(text.find(R"(pcached_dirty_bytes{cache="db",device="/dev/ublkb0"} 4096)") != std::string::npos);
  CHECK(text.find(R"(pcached_segments{cache="db",device="/dev/ublkb0",state="free"} 7)") != std::string::npos);
  CHECK(text.find(R"(pcached_writeback_stalled{cache="db",device="/dev/ublkb0"} 1)") != std::string::npos);
  CHECK(text.find("# TYPE pcached_write_requests_total counter") != std::string::npos);
  CHECK(text.find("# TYPE pcached_dirty_bytes gauge") != std::string::npos);
  CHECK(text.find("pcached_build_info{version=") != std::string::npos);
  CHECK(text.find(R"(pcached_request_duration_seconds_bucket{cache="db",device="/dev/ublkb0",op="write",le="4e-06"} 0)") !=
        std::string::npos);
  CHECK(text.find(R"(pcached_request_duration_seconds_bucket{cache="db",device="/dev/ublkb0",op="write",le="8e-06"} 4)") !=
        std::string::npos);
  CHECK(text.find(R"(pcached_request_duration_seconds_count{cache="db",device="/dev/ublkb0",op="write"} 4)") !=
        std::string::npos);
  CHECK(text.find(R"(pcached_pmem_copies_total{cache="db",device="/dev/ublkb0",method="nt",size_class="4096"} 9)") !=
        std::string::npos);
  // Every setting, in base units.
  for (const char* line : {
           R"(pcached_gc_threshold_ratio{cache="db",device="/dev/ublkb0"} 0.55)",
           R"(pcached_gc_policy{cache="db",device="/dev/ublkb0",policy="fifo"} 1)",
           R"(pcached_gc_policy{cache="db",device="/dev/ublkb0",policy="cost-benefit"} 0)",
           R"(pcached_sequential_cutoff_bytes{cache="db",device="/dev/ublkb0"} 1048576)",
           R"(pcached_writeback_watermark_ratio{cache="db",device="/dev/ublkb0",level="high"} 0.5)",
           R"(pcached_writeback_watermark_ratio{cache="db",device="/dev/ublkb0",level="low"} 0.1)",
           R"(pcached_writeback_rate_limit_bytes_per_second{cache="db",device="/dev/ublkb0"} 1000000)",
           R"(pcached_writeback_idle_seconds{cache="db",device="/dev/ublkb0"} 0.25)",
           R"(pcached_data_crc_enabled{cache="db",device="/dev/ublkb0"} 1)",
           R"(pcached_read_miss_fill_enabled{cache="db",device="/dev/ublkb0"} 1)",
           R"(pcached_promote_after_misses{cache="db",device="/dev/ublkb0"} 1)",
           R"(pcached_cache_mode{cache="db",device="/dev/ublkb0",mode="writeback"} 1)",
           R"(pcached_segments{cache="db",device="/dev/ublkb0",state="bad"} 2)",
           R"(pcached_pmem_bad_bytes{cache="db",device="/dev/ublkb0"} 8192)",
           R"(pcached_lost_ranges{cache="db",device="/dev/ublkb0"} 2)",
           R"(pcached_lost_bytes{cache="db",device="/dev/ublkb0"} 12288)",
           R"(pcached_live_map_bytes{cache="db",device="/dev/ublkb0"} 4136)",
           R"(pcached_gc_commit_waits_total{cache="db",device="/dev/ublkb0"} 3)",
       }) {
    CHECK(text.find(line) != std::string::npos);
  }
}

TEST_CASE("no caches: the families are still there, empty", "[metrics]") {
  const auto families = cache_families({});
  CHECK(families.size() > 20);
  CHECK(exposition(families).find("# TYPE pcached_read_requests_total counter") != std::string::npos);
}
