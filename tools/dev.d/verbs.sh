# SPDX-License-Identifier: BSD-3-Clause
# tools/dev verbs [--faults SPEC] [--seed N] [--] CMD [ARGS...]: runs any verbs program on
# simulated HCAs.
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
#
# --faults SPEC runs CMD under a fault specification (docs/faults.md; '@FILE' reads it from a
# file), as RNICDV_SIM_FAULTS; --seed N fixes its seed (RNICDV_SIM_SEED). The specification is
# checked (tools/check-faults) before CMD starts: a bad one stops here with the line that names
# the clause and the field. Each process states its seed on stderr, and writes its fault log
# beside its pcap (RNICDV_PCAP) or where the specification's log= says.
while [ $# -gt 0 ]; do
  case "$1" in
    --faults)
      [ $# -ge 2 ] || die "verbs: --faults needs a specification (docs/faults.md)"
      export RNICDV_SIM_FAULTS="$2"; shift 2 ;;
    --seed)
      [ $# -ge 2 ] || die "verbs: --seed needs a number"
      export RNICDV_SIM_SEED="$2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || die "usage: tools/dev verbs [--faults SPEC] [--seed N] [--] CMD [ARGS...] (e.g. tools/dev verbs -- ib_write_lat)"
ensure_pkgs "${build_pkgs[@]}" ibverbs-providers
configure
say "building the uverbs shim in $builddir"
targets=(hw/uverbs/librnicdv-uverbs.so)
[ -n "${RNICDV_SIM_FAULTS:-}" ] && targets+=(tools/check-faults)
ninja -C "$builddir" "${targets[@]}" >/dev/null || ninja -C "$builddir" "${targets[@]}"
if [ -n "${RNICDV_SIM_FAULTS:-}" ]; then
  "$builddir/tools/check-faults" || die "verbs: the fault specification is refused (docs/faults.md)"
fi
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
