#include "daemon/ublk_frontend.h"

#include <spdlog/spdlog.h>

#include "ublk/device_users.h"
#include "ublk/ublk_device.h"

namespace pcached::daemon {

namespace {

class UblkExport final : public ExportedDevice {
 public:
  explicit UblkExport(std::unique_ptr<ublk::UblkDevice> device) : device_(std::move(device)) {}

  uint32_t id() const override { return device_->id(); }
  std::string name() const override { return device_->block_device(); }
  nlohmann::json describe() const override {
    const ublk::DeviceInfo& info = device_->info();
    return {{"kind", "ublk"}, {"id", info.id}, {"queues", info.queues}, {"depth", info.depth},
            {"max_io_bytes", info.max_io_bytes}, {"queue_cpus", device_->queue_cpus()}};
  }
  Status check_unused() const override { return ublk::ensure_unused(name()); }
  Status remove() override {
    if (Status busy = check_unused(); !busy.ok()) return busy;
    return device_->remove();
  }
  // (A request the backing device does not answer within this is left to the next daemon.)
  Status park() override { return device_->park(std::chrono::seconds(10)); }
  Result<std::shared_ptr<frontend::SyncQueue>> open_queue() override {
    return Status::error(ENOTSUP, name() + ": I/O goes through the block device, not an in-process queue");
  }

 private:
  std::unique_ptr<ublk::UblkDevice> device_;  // removes the device when destroyed unless removed
};

std::unique_ptr<ExportedDevice> exported(std::unique_ptr<ublk::UblkDevice> device) {
  return std::make_unique<UblkExport>(std::move(device));
}

ublk::DeviceSettings device_settings(const ExportSettings& settings) {
  ublk::DeviceSettings device;
  device.dev_id = settings.device_id;
  device.queues = static_cast<uint16_t>(settings.queues);
  device.depth = static_cast<uint16_t>(settings.depth);
  device.threads = settings.queue_threads;
  return device;
}

}  // namespace

Result<std::unique_ptr<UblkFrontend>> UblkFrontend::open(const std::string& control_path) {
  auto control = ublk::ControlDevice::open(control_path);
  if (!control.ok()) return control.status();
  return std::unique_ptr<UblkFrontend>(new UblkFrontend(std::move(control.value())));
}

Result<std::unique_ptr<ExportedDevice>> UblkFrontend::create(cache::Cache& cache, const ExportSettings& settings) {
  auto device = ublk::UblkDevice::create(*control_, cache, device_settings(settings));
  if (!device.ok()) return device.status();
  return exported(std::move(device.value()));
}

Result<std::unique_ptr<ExportedDevice>> UblkFrontend::restore(cache::Cache& cache, const ExportSettings& settings) {
  // A device left by the previous daemon is taken over (user recovery): its users see a pause. A
  // dead one is deleted, so that its number is free for the device made anew.
  if (settings.device_id >= 0) {
    const auto id = static_cast<uint32_t>(settings.device_id);
    auto info = control_->info(id);
    if (info.ok() && info->state != UBLK_S_DEV_DEAD) {
      auto device = ublk::UblkDevice::recover(*control_, cache, id, settings.queue_threads);
      if (!device.ok()) return device.status();
      return exported(std::move(device.value()));
    }
    if (info.ok()) {
      if (Status removed = control_->remove(id); !removed.ok()) {
        spdlog::warn("ublk device {}: stale device: {}", id, removed.message());
      }
    }
  }
  return create(cache, settings);
}

}  // namespace pcached::daemon
