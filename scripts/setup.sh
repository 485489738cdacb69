#!/usr/bin/env bash
# Installs every Debian package pcached needs to build, test and benchmark (idempotent: apt runs
# only when something is missing), then configures and builds the project in build/.
#   scripts/setup.sh            install + build
#   scripts/setup.sh --deps     install only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # toolchain and build
  g++ clang libclang-rt-14-dev meson ninja-build pkg-config python3
  # libraries named by the design
  liburing-dev libpmem2-dev libndctl-dev libdaxctl-dev libspdlog-dev libfmt-dev libcli11-dev
  nlohmann-json3-dev catch2 libabsl-dev libsystemd-dev prometheus-cpp-dev libxxhash-dev
  # promtool checks the metrics
  prometheus
  # checks of the systemd unit (systemd-analyze verify looks up the man pages it names)
  systemd man-db
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} > 0)); then
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "setup: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[[ "${1:-}" == "--deps" ]] && exit 0

if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=debugoptimized
fi
meson compile -C build
