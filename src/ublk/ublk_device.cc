#include "ublk/ublk_device.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <thread>

#include "ublk/uapi_compat.h"

namespace pcached::ublk {

namespace {

// The CPUs this thread (and so the daemon, which set it up) may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

ublk_params params_for(const cache::QueueTarget& target, uint32_t max_io_bytes) {
  ublk_params params{};
  params.len = sizeof params;
  params.types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
  const uint32_t block = target.logical_block_size();
  const auto block_shift = static_cast<uint8_t>(std::countr_zero(block));
  // A write acknowledged from the cache is durable, but writethrough, writearound and sequential
  // bypass put data on the backing device, whose own cache may be volatile; the mode can change
  // at run time. So the kernel must send flushes and FUA for the engine to pass on (it completes
  // a flush at once when nothing reached the device since the last one).
  params.basic.attrs = UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA;
  params.basic.logical_bs_shift = block_shift;
  params.basic.physical_bs_shift = std::max<uint8_t>(block_shift, 12);
  params.basic.io_min_shift = block_shift;
  params.basic.io_opt_shift = 12;
  params.basic.max_sectors = max_io_bytes >> 9;
  params.basic.dev_sectors = target.device_sectors();
  params.discard.discard_granularity = block;
  params.discard.max_discard_sectors = 1u << 24;
  params.discard.max_write_zeroes_sectors = 1u << 24;
  params.discard.max_discard_segments = 1;
  return params;
}

// Undoing a half-made device after a failure: the first error is what the caller reports; a
// second one is only logged.
void log_cleanup_failure(const Status& status) {
  if (!status.ok()) spdlog::warn("while cleaning up: {}", status.message());
}

}  // namespace

Result<std::unique_ptr<UblkDevice>> UblkDevice::create(ControlDevice& control, cache::QueueTarget& target,
                                                       const DeviceSettings& settings) {
  auto device = std::unique_ptr<UblkDevice>(new UblkDevice(control, target, settings.threads));
  // User recovery keeps /dev/ublkbN (and the filesystems on it) when the daemon dies; reissue
  // hands the requests it held to the next daemon instead of failing them.
  const uint64_t flags = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
  auto info = control.add(settings.dev_id, settings.queues, settings.depth, settings.max_io_bytes, flags);
  if (!info.ok()) return info.status();
  device->info_ = info.value();
  if (Status status = control.set_params(device->info_.id, params_for(target, device->info_.max_io_bytes)); !status.ok()) {
    log_cleanup_failure(control.remove(device->info_.id));
    return status;
  }
  if (Status status = device->open_char_device(); !status.ok()) {
    log_cleanup_failure(control.remove(device->info_.id));
    return status;
  }
  if (Status status = device->start_queues(); !status.ok()) {
    log_cleanup_failure(device->remove());
    return status;
  }
  // START_DEV returns once every tag is fetched; adding the disk then reads its partition table,
  // which the queue threads serve.
  if (Status status = control.start(device->info_.id, ::getpid()); !status.ok()) {
    log_cleanup_failure(device->remove());
    return status;
  }
  spdlog::info("{}: started ({} queues x {} tags, {} KiB max I/O, flags {:#x})", device->block_device(),
               device->info_.queues, device->info_.depth, device->info_.max_io_bytes / 1024, device->info_.flags);
  return device;
}

Result<std::unique_ptr<UblkDevice>> UblkDevice::recover(ControlDevice& control, cache::QueueTarget& target, uint32_t dev_id,
                                                        const QueueThreadSettings& threads) {
  auto device = std::unique_ptr<UblkDevice>(new UblkDevice(control, target, threads));
  auto info = control.info(dev_id);
  if (!info.ok()) return info.status();
  device->info_ = info.value();
  if (!(device->info_.flags & UBLK_F_USER_RECOVERY)) {
    return Status::error(EINVAL, "ublk device " + std::to_string(dev_id) + " was not created with user recovery");
  }
  if (Status status = control.start_recovery(dev_id); !status.ok()) return status;
  if (Status status = device->open_char_device(); !status.ok()) return status;
  if (Status status = device->start_queues(); !status.ok()) return status;
  if (Status status = control.end_recovery(dev_id, ::getpid()); !status.ok()) return status;
  spdlog::info("{}: recovered: this daemon serves it now", device->block_device());
  return device;
}

UblkDevice::~UblkDevice() {
  if (!removed_) log_cleanup_failure(remove());
}

Status UblkDevice::open_char_device() {
  const std::string path = "/dev/ublkc" + std::to_string(info_.id);
  // devtmpfs creates the node as the driver registers it; give it a moment.
  for (int attempt = 0; attempt < 100; ++attempt) {
    char_fd_.reset(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (char_fd_.valid() || errno != ENOENT) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!char_fd_.valid()) return Status::error(errno, "cannot open " + path + ": " + std::strerror(errno));
  return Status();
}

Status UblkDevice::start_queues() {
  const std::vector<int> allowed = allowed_cpus();
  for (uint16_t q = 0; q < info_.queues; ++q) {
    QueueSettings settings;
    settings.char_fd = char_fd_.get();
    settings.queue = q;
    settings.depth = info_.depth;
    settings.max_io_bytes = info_.max_io_bytes;
    settings.ioctl_encoded = control_.ioctl_encoded();
    settings.poll = threads_.poll;
    if (threads_.affinity != QueueAffinity::None) {
      if (auto cpus = control_.queue_affinity(info_.id, q); cpus.ok()) {
        settings.cpus = queue_thread_cpus(threads_.affinity, cpus.value(), allowed);
        if (threads_.affinity == QueueAffinity::Auto && cpus->size() == 1) {
          spdlog::info("{}: queue {} is mapped to CPU {} alone; its thread runs on {} (queue affinity auto)",
                       block_device(), q, cpus->front(),
                       settings.cpus.empty() ? "any CPU" : fmt::format("CPUs {}", fmt::join(settings.cpus, ",")));
        }
      }
    }
    queues_.push_back(std::make_unique<UblkQueue>(target_, settings));
    if (Status status = queues_.back()->start(); !status.ok()) return status;
  }
  return Status();
}

std::vector<std::vector<int>> UblkDevice::queue_cpus() const {
  std::vector<std::vector<int>> cpus;
  for (const auto& queue : queues_) cpus.push_back(queue->cpus());
  return cpus;
}

Status UblkDevice::park(std::chrono::milliseconds timeout) {
  for (const auto& queue : queues_) queue->request_park();
  removed_ = true;  // left to the next server: the destructor does not remove it
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  unsigned held = 0;
  for (const auto& queue : queues_) {
    if (!queue->wait_finished(deadline)) {
      return Status::error(ETIMEDOUT, block_device() + ": a queue still serves a request after " +
                                          std::to_string(timeout.count()) + " ms; not parked");
    }
    queue->join();
    held += queue->held_requests();
  }
  spdlog::info("{}: parked for the next pcachedd ({} request(s) held in the driver for it)", block_device(), held);
  return Status();
}

Status UblkDevice::remove() {
  Status stopped = control_.stop(info_.id);
  // STOP_DEV still pending: requests the queues have not committed yet, so joining them now would
  // hang. The device stays (and is stopped again on the next remove, or when destroyed).
  if (stopped.code() == ETIMEDOUT) return stopped.with_context(block_device());
  removed_ = true;
  if (!stopped.ok()) spdlog::warn("{}: {}", block_device(), stopped.message());
  // Queue threads end once every tag is aborted; their rings and mappings go with them, and then
  // the last reference to /dev/ublkcN, so that DEL_DEV does not wait forever.
  queues_.clear();
  char_fd_.reset();
  // Whoever still had the disk open (a program that opened it after the daemon checked) sees EIO
  // from now on; the daemon does not wait for it to let go.
  Status removed = control_.remove_without_waiting(info_.id);
  if (removed.ok()) spdlog::info("{}: removed", block_device());
  return removed.ok() ? stopped : removed;
}

}  // namespace pcached::ublk
