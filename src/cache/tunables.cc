#include "pcached/tunables.h"

#include <array>
#include <charconv>
#include <functional>

#include "pcached/units.h"

namespace pcached::cache {

namespace {

Status bad_value(std::string_view key, std::string_view value, std::string_view allowed) {
  return Status::error(EINVAL, std::string(key) + ": '" + std::string(value) + "' is not " + std::string(allowed));
}

Result<unsigned> parse_unsigned(std::string_view key, std::string_view value, unsigned low, unsigned high,
                                std::string_view allowed) {
  unsigned number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (value.empty() || error != std::errc() || end != value.data() + value.size() || number < low || number > high) {
    return bad_value(key, value, allowed);
  }
  return number;
}

Result<bool> parse_switch(std::string_view key, std::string_view value) {
  if (value == "on" || value == "true" || value == "1") return true;
  if (value == "off" || value == "false" || value == "0") return false;
  return bad_value(key, value, "on or off");
}

Result<uint64_t> parse_bytes(std::string_view key, std::string_view value, std::string_view allowed) {
  auto bytes = parse_size(value);
  if (!bytes.ok()) return bad_value(key, value, allowed);
  return bytes.value();
}

std::string bytes_text(uint64_t bytes) {
  // Exact and readable back: the largest binary unit that divides the value.
  static constexpr std::array<std::pair<uint64_t, const char*>, 3> kUnits{{{GiB, "G"}, {MiB, "M"}, {KiB, "K"}}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes);
}

struct Entry {
  std::string_view name;
  std::function<Status(Tunables&, std::string_view)> parse;
  std::function<std::string(const Tunables&)> print;
};

// One line per tunable: its name, how its text is read, how it is printed.
template <typename Field, typename Parser>
Entry entry(std::string_view name, Field Tunables::*field, Parser parser, std::string (*print)(Field)) {
  return Entry{name,
               [name, field, parser](Tunables& t, std::string_view value) -> Status {
                 auto parsed = parser(name, value);
                 if (!parsed.ok()) return parsed.status();
                 t.*field = parsed.value();
                 return Status();
               },
               [field, print](const Tunables& t) { return print(t.*field); }};
}

std::string unsigned_text(unsigned value) { return std::to_string(value); }
std::string switch_text(bool value) { return value ? "on" : "off"; }
std::string mode_text(CacheMode mode) { return std::string(to_string(mode)); }
std::string gc_policy_text(GcPolicy policy) { return std::string(to_string(policy)); }

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = [] {
    auto percent = [](unsigned high) {
      return [high](std::string_view key, std::string_view value) {
        return parse_unsigned(key, value, 0, high, "a percentage from 0 to " + std::to_string(high));
      };
    };
    std::vector<Entry> t;
    t.push_back(entry<CacheMode>(
        "mode", &Tunables::mode,
        [](std::string_view key, std::string_view value) -> Result<CacheMode> {
          auto mode = parse_cache_mode(value);
          if (!mode.ok()) return bad_value(key, value, "writeback, writethrough or writearound");
          return mode;
        },
        mode_text));
    t.push_back(entry<unsigned>("gc_threshold", &Tunables::gc_threshold, percent(90), unsigned_text));
    t.push_back(entry<GcPolicy>(
        "gc_policy", &Tunables::gc_policy,
        [](std::string_view key, std::string_view value) -> Result<GcPolicy> {
          if (value == "cost-benefit") return GcPolicy::CostBenefit;
          if (value == "fifo") return GcPolicy::Fifo;
          return bad_value(key, value, "cost-benefit or fifo");
        },
        gc_policy_text));
    t.push_back(entry<bool>("read_miss_fill", &Tunables::read_miss_fill, parse_switch, switch_text));
    t.push_back(entry<bool>("data_crc", &Tunables::data_crc, parse_switch, switch_text));
    t.push_back(entry<unsigned>(
        "promote_after", &Tunables::promote_after,
        [](std::string_view key, std::string_view value) {
          return parse_unsigned(key, value, 1, 255, "a miss count from 1 to 255");
        },
        unsigned_text));
    t.push_back(entry<uint64_t>(
        "sequential_cutoff", &Tunables::sequential_cutoff,
        [](std::string_view key, std::string_view value) {
          return parse_bytes(key, value, "a size (e.g. 4M; 0 turns detection off)");
        },
        bytes_text));
    t.push_back(entry<unsigned>("writeback_low", &Tunables::writeback_low, percent(100), unsigned_text));
    t.push_back(entry<unsigned>("writeback_high", &Tunables::writeback_high, percent(100), unsigned_text));
    t.push_back(entry<uint64_t>(
        "writeback_rate", &Tunables::writeback_rate,
        [](std::string_view key, std::string_view value) {
          return parse_bytes(key, value, "a rate in bytes per second (e.g. 64M; 0: no limit)");
        },
        bytes_text));
    t.push_back(entry<unsigned>(
        "writeback_idle_ms", &Tunables::writeback_idle_ms,
        [](std::string_view key, std::string_view value) {
          return parse_unsigned(key, value, 0, 3'600'000, "milliseconds from 0 (never idle) to 3600000");
        },
        unsigned_text));
    return t;
  }();
  return table;
}

}  // namespace

