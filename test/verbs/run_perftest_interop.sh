#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rnicperf against Debian's unmodified perftest, each in its own process on its own simulated
# HCA on the UDP wire: perftest through the uverbs shim, rnicperf on the driver. Either one is
# the server. Both must exit 0, the client must print its result row, and so must a server
# that prints one (write_bw prints the client's, send_bw and write_lat their own).
#
#   run_perftest_interop.sh SHIM RNICPERF PORT rnicperf-server|perftest-server TEST [ARGS...]
set -u
. "$(dirname "$0")/listening.sh"
shim=$1 rnicperf=$2 port=$3 mode=$4 test=$5
shift 5
prog=ib_$test
if ! command -v "$prog" >/dev/null; then
  echo "$prog not found (Debian package perftest)" >&2
  exit 77
fi
work=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
perftest=(env LD_PRELOAD="$shim" RNICDV_UVERBS_DEVICES=1 "$prog")
ours=(env RNICDV_SIM_WIRE=udp "$rnicperf" "$test")
case $mode in
  rnicperf-server) server=("${ours[@]}") client=("${perftest[@]}") ;;
  perftest-server) server=("${perftest[@]}") client=("${ours[@]}") ;;
  *) echo "mode: rnicperf-server or perftest-server" >&2; exit 2 ;;
esac
timeout 120 "${server[@]}" -p "$port" "$@" >"$work/server.out" 2>&1 &
server_pid=$!
wait_listening "$port" $server_pid
timeout 120 "${client[@]}" -p "$port" "$@" 127.0.0.1 >"$work/client.out" 2>&1
client_rc=$?
wait $server_pid
server_rc=$?
row='^ *[0-9]+ +[0-9]+ +[0-9.]+'
status=0
for side in server client; do
  rc_var=${side}_rc
  echo "===== $side ($mode, $test $*, exit ${!rc_var})"
  cat "$work/$side.out"
  [ "${!rc_var}" -eq 0 ] || { echo "$side: exit ${!rc_var}" >&2; status=1; }
done
grep -Eq "$row" "$work/client.out" || { echo "the client printed no result row" >&2; status=1; }
if [ "$test" != read_lat ] && ! grep -Eq "$row" "$work/server.out"; then
  echo "the server printed no result row" >&2
  status=1
fi
exit $status
