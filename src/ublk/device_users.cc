#include "ublk/device_users.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>

#include "common/unique_fd.h"

namespace pcached::ublk {

namespace {

// The devices stacked on it (device-mapper, md, ...), as /sys names them.
std::string holders_of(dev_t device) {
  std::string names;
  std::error_code error;
  const std::string dir = "/sys/dev/block/" + std::to_string(major(device)) + ":" + std::to_string(minor(device)) + "/holders";
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (!names.empty()) names += ", ";
    names += entry.path().filename().string();
  }
  return names;
}

std::string command_of(const std::string& pid) {
  std::ifstream comm("/proc/" + pid + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "?" : name;
}

// A process other than this one with the device open, if /proc shows one. (Without
// CAP_SYS_PTRACE, other users' descriptors are not readable; those go unseen.)
std::optional<std::string> process_with_open(dev_t device) {
  const std::string self = std::to_string(::getpid());
  std::error_code error;
  for (const auto& process : std::filesystem::directory_iterator("/proc", error)) {
    const std::string pid = process.path().filename().string();
    unsigned long number = 0;
    if (std::from_chars(pid.data(), pid.data() + pid.size(), number).ptr != pid.data() + pid.size() || pid == self) {
      continue;
    }
    std::error_code fd_error;
    for (const auto& fd : std::filesystem::directory_iterator(process.path() / "fd", fd_error)) {
      struct stat st {};
      if (::stat(fd.path().c_str(), &st) == 0 && S_ISBLK(st.st_mode) && st.st_rdev == device) {
        return "process " + pid + " (" + command_of(pid) + ")";
      }
    }
  }
  return std::nullopt;
}

}  // namespace

Status ensure_unused(const std::string& block_device) {
  struct stat st {};
  if (::stat(block_device.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) return Status();
  // A mount or a stacked device holds the disk exclusively; an exclusive open fails then. It is
  // closed at once: an open of ours would keep DEL_DEV waiting too.
  UniqueFd probe(::open(block_device.c_str(), O_RDONLY | O_EXCL | O_CLOEXEC | O_NONBLOCK));
  if (!probe.valid() && errno == EBUSY) {
    const std::string holders = holders_of(st.st_rdev);
    return Status::error(EBUSY, block_device + " is in use: " +
                                    (holders.empty() ? "a filesystem is mounted on it, or a program claimed it"
                                                     : "held by " + holders) +
                                    "; unmount it (or remove what is stacked on it) first");
  }
  probe.reset();
  if (auto user = process_with_open(st.st_rdev)) {
    return Status::error(EBUSY, block_device + " is in use: " + *user + " has it open; close it first");
  }
  return Status();
}

}  // namespace pcached::ublk
