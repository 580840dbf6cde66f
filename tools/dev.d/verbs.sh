# SPDX-License-Identifier: BSD-3-Clause
# tools/dev verbs [--] CMD [ARGS...]: runs any verbs program on simulated HCAs.
#
# Sourced by tools/dev. Builds librnicdv-uverbs.so and runs CMD with it preloaded: the
# unmodified libibverbs and libmlx5 in CMD then find "rnicsim0", "rnicsim1", ... and every
# verb, WQE, doorbell and CQ poll goes to the simulated HCA. Two processes (two terminals, or
# a server and a client) reach each other over the simulated UDP wire on 127.0.0.x:
#
#   tools/dev verbs -- ib_write_lat              # server
#   tools/dev verbs -- ib_write_lat 127.0.0.1    # client
#
# Environment: RNICDV_UVERBS_DEVICES (devices per process, default 2), RNICDV_UVERBS_LOG=1
# (report every failed command and every async event on stderr), and the simulator's
# RNICDV_SIM_WIRE / RNICDV_SIM_ADDR / RNICDV_PCAP.
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || die "usage: tools/dev verbs [--] CMD [ARGS...] (e.g. tools/dev verbs -- ib_write_lat)"
ensure_pkgs "${build_pkgs[@]}" ibverbs-providers
configure
say "building the uverbs shim in $builddir"
ninja -C "$builddir" hw/uverbs/librnicdv-uverbs.so >/dev/null ||
  ninja -C "$builddir" hw/uverbs/librnicdv-uverbs.so
case "$builddir" in
  /*) shim="$builddir/hw/uverbs/librnicdv-uverbs.so" ;;
  *) shim="$top/$builddir/hw/uverbs/librnicdv-uverbs.so" ;;
esac
# The command runs where the user stands, so that its relative paths (the program itself,
# its arguments, the files it writes) mean what they mean there.
cd "$caller_dir"
if ! command -v "$1" >/dev/null; then
  case "$1" in
    ib_*) ensure_pkgs perftest ;;
    ibv_*) ensure_pkgs ibverbs-utils ;;
  esac
fi
export LD_PRELOAD="$shim${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$@"
