// The daemon's state file over any bytes, as a restarted daemon reads it: parse_state either gives
// the caches or refuses with EINVAL, never a crash or an exception. What it accepts is what the
// daemon can use (valid names, values in range, the copy policy as restore parses it), holds the
// values the file gave, and saves and loads back the same.
//   input: the file's text.
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/cache_config.h"
#include "format/layout.h"
#include "fuzz/fuzz_support.h"
#include "pcached/copy_policy.h"

using namespace pcached;

namespace {

void write_seeds(const char* root) {
  const fuzz::SeedDirectory seeds(root, "state_file");
  daemon::CacheConfig a;
  a.name = "fast";
  a.region = "/dev/dax0.0";
  a.backing = "/dev/sdb";
  a.queues = 4;
  a.device_id = 3;
  a.copy_policy = "threshold:4K";
  daemon::CacheConfig b = a;
  b.name = "slow.1";
  b.region = "/mnt/pmem/cache";
  b.allow_volatile_region = true;
  b.device_id = -1;
  b.copy_policy = "clwb";
  b.tunables.gc_threshold = 0;
  b.tunables.read_miss_fill = false;
  b.tunables.mode = cache::CacheMode::Writearound;
  auto state = [](const std::vector<daemon::CacheConfig>& caches) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& c : caches) list.push_back(daemon::to_json(c));
    return nlohmann::json{{"version", 1}, {"caches", list}}.dump(2) + "\n";
  };
  seeds.write("two-caches", state({a, b}));
  seeds.write("empty", state({}));
  seeds.write("minimal", R"({"version":1,"caches":[{"name":"x","region":"/r","backing":"/b"}]})");
  seeds.write("unsupported-version", R"({"version":9,"caches":[]})");
  seeds.write("bad-name", R"({"version":1,"caches":[{"name":"../etc","region":"/a","backing":"/b"}]})");
  seeds.write("out-of-range", R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","depth":0,"segment_size":3}]})");
  seeds.write("device-id-large", R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","device_id":4294967296}]})");
  seeds.write("bad-policy", R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","copy_policy":"threshold:99999999999999999999T"}]})");
  seeds.write("not-json", "{\"version\":1,\"caches\":[{\"name\"");
}

}  // namespace

PCACHED_FUZZ_SEEDS_FROM(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto caches = daemon::parse_state(text, "fuzz.json");
  if (!caches.ok()) {
    FUZZ_CHECK(caches.status().code() == EINVAL);
    FUZZ_CHECK(!caches.status().message().empty());
    return 0;
  }
  // parse_state accepted it, so it is a JSON object with a list of caches, one per config.
  const nlohmann::json doc = nlohmann::json::parse(text);
  const nlohmann::json& entries = doc.at("caches");
  FUZZ_CHECK(entries.size() == caches->size());
  for (size_t i = 0; i < caches->size(); ++i) {
    const daemon::CacheConfig& c = caches->at(i);
    FUZZ_CHECK(daemon::check_cache_name(c.name).ok());
    FUZZ_CHECK(c.queues >= 1 && c.queues <= 64 && c.depth >= 1 && c.depth <= 4096 && c.tunables.gc_threshold <= 90 && cache::validate(c.tunables).ok());
    // 0: chosen from the region's size when formatting.
    FUZZ_CHECK(c.queue_poll_us <= 10000);
    FUZZ_CHECK(c.segment_size == 0 || format::valid_segment_size(c.segment_size));
    // The values are the file's: nothing was silently changed on the way in.
    const nlohmann::json& entry = entries[i];
    FUZZ_CHECK(entry.at("name") == c.name && entry.at("region") == c.region && entry.at("backing") == c.backing);
    if (entry.contains("queues") && !entry.at("queues").is_null()) FUZZ_CHECK(entry.at("queues") == c.queues);
    if (entry.contains("device_id") && entry.at("device_id").is_number_integer()) {
      FUZZ_CHECK(entry.at("device_id") == c.device_id);
    }
    // Restore parses the copy policy; whatever the file holds, that refuses or succeeds cleanly.
    (void)pmem::parse_policy_spec(c.copy_policy);
  }

  // Saved and loaded again (save_state writes exactly this), it is the same.
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : caches.value()) list.push_back(daemon::to_json(c));
  const std::string saved = nlohmann::json{{"version", 1}, {"caches", list}}.dump(2) + "\n";
  auto again = daemon::parse_state(saved, "fuzz.json");
  FUZZ_CHECK(again.ok() && again->size() == caches->size());
  for (size_t i = 0; i < caches->size(); ++i) FUZZ_CHECK(daemon::to_json(again->at(i)) == list[i]);
  return 0;
}
