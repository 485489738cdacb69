#include "daemon/cache_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/unique_fd.h"
#include "control/protocol.h"
#include "format/layout.h"

namespace pcached::daemon {

namespace {

constexpr int kStateVersion = 1;

}  // namespace

nlohmann::json to_json(const CacheConfig& c) {
  return {{"name", c.name},
          {"region", c.region},
          {"backing", c.backing},
          {"queues", c.queues},
          {"depth", c.depth},
          {"queue_affinity", to_string(c.queue_affinity)},
          {"queue_poll_us", c.queue_poll_us},
          {"device_id", c.device_id},
          {"allow_volatile_region", c.allow_volatile_region},
          {"allow_volatile_writeback", c.allow_volatile_writeback},
          {"segment_size", c.segment_size},
          {"copy_policy", c.copy_policy},
          {"settings", settings_json(c.tunables)}};
}

nlohmann::json settings_json(const cache::Tunables& tunables) {
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [key, value] : cache::settings(tunables)) doc[key] = value;
  return doc;
}

namespace {

// A setting's text from JSON: strings as they are, numbers and booleans as written.
Result<std::string> setting_text(const std::string& key, const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return std::string(value.get<bool>() ? "on" : "off");
  if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
  return Status::error(EINVAL, key + ": expected a string, a non-negative integer or a boolean");
}

Status read_tunables(const nlohmann::json& doc, cache::Tunables& tunables) {
  for (std::string_view name : cache::tunable_names()) {
    const std::string key(name);
    if (!doc.contains(key)) continue;
    auto text = setting_text(key, doc[key]);
    if (!text.ok()) return text.status();
    if (Status status = cache::apply_setting(tunables, key, text.value()); !status.ok()) return status;
  }
  if (!doc.contains("settings")) return Status();
  const nlohmann::json& settings = doc["settings"];
  if (!settings.is_object()) return Status::error(EINVAL, "settings: expected an object of name: value");
  for (const auto& [key, value] : settings.items()) {
    auto text = setting_text(key, value);
    if (!text.ok()) return text.status();
    if (Status status = cache::apply_setting(tunables, key, text.value()); !status.ok()) return status;
  }
  return Status();
}

}  // namespace

Result<CacheConfig> config_from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) return Status::error(EINVAL, "cache entry is not an object");
  CacheConfig c;
  auto name = control::string_arg(doc, "name", true);
  auto region = control::string_arg(doc, "region", true);
  auto backing = control::string_arg(doc, "backing", true);
  auto policy = control::string_arg(doc, "copy_policy", false, c.copy_policy);
  auto queues = control::unsigned_arg(doc, "queues", c.queues, 1, 64);
  auto depth = control::unsigned_arg(doc, "depth", c.depth, 1, 4096);
  auto affinity = control::string_arg(doc, "queue_affinity", false, std::string(to_string(c.queue_affinity)));
  auto poll = control::unsigned_arg(doc, "queue_poll_us", c.queue_poll_us, 0,
                                   static_cast<uint64_t>(ublk::kMaxQueuePoll.count()));
  auto segment = control::unsigned_arg(doc, "segment_size", c.segment_size, 0, format::kMaxSegmentSize);
  // Checked here as the format will: a cache added with a size the format refuses would be
  // refused only once its region is opened, and a state file entry so would never attach.
  if (segment.ok() && segment.value() != 0 && !format::valid_segment_size(segment.value())) {
    return Status::error(EINVAL, "argument 'segment_size' is " + std::to_string(segment.value()) +
                                     "; it must be 0 (chosen from the region's size) or " + format::kSegmentSizeRule);
  }
  auto volatile_region = control::bool_arg(doc, "allow_volatile_region", false);
  auto volatile_writeback = control::bool_arg(doc, "allow_volatile_writeback", false);
  for (const Status* status : {&name.status(), &region.status(), &backing.status(), &policy.status(), &queues.status(),
                               &depth.status(), &affinity.status(), &poll.status(), &segment.status(), &volatile_region.status(),
                               &volatile_writeback.status()}) {
    if (!status->ok()) return *status;
  }
  c.name = name.value();
  if (Status status = check_cache_name(c.name); !status.ok()) return status;
  c.region = region.value();
  c.backing = backing.value();
  c.copy_policy = policy.value();
  c.queues = static_cast<unsigned>(queues.value());
  c.depth = static_cast<unsigned>(depth.value());
  const std::optional<QueueAffinity> parsed = ublk::parse_queue_affinity(affinity.value());
  if (!parsed) {
    return Status::error(EINVAL, "queue_affinity '" + affinity.value() + "': expected " + ublk::queue_affinity_choices());
  }
  c.queue_affinity = *parsed;
  c.queue_poll_us = poll.value();
  c.segment_size = segment.value();
  c.allow_volatile_region = volatile_region.value();
  c.allow_volatile_writeback = volatile_writeback.value();
  if (Status status = read_tunables(doc, c.tunables); !status.ok()) return status;
  if (const auto id = doc.find("device_id"); id != doc.end() && id->is_number_integer()) {
    // Restore takes over (or removes) the ublk device of this number: a value that does not fit
    // must be refused, not truncated into some other device's number.
    const bool in_range = id->is_number_unsigned() ? id->get<uint64_t>() <= INT_MAX
                                                   : id->get<int64_t>() >= -1 && id->get<int64_t>() <= INT_MAX;
    if (!in_range) return Status::error(EINVAL, "device_id " + id->dump() + " is neither -1 nor a ublk device number");
    c.device_id = id->get<int>();
  }
  return c;
}

Status check_cache_name(const std::string& name) {
  const bool valid = !name.empty() && name.size() <= 64 && name[0] != '.' && name[0] != '-' &&
                     name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
                         std::string::npos;
  if (valid) return Status();
  return Status::error(EINVAL, "invalid cache name '" + name +
                                   "': use 1-64 letters, digits, '_', '.' or '-', not starting with '.' or '-'");
}

Result<std::vector<CacheConfig>> load_state(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::vector<CacheConfig>{};
    return Status::error(errno, "cannot read state file " + path + ": " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_state(text.str(), path);
}

Result<std::vector<CacheConfig>> parse_state(std::string_view text, const std::string& path) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Status::error(EINVAL, "state file " + path + " is not valid JSON");
  if (!doc.contains("version") || doc["version"] != kStateVersion) {
    return Status::error(EINVAL, "state file " + path + " has an unsupported version");
  }
  std::vector<CacheConfig> caches;
  if (!doc.contains("caches") || !doc["caches"].is_array()) return Status::error(EINVAL, "state file " + path + ": no cache list");
  for (const nlohmann::json& entry : doc["caches"]) {
    auto config = config_from_json(entry);
    if (!config.ok()) return config.status().with_context("state file " + path);
    caches.push_back(config.value());
  }
  return caches;
}

Status save_state(const std::string& path, const std::vector<CacheConfig>& caches) {
  nlohmann::json list = nlohmann::json::array();
  for (const CacheConfig& c : caches) list.push_back(to_json(c));
  const std::string text = nlohmann::json{{"version", kStateVersion}, {"caches", list}}.dump(2) + "\n";
  const std::string temporary = path + ".tmp";
  UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::error(errno, "cannot write " + temporary + ": " + std::strerror(errno));
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd.get()) != 0) {
    return Status::error(errno, "cannot write " + temporary + ": " + std::strerror(errno));
  }
  fd.reset();
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    return Status::error(errno, "cannot replace " + path + ": " + std::strerror(errno));
  }
  return Status();
}

}  // namespace pcached::daemon
