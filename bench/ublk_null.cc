// A ublk device served by pcached's own ublk frontend (the same queue threads, rings and affinity)
// with nothing behind it: every request completes at once and data goes nowhere. It is the
// reference for what the frontend and the kernel's ublk round trip cost on a machine, apart from
// the cache engine: bench/vm_fio_bench.py runs fio on it next to pcached.
//
//   pcached-ublk-null [--size 1G] [--queues N] [--depth 128] [--queue-affinity auto|kernel|none]
//                     [--queue-poll-us 50]
//
// Prints the block device's path once it is started, serves until SIGINT or SIGTERM, then removes
// the device.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <thread>

#include "pcached/cache.h"
#include "pcached/units.h"
#include "ublk/control_device.h"
#include "ublk/ublk_device.h"

using namespace pcached;

namespace {

class NullQueue final : public cache::CacheQueue {
 public:
  explicit NullQueue(unsigned index) : index_(index) {}
  void submit(const cache::Request& request, cache::RequestCompletion* completion) override {
    const bool transfers = request.op == cache::Op::Read || request.op == cache::Op::Write;
    completion->complete(transfers ? static_cast<int>(request.sectors) << 9 : 0);
  }
  unsigned index() const override { return index_; }
  void begin_batch() override {}
  void end_batch() override {}

 private:
  unsigned index_;
};

class NullTarget final : public cache::QueueTarget {
 public:
  explicit NullTarget(uint64_t bytes) : sectors_(bytes >> 9) {}
  Result<std::unique_ptr<cache::CacheQueue>> create_queue(io::Ring&) override {
    return std::unique_ptr<cache::CacheQueue>(std::make_unique<NullQueue>(queues_++));
  }
  uint64_t device_sectors() const override { return sectors_; }
  uint32_t logical_block_size() const override { return 512; }

 private:
  uint64_t sectors_;
  unsigned queues_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcached-ublk-null: pcached's ublk frontend over a device that does nothing (a benchmark reference)"};
  std::string size_text = "1G";
  unsigned queues = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  unsigned depth = 128;
  std::string affinity = "auto";
  uint64_t poll_us = ublk::kDefaultQueuePoll.count();
  app.add_option("--size", size_text, "device size")->capture_default_str();
  app.add_option("--queues", queues, "ublk queues (default min(cpus, 4))")->check(CLI::Range(1, 64));
  app.add_option("--depth", depth, "tags per queue")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--queue-affinity", affinity, "as pcached add --queue-affinity")
      ->check(CLI::IsMember(ublk::queue_affinity_names()))
      ->capture_default_str();
  app.add_option("--queue-poll-us", poll_us, "as pcached add --queue-poll-us")
      ->check(CLI::Range(uint64_t{0}, static_cast<uint64_t>(ublk::kMaxQueuePoll.count())))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("pcached"));  // stdout carries the device's path
  auto size = parse_size(size_text);
  if (!size.ok() || size.value() < 1 * MiB) {
    std::fprintf(stderr, "pcached-ublk-null: --size %s: expected a size of at least 1M\n", size_text.c_str());
    return 2;
  }

  // Block the signals before any queue thread starts, so that only sigwait below takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto control = ublk::ControlDevice::open();
  if (!control.ok()) {
    std::fprintf(stderr, "pcached-ublk-null: %s\n", control.status().message().c_str());
    return 1;
  }
  NullTarget target(size.value());
  ublk::DeviceSettings settings;
  settings.queues = static_cast<uint16_t>(queues);
  settings.depth = static_cast<uint16_t>(depth);
  settings.threads.affinity = ublk::parse_queue_affinity(affinity).value();  // checked by CLI11
  settings.threads.poll = std::chrono::microseconds(poll_us);
  auto device = ublk::UblkDevice::create(*control.value(), target, settings);
  if (!device.ok()) {
    std::fprintf(stderr, "pcached-ublk-null: %s\n", device.status().message().c_str());
    return 1;
  }
  std::printf("%s\n", device.value()->block_device().c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  Status removed = device.value()->remove();
  if (!removed.ok()) {
    std::fprintf(stderr, "pcached-ublk-null: %s\n", removed.message().c_str());
    return 1;
  }
  return 0;
}
