// pcached: the command line of pcached, over pcachedd's control socket.
//   exit status 0: done; 1: the daemon refused or failed; 2: bad usage; 3: daemon unreachable.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/progress_bar.h"
#include "cli/status_view.h"
#include "control/protocol.h"
#include "pcached/copy_policy.h"
#include "pcached/pmem_discovery.h"
#include "pcached/tunables.h"
#include "pcached/units.h"
#include "ublk/queue_affinity.h"
#include "ublk/queue_poll.h"

using namespace pcached;
using nlohmann::json;
using pcached::cli::field_bytes;
using pcached::cli::field_text;

namespace {

constexpr int kFailed = 1;
constexpr int kUsage = 2;
constexpr int kUnreachable = 3;

// pmem list reads libndctl itself (it works without the daemon) and asks the daemon, when it
// answers, which devices its caches use.
int list_pmem(const std::string& socket_path, bool as_json) {
  auto regions = pmem::discover_pmem();
  if (!regions.ok()) {
    std::fprintf(stderr, "pcached: %s\n", regions.status().message().c_str());
    return kFailed;
  }
  std::map<std::string, std::string> users;  // device -> cache name
  if (auto caches = control::call(socket_path, {"list", json::object()}); caches.ok()) {
    for (const json& cache : caches.value()["caches"]) {
      users[field_text(cache, "region")] = field_text(cache, "name");
    }
  }
  json doc = json::array();
  for (const pmem::RegionInfo& region : regions.value()) {
    json namespaces = json::array();
    for (const pmem::NamespaceInfo& ns : region.namespaces) {
      const auto user = users.find(ns.device);
      namespaces.push_back({{"name", ns.name}, {"mode", ns.mode}, {"device", ns.device}, {"size", ns.size},
                            {"align", ns.align}, {"numa_node", ns.numa_node},
                            {"used_by", user == users.end() ? json(nullptr) : json(user->second)}});
    }
    doc.push_back({{"name", region.name}, {"bus", region.bus}, {"size", region.size}, {"available", region.available},
                   {"numa_node", region.numa_node}, {"persistence_domain", region.persistence_domain},
                   {"namespaces", namespaces}});
  }
  if (as_json) {
    std::printf("%s\n", json{{"regions", doc}}.dump(2).c_str());
    return 0;
  }
  if (doc.empty()) std::printf("no persistent memory regions found\n");
  for (const json& region : doc) {
    std::printf("%s (%s): %s, %s available, numa node %d, persistence domain %s\n", field_text(region, "name").c_str(),
                field_text(region, "bus").c_str(), format_size(region["size"].get<uint64_t>()).c_str(),
                format_size(region["available"].get<uint64_t>()).c_str(), region["numa_node"].get<int>(),
                field_text(region, "persistence_domain").c_str());
    for (const json& ns : region["namespaces"]) {
      std::printf("  %-14s %-7s %-14s %10s  align %-8s %s\n", field_text(ns, "name").c_str(),
                  field_text(ns, "mode").c_str(),
                  field_text(ns, "device").c_str(), format_size(ns["size"].get<uint64_t>()).c_str(),
                  format_size(ns["align"].get<uint64_t>()).c_str(),
                  ns["used_by"].is_string() ? ("used by pcached cache " + ns["used_by"].get<std::string>()).c_str() : "");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcached: manage pmem block caches served by pcachedd"};
  app.require_subcommand(1);
  std::string socket_path = control::kDefaultSocket;
  bool as_json = false;
  app.add_option("--socket", socket_path, "pcachedd's control socket")->capture_default_str();
  app.add_flag("--json", as_json, "print the result as JSON");

  control::Request request;
  std::string cache_path, backing_path, name, mode = "writeback", copy_policy = "auto", segment_size;
  unsigned queues = 0, depth = 128;
  std::string queue_affinity = "auto";
  uint64_t queue_poll_us = ublk::kDefaultQueuePoll.count();
  std::vector<std::string> add_settings;
  std::vector<std::string> setting_keys = {"copy_policy"};
  for (std::string_view tunable : cache::tunable_names()) setting_keys.emplace_back(tunable);
  bool format = false, force = false, allow_volatile = false, allow_volatile_writeback = false, no_flush = false;

  CLI::App* add = app.add_subcommand("add", "create a cache and its /dev/ublkbN");
  add->add_option("--cache", cache_path, "pmem region: devdax device, fsdax file, or file")->required();
  add->add_option("--backing", backing_path, "backing block device or file")->required();
  add->add_option("--name", name, "cache name (default cacheN)");
  add->add_option("--queues", queues, "ublk queues (default min(cpus, 4))")->check(CLI::Range(1, 64));
  add->add_option("--depth", depth, "queue depth")->check(CLI::Range(1, 4096))->capture_default_str();
  add->add_option("--queue-affinity", queue_affinity,
                  "kernel: bind each queue's thread to the CPUs the kernel maps to its queue; auto: the same "
                  "where those are more than one CPU, to the other CPUs where it is one; none: let the "
                  "scheduler place it")
      ->check(CLI::IsMember(ublk::queue_affinity_names()))
      ->capture_default_str();
  add->add_option("--queue-poll-us", queue_poll_us,
                  "microseconds a queue's thread spins for the next request before it sleeps (0: never; "
                  "spinning trades CPU for latency)")
      ->check(CLI::Range(uint64_t{0}, static_cast<uint64_t>(ublk::kMaxQueuePoll.count())))
      ->capture_default_str();
  add->add_option("--mode", mode, "cache mode")
      ->check(CLI::IsMember({"writeback", "writethrough", "writearound"}))
      ->capture_default_str();
  add->add_option("--set", add_settings, "a setting as KEY=VALUE (repeatable; keys as for 'pcached set')");
  add->add_option("--copy-policy", copy_policy, "auto, nt, clflushopt, clwb or threshold:<size>")->capture_default_str();
  add->add_option("--segment-size", segment_size, "segment size when formatting (e.g. 4M; by default 1M-16M, for about 64 segments)");
  add->add_flag("--format", format, "format the region (refused if it holds a cache, unless --force)");
  add->add_flag("--force", force, "format over an existing cache, or attach to a renumbered backing device");
  add->add_flag("--allow-volatile-region", allow_volatile, "accept a region without DAX (tests and demos only)");
  add->add_flag("--allow-volatile-writeback", allow_volatile_writeback,
                "allow writeback on a region whose persistence domain may not survive power loss "
                "(recorded in the superblock)");

  CLI::App* remove = app.add_subcommand("remove", "write back dirty data and remove a cache");
  remove->add_option("target", name, "cache name or /dev/ublkbN")->required();
  remove->add_flag("--no-flush", no_flush, "leave dirty data on pmem for a later attach");
  remove->add_flag("--force", force, "same as --no-flush");

  std::string key, value;
  CLI::App* set = app.add_subcommand("set", "change a setting of a running cache");
  set->add_option("target", name, "cache name or /dev/ublkbN")->required();
  set->add_option("key", key, "the setting: mode, gc_threshold, gc_policy, read_miss_fill, data_crc, promote_after, "
                                "sequential_cutoff, writeback_low, writeback_high, writeback_rate, writeback_idle_ms "
                                "or copy_policy")
      ->required()
      ->check(CLI::IsMember(setting_keys));
  set->add_option("value", value, "the new value")->required();
  CLI::App* flush = app.add_subcommand("flush", "write every dirty byte back now");
  flush->add_option("target", name, "cache name or /dev/ublkbN")->required();

  CLI::App* pmem_command = app.add_subcommand("pmem", "persistent memory on this machine");
  pmem_command->require_subcommand(1);
  CLI::App* pmem_list = pmem_command->add_subcommand("list", "regions and namespaces (libndctl), and which pcached uses");

  app.add_subcommand("list", "list caches");
  CLI::App* status = app.add_subcommand("status", "show a cache in detail");
  status->add_option("target", name, "cache name or /dev/ublkbN")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kUsage;
  }

  if (pmem_list->parsed()) return list_pmem(socket_path, as_json);

  if (add->parsed()) {
    request.command = "add";
    request.args = {{"cache", cache_path}, {"backing", backing_path}, {"depth", depth},
                    {"queue_affinity", queue_affinity}, {"queue_poll_us", queue_poll_us}, {"copy_policy", copy_policy},
                    {"format", format}, {"force", force}, {"allow_volatile_region", allow_volatile},
                    {"allow_volatile_writeback", allow_volatile_writeback}};
    if (!name.empty()) request.args["name"] = name;
    if (queues != 0) request.args["queues"] = queues;
    // Settings are checked here too, so that a typo is a usage error before anything happens.
    cache::Tunables tunables;
    request.args["settings"] = json::object();
    for (const std::string& setting : add_settings) {
      const size_t equals = setting.find('=');
      const std::string key = setting.substr(0, equals);
      const std::string value = equals == std::string::npos ? "" : setting.substr(equals + 1);
      if (Status status = cache::apply_setting(tunables, key, value); equals == std::string::npos || !status.ok()) {
        std::fprintf(stderr, "pcached: --set %s: %s\n", setting.c_str(),
                     equals == std::string::npos ? "expected KEY=VALUE" : status.message().c_str());
        return kUsage;
      }
      request.args["settings"][key] = value;
    }
    request.args["settings"]["mode"] = mode;
    if (add->count("--segment-size") != 0) {
      auto size = parse_size(segment_size);
      if (!size.ok()) {
        std::fprintf(stderr, "pcached: --segment-size: %s\n", size.status().message().c_str());
        return kUsage;
      }
      request.args["segment_size"] = size.value();
    }
    if (auto spec = pmem::parse_policy_spec(copy_policy); !spec.ok()) {
      std::fprintf(stderr, "pcached: --copy-policy: %s\n", spec.status().message().c_str());
      return kUsage;
    }
  } else if (remove->parsed()) {
    request.command = "remove";
    request.args = {{"name", name}, {"no_flush", no_flush || force}};
  } else if (set->parsed()) {
    request.command = "set";
    request.args = {{"name", name}, {"key", key}, {"value", value}};
  } else if (flush->parsed()) {
    request.command = "flush";
    request.args = {{"name", name}};
  } else if (status->parsed()) {
    request.command = "status";
    request.args = {{"name", name}};
  } else {
    request.command = "list";
  }

  // Writing back can take long: on a terminal, flush and remove show how it goes.
  const bool show_progress =
      !as_json && (request.command == "flush" || request.command == "remove") && ::isatty(STDERR_FILENO) != 0;
  std::optional<cli::ProgressBar> bar;
  control::ProgressHandler on_progress;
  if (show_progress) {
    request.args["progress"] = true;
    bar.emplace();
    on_progress = [&bar](const json& report) { bar->update(report); };
  }
  auto result = control::call(socket_path, request, on_progress);
  bar.reset();
  if (!result.ok()) {
    if (as_json) {
      std::printf("%s\n", json{{"ok", false}, {"error", result.status().message()}}.dump(2).c_str());
    } else {
      std::fprintf(stderr, "pcached: %s\n", result.status().message().c_str());
    }
    const int code = result.status().code();
    return code == ECONNREFUSED || code == EACCES ? kUnreachable : kFailed;
  }
  if (as_json) {
    std::printf("%s\n", result.value().dump(2).c_str());
  } else if (request.command == "add") {
    std::printf("%s\n", field_text(result.value(), "device").c_str());
  } else if (request.command == "remove") {
    std::printf("removed %s (%s)\n", field_text(result.value(), "name").c_str(),
                field_text(result.value(), "device").c_str());
  } else if (request.command == "set") {
    std::printf("%s: %s = %s\n", field_text(result.value(), "name").c_str(), field_text(result.value(), "key").c_str(),
                field_text(result.value(), "value").c_str());
  } else if (request.command == "flush") {
    std::printf("%s: %s written back, %s dirty\n", field_text(result.value(), "name").c_str(),
                field_bytes(result.value(), "written_back_bytes").c_str(),
                field_bytes(result.value(), "dirty_bytes").c_str());
  } else if (request.command == "list") {
    std::fputs(cli::render_list(result.value()).c_str(), stdout);
  } else {
    std::fputs(cli::render_status(result.value()).c_str(), stdout);
  }
  return 0;
}
