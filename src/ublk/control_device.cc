#include "ublk/control_device.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "ublk/uapi_compat.h"

namespace pcached::ublk {

namespace {

struct Waiter final : io::CompletionHandler {
  bool done = false;
  int result = 0;
  void on_completion(int value) override {
    result = value;
    done = true;
  }
};

const char* name_of(uint32_t nr) {
  switch (static_cast<ControlCommand>(nr)) {
    case ControlCommand::GetQueueAffinity: return "GET_QUEUE_AFFINITY";
    case ControlCommand::GetDevInfo: return "GET_DEV_INFO";
    case ControlCommand::AddDev: return "ADD_DEV";
    case ControlCommand::DelDev: return "DEL_DEV";
    case ControlCommand::StartDev: return "START_DEV";
    case ControlCommand::StopDev: return "STOP_DEV";
    case ControlCommand::SetParams: return "SET_PARAMS";
    case ControlCommand::GetParams: return "GET_PARAMS";
    case ControlCommand::StartUserRecovery: return "START_USER_RECOVERY";
    case ControlCommand::EndUserRecovery: return "END_USER_RECOVERY";
    case ControlCommand::GetFeatures: return "GET_FEATURES";
    case ControlCommand::DelDevAsync: return "DEL_DEV_ASYNC";
  }
  return "unknown";
}

DeviceInfo from_kernel(const ublksrv_ctrl_dev_info& raw) {
  return {raw.dev_id, raw.nr_hw_queues, raw.queue_depth, raw.state, raw.max_io_buf_bytes, raw.ublksrv_pid, raw.flags};
}

ublksrv_ctrl_cmd for_device(uint32_t dev_id) {
  ublksrv_ctrl_cmd cmd{};
  cmd.dev_id = dev_id;
  cmd.queue_id = 0xFFFF;
  return cmd;
}

}  // namespace

Result<std::unique_ptr<ControlDevice>> ControlDevice::open(const std::string& path) {
  auto device = std::unique_ptr<ControlDevice>(new ControlDevice());
  device->fd_.reset(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!device->fd_.valid()) {
    const int err = errno;
    return Status::error(err, "cannot open " + path + ": " + std::strerror(err) +
                                  (err == ENOENT ? " (is the ublk_drv module loaded? modprobe ublk_drv)" : ""));
  }
  auto ring = io::Ring::create(16, IORING_SETUP_SQE128);
  if (!ring.ok()) return ring.status().with_context("ublk control");
  device->ring_ = std::move(ring.value());

  // GET_FEATURES exists only in ioctl form (6.5+): if it answers, so will every ioctl-encoded
  // command; if not, the kernel is older and the legacy opcodes are the ones it knows.
  // PCACHED_UBLK_LEGACY_OPCODES=1 skips the question and takes the legacy path, as on such a
  // kernel: the VM tests run it on a 6.12 kernel built to take both (BLKDEV_UBLK_LEGACY_OPCODES).
  const char* legacy = std::getenv("PCACHED_UBLK_LEGACY_OPCODES");
  if (legacy == nullptr || std::string_view(legacy) != "1") {
    uint64_t features = 0;
    ublksrv_ctrl_cmd cmd = for_device(0);
    cmd.addr = reinterpret_cast<uint64_t>(&features);
    cmd.len = sizeof features;
    auto answer = device->send(control_opcode(ControlCommand::GetFeatures, true), cmd, std::chrono::seconds(5));
    if (answer.ok()) {
      device->features_ = features;
      device->ioctl_encoded_ = true;
    }
  }
  spdlog::info("ublk: driver features {:#x}, {} opcodes", device->features_,
               device->ioctl_encoded_ ? "ioctl-encoded" : "legacy");
  return device;
}

Result<int> ControlDevice::send(uint32_t command, ublksrv_ctrl_cmd cmd, std::chrono::seconds timeout) {
  std::lock_guard lock(mutex_);
  auto waiter = std::make_unique<Waiter>();
  io_uring_sqe* sqe = ring_->prepare(waiter.get());
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd_.get();
  sqe->cmd_op = command;
  std::memcpy(io::Ring::command_area(sqe), &cmd, sizeof cmd);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!waiter->done) {
    if (std::chrono::steady_clock::now() > deadline) {
      // The command is still in the kernel and completes into its waiter whenever it ends (a
      // later command's wait dispatches it): the waiter is left to it, a few bytes, rather than
      // taking the daemon and every other device down.
      spdlog::error("ublk control command {:#x} did not complete in {} s; left pending in the kernel", command,
                    timeout.count());
      (void)waiter.release();
      return Status::error(ETIMEDOUT, "no answer from the driver in " + std::to_string(timeout.count()) + " s");
    }
    ring_->wait_and_dispatch(std::chrono::milliseconds(200));
  }
  if (waiter->result < 0) return Status::error(-waiter->result, std::strerror(-waiter->result));
  return waiter->result;
}

Result<int> ControlDevice::command(uint32_t nr, const ublksrv_ctrl_cmd& cmd, const std::string& what) {
  auto result = send(control_opcode(static_cast<ControlCommand>(nr), ioctl_encoded_), cmd);
  if (!result.ok()) return result.status().with_context(std::string("ublk ") + name_of(nr) + " (" + what + ")");
  return result;
}

