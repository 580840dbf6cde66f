#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# An endless send_bw (--run_infinitely -D 1) between rnicperf and Debian's unmodified
# perftest, each in its own process on its own simulated HCA on the UDP wire: perftest
# through the uverbs shim, rnicperf on the driver. perftest's endless run ends only by a
# signal, and its send_bw dies of SIGINT (it catches it in one-sided tests only), so perftest
# is stopped with SIGINT once both sides have printed two interval rows:
#
#   rnicperf-server  perftest sends, rnicperf receives; once perftest is stopped, rnicperf
#                    must end by itself (exit 0) with " Client closed connection".
#   perftest-server  rnicperf sends and stops after --stop-after=3 rows (exit 0, "User
#                    stopped traffic"); perftest receives until it is stopped.
#
# Each side must print at least two rows with a non-zero bandwidth; perftest must still be
# running when it is stopped.
#
#   run_perftest_endless.sh SHIM RNICPERF PORT rnicperf-server|perftest-server
set -u
. "$(dirname "$0")/listening.sh"
shim=$1 rnicperf=$2 port=$3 mode=$4
if ! command -v ib_send_bw >/dev/null || ! command -v stdbuf >/dev/null; then
  echo "ib_send_bw or stdbuf not found (Debian packages perftest, coreutils)" >&2
  exit 77
fi
work=$(mktemp -d)
perftest_pid= rnicperf_pid=
trap 'kill $perftest_pid $rnicperf_pid 2>/dev/null; rm -rf "$work"' EXIT
args=(--run_infinitely -D 1 -s 2048 -p "$port")
# perftest's rows are printed by a thread of their own; line-buffered, a signal loses none.
perftest=(env LD_PRELOAD="$shim" RNICDV_UVERBS_DEVICES=1 stdbuf -oL ib_send_bw "${args[@]}")
ours=(env RNICDV_SIM_WIRE=udp "$rnicperf" send_bw "${args[@]}" --timeout=30)
# Rows of the bandwidth table with a non-zero average.
rows() { awk '$1 == 2048 && $4 > 0' "$work/$1.out" | wc -l; }
case $mode in
  rnicperf-server)
    timeout 120 "${ours[@]}" >"$work/rnicperf.out" 2>&1 &
    rnicperf_pid=$!
    wait_listening "$port" $rnicperf_pid
    timeout 120 "${perftest[@]}" 127.0.0.1 >"$work/perftest.out" 2>&1 &
    perftest_pid=$!
    ;;
  perftest-server)
    timeout 120 "${perftest[@]}" >"$work/perftest.out" 2>&1 &
    perftest_pid=$!
    wait_listening "$port" $perftest_pid
    timeout 120 "${ours[@]}" --stop-after=3 127.0.0.1 >"$work/rnicperf.out" 2>&1 &
    rnicperf_pid=$!
    ;;
  *) echo "mode: rnicperf-server or perftest-server" >&2; exit 2 ;;
esac
for _ in $(seq 1 600); do
  [ "$(rows perftest)" -ge 2 ] && [ "$(rows rnicperf)" -ge 2 ] && break
  kill -0 $perftest_pid 2>/dev/null || break
  sleep 0.1
done
if [ $mode = perftest-server ]; then
  wait $rnicperf_pid
  rnicperf_rc=$?
fi
# timeout passes the signal on; perftest dies of it (130), or ran out its 120 s (124).
perftest_running=0
kill -0 $perftest_pid 2>/dev/null && perftest_running=1
kill -INT $perftest_pid 2>/dev/null
wait $perftest_pid
perftest_rc=$?
if [ $mode = rnicperf-server ]; then
  wait $rnicperf_pid
  rnicperf_rc=$?
fi
perftest_pid= rnicperf_pid=
echo "===== perftest ($mode, exit $perftest_rc)" && cat "$work/perftest.out"
echo "===== rnicperf ($mode, exit $rnicperf_rc)" && cat "$work/rnicperf.out"
status=0
for side in perftest rnicperf; do
  [ "$(rows $side)" -ge 2 ] || { echo "$side: fewer than two non-zero rows" >&2; status=1; }
done
[ $perftest_running = 1 ] || { echo "perftest ended before it was stopped" >&2; status=1; }
[ "$rnicperf_rc" -eq 0 ] || { echo "rnicperf: exit $rnicperf_rc" >&2; status=1; }
if [ $mode = rnicperf-server ]; then
  grep -q '^ Client closed connection$' "$work/rnicperf.out" ||
    { echo "rnicperf did not print ' Client closed connection'" >&2; status=1; }
else
  grep -q '^ User stopped traffic$' "$work/rnicperf.out" ||
    { echo "rnicperf did not print ' User stopped traffic'" >&2; status=1; }
fi
exit $status
