#include "daemon/frontend.h"

#include "daemon/in_process_frontend.h"
#include "daemon/ublk_frontend.h"

namespace pcached::daemon {

Result<std::unique_ptr<Frontend>> open_frontend(FrontendKind kind, const std::string& ublk_control) {
  if (kind == FrontendKind::InProcess) return std::unique_ptr<Frontend>(std::make_unique<InProcessFrontend>());
  auto ublk = UblkFrontend::open(ublk_control);
  if (!ublk.ok()) return ublk.status();
  return std::unique_ptr<Frontend>(std::move(ublk.value()));
}

}  // namespace pcached::daemon
