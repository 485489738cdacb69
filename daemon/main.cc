// pcachedd: the pcached daemon. Runs in the foreground (as systemd expects), serves every cache
// in its state file as /dev/ublkbN (or, with --frontend in-process, exports it to nobody), and
// takes commands on its control socket.
#include <sched.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <systemd/sd-daemon.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <sstream>

#include "common/unique_fd.h"
#include "control/protocol.h"
#include "daemon/control_server.h"
#include "daemon/daemon.h"
#include "metrics/cache_collector.h"
#include "pmem/memory_failure.h"

#include <prometheus/exposer.h>

using namespace pcached;

namespace {

// The daemon must not share a mount namespace with users of its own devices: if its namespace
// held the last mount of a filesystem on /dev/ublkbN, its exit would flush to a device nobody
// serves any more and hang. It gets a private namespace and drops any such mount from it.
void leave_shared_mount_namespace() {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    spdlog::warn("cannot make a private mount namespace: {}", std::strerror(errno));
    return;
  }
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  std::vector<std::string> ours;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string source, target;
    fields >> source >> target;
    if (source.rfind("/dev/ublkb", 0) == 0) ours.push_back(target);
  }
  for (auto it = ours.rbegin(); it != ours.rend(); ++it) ::umount2(it->c_str(), MNT_DETACH);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcachedd: the pcached daemon (pmem block cache served through ublk)"};
  std::string socket_path = control::kDefaultSocket;
  std::string state_dir = "/var/lib/pcached";
  std::string metrics_address = "127.0.0.1:9469";
  std::string log_level = "info";
  bool remove_on_exit = false;
  std::string frontend = "ublk";
  app.add_option("--socket", socket_path, "control socket")->capture_default_str();
  app.add_option("--state-dir", state_dir, "where the list of caches and calibrations are kept")->capture_default_str();
  app.add_option("--metrics-address", metrics_address, "Prometheus /metrics listen address")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_flag("--remove-on-exit", remove_on_exit,
               "on SIGTERM/SIGINT remove every device, writing back dirty data (default: leave the devices for the "
               "next daemon to recover)");
  app.add_option("--frontend", frontend,
                 "how caches are exported: ublk (/dev/ublkbN), or in-process (nothing reaches the kernel and no "
                 "ublk driver is needed: for tests, and for trying the control plane)")
      ->check(CLI::IsMember({"ublk", "in-process"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_color_mt("pcachedd"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");

  // Signals are taken synchronously by the main thread; every other thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // One daemon per state directory.
  UniqueFd lock(::open((state_dir + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    spdlog::error("another pcachedd is running for {} (or {}.lock cannot be created)", state_dir, state_dir);
    return 1;
  }
  const bool in_process = frontend == "in-process";
  // In-process caches have no block device that anything could mount.
  if (!in_process) leave_shared_mount_namespace();

  // Before any cache attaches: a page of a region that goes bad from now on is known at once.
  auto memory_failures = pmem::MemoryFailureMonitor::start();
  if (!memory_failures.ok()) spdlog::warn("{}", memory_failures.status().message());

  daemon::DaemonOptions options;
  options.state_dir = state_dir;
  options.frontend = in_process ? daemon::FrontendKind::InProcess : daemon::FrontendKind::Ublk;
  auto daemon = daemon::Daemon::start(options);
  if (!daemon.ok()) {
    spdlog::error("{}", daemon.status().message());
    return 1;
  }
  auto server = daemon::ControlServer::listen(socket_path, [&](const std::string& request, const auto& progress) {
    return daemon.value()->handle(request, progress);
  });
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 1;
  }
  // Prometheus pull endpoint (loopback by default); empty address: none.
  std::unique_ptr<prometheus::Exposer> exposer;
  auto collector = std::make_shared<metrics::CacheCollector>([&] { return daemon.value()->samples(); });
  if (!metrics_address.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(metrics_address);
      exposer->RegisterCollectable(collector);
    } catch (const std::exception& error) {
      spdlog::error("cannot serve metrics on {}: {}", metrics_address, error.what());
      return 1;
    }
  }
  spdlog::info("pcachedd ready; metrics on http://{}/metrics", metrics_address);
  sd_notify(0, "READY=1\nSTATUS=serving caches");

  // The main loop: wait for a signal, pinging systemd's watchdog at half its interval.
  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0;
  const auto tick = std::chrono::microseconds(watchdog ? watchdog_usec / 2 : 3'600'000'000ull);
  int signal_number = -1;
  while (signal_number < 0) {
    timespec timeout{static_cast<time_t>(tick.count() / 1'000'000), static_cast<long>(tick.count() % 1'000'000) * 1000};
    signal_number = sigtimedwait(&signals, nullptr, &timeout);
    if (watchdog) sd_notify(0, "WATCHDOG=1");
  }
  sd_notify(0, "STOPPING=1");
  spdlog::info("{} received", strsignal(signal_number));
  // A flush a client asked for could take minutes: it gives up (the data stays on pmem for the
  // next daemon), so that the control threads end now. With --remove-on-exit everything is
  // written back below anyway.
  if (!remove_on_exit) daemon.value()->interrupt_write_backs();
  server.value().reset();
  if (remove_on_exit) {
    const size_t left = daemon.value()->remove_all();
    if (left == 0) return 0;
    // Destroying them would pull the devices out from under their users: they are left as on
    // any other exit.
    spdlog::warn("{} cache(s) could not be removed", left);
  }
  // Leave the devices to the next pcachedd: the driver holds their I/O until it recovers them.
  // Everything acknowledged is durable already; what is written on the way out is the clean
  // data's checkpoint, so that the next daemon starts with it cached.
  if (const size_t left = daemon.value()->leave_all(); left != 0) {
    spdlog::warn("{} cache(s) left without a checkpoint of their clean data", left);
  }
  spdlog::info(in_process ? "exiting; the next pcachedd attaches the caches again"
                          : "exiting; devices stay for the next pcachedd to recover");
  std::fflush(nullptr);
  ::_exit(0);
}
