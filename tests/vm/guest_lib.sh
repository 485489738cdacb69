# Shared steps of the guest scripts (sourced; the harness runs them with sh -e).

# A devdax namespace of the given size on the emulated NVDIMM: /dev/dax0.0.
make_devdax() {
  ndctl disable-region all >/dev/null
  ndctl init-labels -f all >/dev/null
  ndctl enable-region all >/dev/null
  ndctl create-namespace -r region0 -m devdax -s "$1" >/dev/null
  test -c /dev/dax0.0
}

start_daemon() {
  pcachedd --state-dir /var/lib/pcached "$@" >/tmp/pcachedd.log 2>&1 &
  DAEMON_PID=$!
  for i in $(seq 100); do [ -S /run/pcached/pcached.sock ] && return 0; sleep 0.1; done
  cat /tmp/pcachedd.log
  return 1
}

show_daemon_log() {
  echo "---- pcachedd log"
  cat /tmp/pcachedd.log
  echo "----"
}