std::string_view to_string(CacheMode mode) {
  switch (mode) {
    case CacheMode::Writeback:
      return "writeback";
    case CacheMode::Writethrough:
      return "writethrough";
    case CacheMode::Writearound:
      return "writearound";
  }
  return "unknown";
}

std::string_view to_string(GcPolicy policy) { return policy == GcPolicy::Fifo ? "fifo" : "cost-benefit"; }

Result<CacheMode> parse_cache_mode(std::string_view text) {
  for (CacheMode mode : {CacheMode::Writeback, CacheMode::Writethrough, CacheMode::Writearound}) {
    if (text == to_string(mode)) return mode;
  }
  return Status::error(EINVAL, "unknown cache mode '" + std::string(text) +
                                   "' (known: writeback, writethrough, writearound)");
}

const std::vector<std::string_view>& tunable_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> list;
    for (const Entry& e : entries()) list.push_back(e.name);
    return list;
  }();
  return names;
}

namespace {

Status check_watermarks(const Tunables& t) {
  if (t.writeback_low <= t.writeback_high) return Status();
  return Status::error(EINVAL, "writeback_low (" + std::to_string(t.writeback_low) +
                                   "%) must not exceed writeback_high (" + std::to_string(t.writeback_high) + "%)");
}

}  // namespace

Status apply_setting(Tunables& tunables, std::string_view key, std::string_view value) {
  for (const Entry& e : entries()) {
    if (e.name != key) continue;
    Tunables changed = tunables;
    if (Status status = e.parse(changed, value); !status.ok()) return status;
    if (Status status = check_watermarks(changed); !status.ok()) return status.with_context(std::string(key));
    tunables = changed;
    return Status();
  }
  std::string known;
  for (std::string_view name : tunable_names()) known += (known.empty() ? "" : ", ") + std::string(name);
  return Status::error(EINVAL, "unknown setting '" + std::string(key) + "' (known: " + known + ", copy_policy)");
}

Status validate(const Tunables& tunables) {
  // Each value read back from its text passes the same range checks as a setting would.
  Tunables scratch = tunables;
  for (const Entry& e : entries()) {
    if (Status status = e.parse(scratch, e.print(tunables)); !status.ok()) return status;
  }
  return check_watermarks(tunables);
}

std::vector<std::pair<std::string, std::string>> settings(const Tunables& tunables) {
  std::vector<std::pair<std::string, std::string>> list;
  for (const Entry& e : entries()) list.emplace_back(std::string(e.name), e.print(tunables));
  return list;
}

}  // namespace pcached::cache