Result<DeviceInfo> ControlDevice::add(int32_t dev_id, uint16_t queues, uint16_t depth, uint32_t max_io_bytes,
                                      uint64_t flags) {
  ublksrv_ctrl_dev_info raw{};
  raw.nr_hw_queues = queues;
  raw.queue_depth = depth;
  raw.max_io_buf_bytes = max_io_bytes;
  raw.dev_id = static_cast<uint32_t>(dev_id);
  raw.flags = flags;
  ublksrv_ctrl_cmd cmd = for_device(static_cast<uint32_t>(dev_id));
  cmd.addr = reinterpret_cast<uint64_t>(&raw);
  cmd.len = sizeof raw;
  auto result = command(static_cast<uint32_t>(ControlCommand::AddDev), cmd, "new device");
  if (!result.ok()) return result.status();
  return from_kernel(raw);
}

Status ControlDevice::set_params(uint32_t dev_id, const ublk_params& params) {
  ublk_params copy = params;
  ublksrv_ctrl_cmd cmd = for_device(dev_id);
  cmd.addr = reinterpret_cast<uint64_t>(&copy);
  cmd.len = sizeof copy;
  return command(static_cast<uint32_t>(ControlCommand::SetParams), cmd, "device " + std::to_string(dev_id)).status();
}

Result<DeviceInfo> ControlDevice::info(uint32_t dev_id) {
  ublksrv_ctrl_dev_info raw{};
  ublksrv_ctrl_cmd cmd = for_device(dev_id);
  cmd.addr = reinterpret_cast<uint64_t>(&raw);
  cmd.len = sizeof raw;
  auto result = command(static_cast<uint32_t>(ControlCommand::GetDevInfo), cmd, "device " + std::to_string(dev_id));
  if (!result.ok()) return result.status();
  return from_kernel(raw);
}

Status ControlDevice::start(uint32_t dev_id, int32_t pid) {
  ublksrv_ctrl_cmd cmd = for_device(dev_id);
  cmd.data[0] = static_cast<uint64_t>(pid);
  return command(static_cast<uint32_t>(ControlCommand::StartDev), cmd, "device " + std::to_string(dev_id)).status();
}

Status ControlDevice::stop(uint32_t dev_id) {
  return command(static_cast<uint32_t>(ControlCommand::StopDev), for_device(dev_id), "device " + std::to_string(dev_id))
      .status();
}

Status ControlDevice::remove(uint32_t dev_id) {
  return command(static_cast<uint32_t>(ControlCommand::DelDev), for_device(dev_id), "device " + std::to_string(dev_id))
      .status();
}

Status ControlDevice::remove_without_waiting(uint32_t dev_id) {
  if (ioctl_encoded_) {
    Status status = command(static_cast<uint32_t>(ControlCommand::DelDevAsync), for_device(dev_id),
                            "device " + std::to_string(dev_id))
                        .status();
    // Kernels before 6.9 do not know it (EOPNOTSUPP; EINVAL or ENOTTY elsewhere): DEL_DEV then.
    const int code = status.code();
    if (status.ok() || (code != EOPNOTSUPP && code != EINVAL && code != ENOTTY)) return status;
  }
  return remove(dev_id);
}

Status ControlDevice::start_recovery(uint32_t dev_id) {
  // EBUSY while the dead server's file and ring are still being released and the device
  // quiesced: retry for up to 30 s, as ublksrv does.
  for (int attempt = 0;; ++attempt) {
    auto result = command(static_cast<uint32_t>(ControlCommand::StartUserRecovery), for_device(dev_id),
                          "device " + std::to_string(dev_id));
    if (result.ok() || result.status().code() != EBUSY || attempt >= 300) return result.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status ControlDevice::end_recovery(uint32_t dev_id, int32_t pid) {
  ublksrv_ctrl_cmd cmd = for_device(dev_id);
  cmd.data[0] = static_cast<uint64_t>(pid);
  return command(static_cast<uint32_t>(ControlCommand::EndUserRecovery), cmd, "device " + std::to_string(dev_id))
      .status();
}

Result<std::vector<int>> ControlDevice::queue_affinity(uint32_t dev_id, uint16_t queue) {
  std::vector<uint64_t> mask(16, 0);  // 1024 CPUs
  ublksrv_ctrl_cmd cmd = for_device(dev_id);
  cmd.addr = reinterpret_cast<uint64_t>(mask.data());
  cmd.len = static_cast<uint16_t>(mask.size() * sizeof(uint64_t));
  cmd.data[0] = queue;
  auto result = command(static_cast<uint32_t>(ControlCommand::GetQueueAffinity), cmd, "queue " + std::to_string(queue));
  if (!result.ok()) return result.status();
  std::vector<int> cpus;
  for (size_t word = 0; word < mask.size(); ++word) {
    for (int bit = 0; bit < 64; ++bit) {
      if (mask[word] & (1ull << bit)) cpus.push_back(static_cast<int>(word * 64 + bit));
    }
  }
  return cpus;
}

}  // namespace pcached::ublk
