# SPDX-License-Identifier: BSD-3-Clause
# tools/dev hardware [--device NAME] [--sim] [--no-build] [--report FILE]: qualifies the
# driver on an mlx5 device (docs/hardware.md).
#
# Sourced by tools/dev. Finds an mlx5 device (ibv_get_device_list and mlx5dv_is_supported, or
# --device NAME); without one it prints one line saying so and exits 77. On the device it
# runs the mlx5 suite, rnicperf's eight tests in loopback (short runs), the early-posting cases
# through librdmacm (in place and shadow, established by the RTU and by COMM_EST), and the
# doorbell experiment (what the device does with WQEs no doorbell announced, and the device
# profile that supports). Writes one report, JSON and a readable summary
# ($builddir/hardware-report.json and .txt unless --report FILE.json), and exits 0 only if
# every step passed.
#
# --sim runs all of it on the simulated device rnicsim0 through the uverbs shim (CI does):
# libibverbs, libmlx5 and librdmacm as on a ConnectX, the simulator underneath.
# --no-build uses the build directory as it is (it must hold the tools and the tests).
device="" sim=0 nobuild=0 report=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) [ $# -ge 2 ] || die "--device needs a name"; device=$2; shift 2 ;;
    --device=*) device=${1#--device=}; shift ;;
    --sim) sim=1; shift ;;
    --no-build) nobuild=1; shift ;;
    --report) [ $# -ge 2 ] || die "--report needs a file"; report=$2; shift 2 ;;
    --report=*) report=${1#--report=}; shift ;;
    *) die "usage: tools/dev hardware [--device NAME] [--sim] [--no-build] [--report FILE]" ;;
  esac
done
case "$builddir" in /*) bdir=$builddir ;; *) bdir="$top/$builddir" ;; esac
[ -n "$report" ] || report="$bdir/hardware-report.json"
case "$report" in /*) ;; *) report="$caller_dir/$report" ;; esac
qualify="$bdir/tools/hw-qualify"
shim="$bdir/hw/uverbs/librnicdv-uverbs.so"

# Up to the device check the command is quiet (what it builds is said only if it fails), so
# that a machine without a device gets its one line.
if [ "$nobuild" = 0 ]; then
  ensure_pkgs "${build_pkgs[@]}" ibverbs-providers python3
  prep_log=$(mktemp /tmp/rnicdv-hardware-build.XXXXXX)
  if ! { configure && ninja -C "$builddir" tools/hw-qualify hw/uverbs/librnicdv-uverbs.so; } \
      >"$prep_log" 2>&1; then
    cat "$prep_log" >&2
    rm -f "$prep_log"
    die "building hw-qualify in $builddir failed"
  fi
  rm -f "$prep_log"
fi
[ -x "$qualify" ] || die "$qualify is missing (build first, or drop --no-build)"

# On the simulator every program below runs with the shim preloaded; the user's own
# LD_PRELOAD is kept after it.
preload=()
if [ "$sim" = 1 ]; then
  [ -f "$shim" ] || die "$shim is missing (build first, or drop --no-build)"
  preload=(env "LD_PRELOAD=$shim${LD_PRELOAD:+:$LD_PRELOAD}")
  [ -n "$device" ] || device=rnicsim0
fi

# One line and 77 when there is no device: nothing else is built or run.
find_args=()
[ -n "$device" ] && find_args=(--device "$device")
rc=0
found=$("${preload[@]}" "$qualify" find "${find_args[@]}") || rc=$?
if [ "$rc" != 0 ]; then
  printf '%s\n' "$found"
  exit "$rc"
fi
device=$found

if [ "$nobuild" = 0 ]; then
  ensure_pkgs "${test_pkgs[@]}"
  build
fi
memlock_check

work=$(mktemp -d /tmp/rnicdv-hardware.XXXXXX)
trap 'rm -rf "$work"' EXIT
steps="$work/steps.tsv"
: >"$steps"
say "qualifying $device (logs in $work until the report is written)"

# step NAME LOG COMMAND...: runs COMMAND with its output in LOG, records pass/fail/duration.
step() {
  local name=$1 log=$2 t0 t1 rc=0
  shift 2
  printf '\033[1m==> hardware: %s\033[0m\n' "$name" >&2
  t0=$(date +%s.%N)
  "$@" >"$log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\n' "$name" "$([ $rc = 0 ] && echo pass || echo fail)" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$log" >>"$steps"
  [ $rc = 0 ] || { printf 'hardware: %s failed (exit %d):\n' "$name" $rc >&2; tail -n 30 "$log" >&2; }
  return 0
}

"${preload[@]}" "$qualify" info "$device" >"$work/device.json" || true

# The mlx5 suite: the tests that need a device run on this one (RNICDV_MLX5_DEVICE). With
# --sim they run with the shim preloaded, through meson's test wrapper.
mlx5_suite() {
  local wrap=() rc=0
  [ "$sim" = 1 ] && wrap=(--wrapper "env LD_PRELOAD=$shim")
  RNICDV_MLX5_DEVICE=$device meson test -C "$bdir" --no-rebuild --print-errorlogs \
    --num-processes 1 --suite mlx5 "${wrap[@]}" >"$work/mlx5-meson.out" 2>&1 || rc=$?
  cat "$work/mlx5-meson.out"
  [ "$rc" = 0 ] || return "$rc"
  # A device test that skipped qualified nothing: it counts as a failure here.
  if grep -Eq '^Skipped: *[1-9]' "$work/mlx5-meson.out"; then
    echo "hardware: tests of the mlx5 suite skipped on $device"
    return 1
  fi
}
step "mlx5 suite" "$work/mlx5-suite.log" mlx5_suite

# rnicperf's eight tests, both ends in this process: two QPs on the device.
rnicperf="$bdir/tools/rnicperf/rnicperf"
for t in write_lat write_bw send_lat send_bw read_lat read_bw atomic_lat atomic_bw; do
  case $t in *_lat) iters=200 ;; *) iters=1000 ;; esac
  step "rnicperf $t" "$work/rnicperf-$t.log" timeout 120 "${preload[@]}" "$rnicperf" "$t" \
    -d "$device" --loopback -n "$iters" -F --out_json_file="$work/rnicperf-$t.json"
done

step "early posting through librdmacm" "$work/early-post.log" \
  timeout 300 "${preload[@]}" "$qualify" early-post "$device" --json "$work/early-post.json"
step "doorbell experiment" "$work/experiment.log" \
  timeout 300 "${preload[@]}" "$qualify" experiment "$device" --json "$work/experiment.json"

mkdir -p "$(dirname "$report")"
rc=0
python3 "$top/tools/dev.d/hardware_report.py" "$work" "$report" "$sim" || rc=$?
cat "${report%.json}.txt"
exit $rc
