// Caches exported as /dev/ublkbN through the ublk driver (src/ublk/), with user recovery: a
// device outlives a daemon that dies, and the next daemon takes it over.
#pragma once

#include <memory>
#include <string>

#include "daemon/frontend.h"
#include "ublk/control_device.h"

namespace pcached::daemon {

class UblkFrontend final : public Frontend {
 public:
  static Result<std::unique_ptr<UblkFrontend>> open(const std::string& control_path);

  Result<std::unique_ptr<ExportedDevice>> create(cache::Cache& cache, const ExportSettings& settings) override;
  Result<std::unique_ptr<ExportedDevice>> restore(cache::Cache& cache, const ExportSettings& settings) override;

 private:
  explicit UblkFrontend(std::unique_ptr<ublk::ControlDevice> control) : control_(std::move(control)) {}

  // Outlives every device: they send their STOP_DEV and DEL_DEV through it.
  std::unique_ptr<ublk::ControlDevice> control_;
};

}  // namespace pcached::daemon
