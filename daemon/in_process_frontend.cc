#include "daemon/in_process_frontend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

namespace pcached::daemon {

class InProcessFrontend::Device final : public ExportedDevice {
 public:
  Device(cache::Cache& cache, const ExportSettings& settings, uint32_t id, std::shared_ptr<Ids> ids)
      : cache_(cache), settings_(settings), id_(id), ids_(std::move(ids)) {}

  ~Device() override {
    // A queue left open here would outlive the cache it writes to: that is the owner's bug, and
    // this is the last place that can say so.
    if (const size_t open = open_queues(); open != 0) spdlog::error("{}: destroyed with {} queues open", name(), open);
    std::lock_guard lock(ids_->mutex);
    ids_->used.erase(id_);
  }

  uint32_t id() const override { return id_; }
  std::string name() const override { return "inproc" + std::to_string(id_); }
  nlohmann::json describe() const override {
    return {{"kind", "in-process"}, {"id", id_}, {"queues", settings_.queues}, {"depth", settings_.depth},
            {"open_queues", open_queues()}};
  }

  Status check_unused() const override {
    // The engine may detach only once no queue of it is left; a queue is the in-process user
    // of the device, so one still open means the device is in use.
    if (const size_t open = open_queues(); open != 0) {
      return Status::error(EBUSY, name() + " is in use: " + std::to_string(open) + " in-process queue(s) open");
    }
    return Status();
  }
  Status remove() override { return check_unused(); }
  // Nothing reaches it but its queues: with none open, nothing is under way.
  Status park() override { return check_unused(); }

  Result<std::shared_ptr<frontend::SyncQueue>> open_queue() override {
    // As many queues as the device was set up with, as a ublk device has as many hardware queues.
    if (const size_t open = open_queues(); open >= settings_.queues) {
      return Status::error(EBUSY, name() + ": all " + std::to_string(settings_.queues) + " queues are open");
    }
    auto queue = frontend::SyncQueue::create(cache_);
    if (!queue.ok()) return queue.status().with_context(name());
    std::shared_ptr<frontend::SyncQueue> shared = std::move(queue.value());
    std::lock_guard lock(queues_mutex_);
    queues_.push_back(shared);
    return shared;
  }

 private:
  size_t open_queues() const {
    std::lock_guard lock(queues_mutex_);
    std::erase_if(queues_, [](const std::weak_ptr<frontend::SyncQueue>& queue) { return queue.expired(); });
    return queues_.size();
  }

  cache::Cache& cache_;
  const ExportSettings settings_;
  const uint32_t id_;
  std::shared_ptr<Ids> ids_;
  mutable std::mutex queues_mutex_;
  // The queues handed out; their owners release them, the device only watches.
  mutable std::vector<std::weak_ptr<frontend::SyncQueue>> queues_;
};

Result<std::unique_ptr<ExportedDevice>> InProcessFrontend::create(cache::Cache& cache, const ExportSettings& settings) {
  std::lock_guard lock(ids_->mutex);
  uint32_t id = 0;
  if (settings.device_id >= 0) {
    id = static_cast<uint32_t>(settings.device_id);
    if (ids_->used.contains(id)) return Status::error(EBUSY, "inproc" + std::to_string(id) + " exists already");
  } else {
    while (ids_->used.contains(id)) ++id;
  }
  ids_->used.insert(id);
  return std::unique_ptr<ExportedDevice>(std::make_unique<Device>(cache, settings, id, ids_));
}

Result<std::unique_ptr<ExportedDevice>> InProcessFrontend::restore(cache::Cache& cache, const ExportSettings& settings) {
  return create(cache, settings);
}

}  // namespace pcached::daemon
