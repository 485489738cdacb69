#include "cli/status_view.h"

#include <fmt/printf.h>

#include "pcached/units.h"

namespace pcached::cli {

using nlohmann::json;

namespace {

// printf onto the end of out.
template <typename... Args>
void appendf(std::string& out, const char* format, const Args&... args) {
  out += fmt::sprintf(format, args...);
}

}  // namespace

std::string field_bytes(const json& doc, const char* key) {
  return doc.contains(key) && doc[key].is_number_unsigned() ? format_size(doc[key].get<uint64_t>()) : "-";
}

std::string field_text(const json& doc, const char* key) {
  return doc.contains(key) && doc[key].is_string() ? doc[key].get<std::string>() : "-";
}

std::string render_list(const json& result) {
  std::string out;
  appendf(out, "%-16s %-14s %-10s %10s %10s %10s  %s -> %s\n", "NAME", "DEVICE", "STATE", "CAPACITY", "CACHED", "DIRTY",
          "CACHE", "BACKING");
  for (const json& cache : result["caches"]) {
    appendf(out, "%-16s %-14s %-10s %10s %10s %10s  %s -> %s\n", field_text(cache, "name").c_str(),
            field_text(cache, "device").c_str(), field_text(cache, "state").c_str(),
            field_bytes(cache, "capacity_bytes").c_str(), field_bytes(cache, "cached_bytes").c_str(),
            field_bytes(cache, "dirty_bytes").c_str(), field_text(cache, "region").c_str(),
            field_text(cache, "backing").c_str());
  }
  return out;
}

std::string render_status(const json& s) {
  std::string out;
  // "running, flush in progress" while a flush or remove writes back;
  // "removing" once a remove has stopped the device and detaches the cache.
  const bool in_progress = s.contains("operation") && field_text(s, "state") != "removing";
  const std::string state =
      field_text(s, "state") + (in_progress ? ", " + field_text(s, "operation") + " in progress" : "");
  appendf(out, "%s: %s (%s)\n", field_text(s, "name").c_str(), field_text(s, "device").c_str(), state.c_str());
  appendf(out, "  mode        %s\n", field_text(s, "mode").c_str());
  if (s.contains("persistence_domain")) {
    const bool at_risk = s.contains("volatile_writeback") && s["volatile_writeback"].get<bool>();
    appendf(out, "  persistence %s: %s\n", field_text(s, "persistence_domain").c_str(),
            at_risk                                ? "WRITEBACK ON MEMORY THAT MAY NOT SURVIVE POWER LOSS "
                                                     "(--allow-volatile-writeback)"
            : field_text(s, "mode") == "writeback" ? "dirty data survives power loss"
                                                   : "the backing device stays complete");
  }
  appendf(out, "  cache       %s (%s)\n  backing     %s (%s)\n", field_text(s, "region").c_str(),
          field_bytes(s, "capacity_bytes").c_str(), field_text(s, "backing").c_str(),
          field_bytes(s, "device_bytes").c_str());
  appendf(out, "  cached      %s, dirty %s\n", field_bytes(s, "cached_bytes").c_str(),
          field_bytes(s, "dirty_bytes").c_str());
  if (s.contains("index_bytes") && s.contains("live_map_bytes")) {
    appendf(out, "  memory      index %s (%s extents), live-sector map %s\n", field_bytes(s, "index_bytes").c_str(),
            s.value("extents", json(0)).dump().c_str(), field_bytes(s, "live_map_bytes").c_str());
  }
  if (s.contains("segments")) {
    const json& seg = s["segments"];
    const std::string size = seg.contains("size_bytes") ? " of " + field_bytes(seg, "size_bytes") : "";
    appendf(out, "  segments    %s total%s, %s free, %s data, %s journal, %s bad\n", seg["total"].dump().c_str(),
            size.c_str(), seg["free"].dump().c_str(), seg["data"].dump().c_str(), seg["journal"].dump().c_str(),
            seg.value("bad", json(0)).dump().c_str());
    if (s.contains("badblocks")) {
      appendf(out, "  badblocks   %s ranges, %s\n", s["badblocks"]["ranges"].dump().c_str(),
              format_size(s["badblocks"]["bytes"].get<uint64_t>()).c_str());
    }
    const json& r = s["reads"];
    appendf(out, "  reads       %s (hits %s, partial %s, misses %s)\n", r["total"].dump().c_str(),
            r["hits"].dump().c_str(), r["partial_hits"].dump().c_str(), r["misses"].dump().c_str());
    const json& w = s["writes"];
    appendf(out,
            "  writes      %s, %s discards, %s write-zeroes, %s waited for a "
            "free segment\n",
            w["total"].dump().c_str(), w["discards"].dump().c_str(), w["write_zeroes"].dump().c_str(),
            w.value("waited_for_segment", json(0)).dump().c_str());
    const json& wb = s["writeback"];
    appendf(out, "  writeback   %s written, %s errors%s%s\n", format_size(wb["bytes"].get<uint64_t>()).c_str(),
            wb["errors"].dump().c_str(), wb["stalled"].get<bool>() ? ", STALLED (retrying)" : "",
            wb["eager"].get<bool>() ? ", eager (above the high watermark)" : "");
    const json lost = s.value("lost", json::object());
    if (lost.value("ranges", uint64_t{0}) != 0) {
      appendf(out,
              "  LOST        %s of dirty data in %s range(s) destroyed by pmem "
              "media errors before writeback; reads "
              "there fail with EIO until they are written again\n",
              format_size(lost.value("bytes", uint64_t{0})).c_str(), lost["ranges"].dump().c_str());
    } else if (wb.value("lost_bytes", uint64_t{0}) != 0) {
      appendf(out,
              "  LOST        %s of dirty data unreadable on pmem (media "
              "error), written over since\n",
              format_size(wb["lost_bytes"].get<uint64_t>()).c_str());
    }
    const json& fills = s["fills"];
    appendf(out, "  fills       %s (%s), %s misses waiting for promotion\n", fills["total"].dump().c_str(),
            field_bytes(fills, "bytes").c_str(), fills["deferred"].dump().c_str());
    const json& bypass = s["bypass"];
    appendf(out, "  bypass      %s reads, %s writes (%s) past the sequential cutoff\n", bypass["reads"].dump().c_str(),
            bypass["writes"].dump().c_str(), field_bytes(bypass, "bytes").c_str());
    const json& direct = s["direct_writes"];
    appendf(out, "  to backing  %s writes in the foreground, %s flushes forwarded\n", direct["total"].dump().c_str(),
            direct["backing_flushes"].dump().c_str());
    appendf(out,
            "  gc          %s runs, %s segments reclaimed, live data %s moved "
            "(%s of it dirty), %s evicted, "
            "threshold %s%%\n",
            s["gc"]["runs"].dump().c_str(), s["gc"]["segments_reclaimed"].dump().c_str(),
            field_bytes(s["gc"], "moved_bytes").c_str(), field_bytes(s["gc"], "moved_dirty_bytes").c_str(),
            field_bytes(s["gc"], "evicted_bytes").c_str(), s["gc"]["threshold_percent"].dump().c_str());
    if (s["gc"].value("commit_waits", 0) > 0) {
      appendf(out,
              "  gc waited   %s runs could not make their moves durable at "
              "once (a memory failure took their "
              "journal room); their victims waited\n",
              s["gc"]["commit_waits"].dump().c_str());
    }
    appendf(out,
            "  errors      backing reads %s, backing writes %s, media %s, data "
            "checksums %s\n",
            s["errors"]["backing_read"].dump().c_str(), s["errors"]["backing_write"].dump().c_str(),
            s["errors"]["media"].dump().c_str(), s["errors"]["data_crc"].dump().c_str());
    appendf(out, "  copy policy %s\n", field_text(s, "copy_policy").c_str());
    // (A daemon from before the setting does not report it.)
    const std::string spin =
        s.contains("queue_poll_us") ? ", spin " + s["queue_poll_us"].dump() + " us before sleeping" : std::string();
    appendf(out, "  queues      %s x depth %s, affinity %s%s\n", s["queues"].dump().c_str(), s["depth"].dump().c_str(),
            field_text(s, "queue_affinity").c_str(), spin.c_str());
    std::string line;
    for (const auto& [key, value] : s["settings"].items()) line += " " + key + "=" + value.get<std::string>();
    appendf(out, "  settings   %s\n", line.c_str());
  }
  return out;
}

}  // namespace pcached::cli
