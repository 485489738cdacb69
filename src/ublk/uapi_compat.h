// The ublk uapi as this server uses it. Debian 12's <linux/ublk_cmd.h> is Linux 6.1's: it lacks
// the ioctl-encoded opcodes, GET_FEATURES and the later feature bits, which the 6.12 test kernel
// has. They are defined here, once, from the kernel's documented values; the server negotiates
// at run time which ones the running kernel understands.
#pragma once

#include <linux/ublk_cmd.h>

#include <cstdint>

namespace pcached::ublk {

// _IOR/_IOWR('u', nr, struct ublksrv_ctrl_cmd) and _IOWR('u', nr, struct ublksrv_io_cmd).
constexpr uint32_t ioctl_read(uint32_t nr, uint32_t size) { return (2u << 30) | (size << 16) | (0x75u << 8) | nr; }
constexpr uint32_t ioctl_read_write(uint32_t nr, uint32_t size) { return (3u << 30) | (size << 16) | (0x75u << 8) | nr; }

enum class ControlCommand : uint32_t {
  GetQueueAffinity = 0x01,
  GetDevInfo = 0x02,
  AddDev = 0x04,
  DelDev = 0x05,
  StartDev = 0x06,
  StopDev = 0x07,
  SetParams = 0x08,
  GetParams = 0x09,
  StartUserRecovery = 0x10,
  EndUserRecovery = 0x11,
  GetFeatures = 0x13,  // 6.5+, ioctl form only
  DelDevAsync = 0x14,  // 6.9+, ioctl form only: DEL_DEV without waiting for the last reference
};

// The opcode to send: the ioctl form where the kernel understands it (6.4+), else the legacy one.
constexpr uint32_t control_opcode(ControlCommand command, bool ioctl_encoded) {
  const auto nr = static_cast<uint32_t>(command);
  if (!ioctl_encoded) return nr;
  const bool reads_only = command == ControlCommand::GetQueueAffinity || command == ControlCommand::GetDevInfo ||
                          command == ControlCommand::GetParams || command == ControlCommand::GetFeatures ||
                          command == ControlCommand::DelDevAsync;
  return reads_only ? ioctl_read(nr, sizeof(ublksrv_ctrl_cmd)) : ioctl_read_write(nr, sizeof(ublksrv_ctrl_cmd));
}

constexpr uint32_t kFetchRequest = UBLK_IO_FETCH_REQ;
constexpr uint32_t kCommitAndFetchRequest = UBLK_IO_COMMIT_AND_FETCH_REQ;
constexpr uint32_t io_opcode(uint32_t legacy, bool ioctl_encoded) {
  return ioctl_encoded ? ioctl_read_write(legacy, sizeof(ublksrv_io_cmd)) : legacy;
}

// Feature bits beyond the 6.1 header.
constexpr uint64_t kFeatureUnprivilegedDev = 1ull << 5;
constexpr uint64_t kFeatureCmdIoctlEncode = 1ull << 6;
constexpr uint64_t kFeatureUserCopy = 1ull << 7;
constexpr uint64_t kFeatureZoned = 1ull << 8;
constexpr uint64_t kFeatureUserRecoveryFailIo = 1ull << 9;

// Descriptor array layout: one array per queue, at a fixed stride in /dev/ublkcN.
constexpr uint64_t kDescriptorStride(uint64_t page_size) {
  return (UBLK_MAX_QUEUE_DEPTH * sizeof(ublksrv_io_desc) + page_size - 1) / page_size * page_size;
}

static_assert(sizeof(ublksrv_ctrl_cmd) == 32);
static_assert(sizeof(ublksrv_ctrl_dev_info) == 64);
static_assert(sizeof(ublksrv_io_cmd) == 16);
static_assert(sizeof(ublksrv_io_desc) == 24);
static_assert(control_opcode(ControlCommand::AddDev, true) == 0xC0207504u);
static_assert(control_opcode(ControlCommand::GetFeatures, true) == 0x80207513u);
static_assert(io_opcode(UBLK_IO_FETCH_REQ, true) == 0xC0107520u);

}  // namespace pcached::ublk
