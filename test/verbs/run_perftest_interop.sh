#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rnicperf against Debian's unmodified perftest, each in its own process on its own simulated
# HCA on the UDP wire: perftest through the uverbs shim, rnicperf on the driver. Either one is
# the server. Both must exit 0, the client must print its result row, and so must a server
# that prints one (write_bw, read_bw and atomic_bw print the client's, send_bw and the
# write and send latency tests their own; the read_lat and atomic_lat servers only answer).
#
#   run_perftest_interop.sh SHIM RNICPERF PORT rnicperf-server|perftest-server TEST [ARGS...]
#
# With QOS_TCLASS=<tos> (the ARGS give both sides the same --tclass), each side also writes a
# pcap, and tshark must find that TOS byte and perftest's GRH hop limit, 255, in the IP header
# of every RoCE frame of the test's QPs in both (the CM's MADs, on QP1, carry neither).
#
# With EXPECT_CLIENT=<regex>, the client's output (stdout and stderr) must also match it.
#
# With RDMA_CM=1 (the ARGS hold -z, or -R -z) the exchange runs over rdma_cm: each side's HCA
# has an address of the port's own, the client names the server's, and both must print
# "Data ex. method : rdma_cm". Nothing listens on TCP then: a client waits for the rnicperf
# server's banner (printed once it listens), and an rnicperf client retries a perftest server
# that does not listen yet.
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
qos=${QOS_TCLASS:-}
if [ -n "$qos" ] && ! command -v tshark >/dev/null; then
  echo "tshark not found (Debian package tshark)" >&2
  exit 77
fi
perftest=(env LD_PRELOAD="$shim" RNICDV_UVERBS_DEVICES=1 "$prog")
ours=(env RNICDV_SIM_WIRE=udp "$rnicperf" "$test")
case $mode in
  rnicperf-server) server=("${ours[@]}") client=("${perftest[@]}") ;;
  perftest-server) server=("${perftest[@]}") client=("${ours[@]}") ;;
  *) echo "mode: rnicperf-server or perftest-server" >&2; exit 2 ;;
esac
pcap() { [ -n "$qos" ] && echo "RNICDV_PCAP=$work/$1.pcap" || echo "RNICDV_PCAP="; }
rdma_cm=${RDMA_CM:-}
srv_addr=127.0.0.1 srv_env=() cli_env=() client_extra=()
if [ -n "$rdma_cm" ]; then
  srv_addr=127.0.$((port % 200 + 20)).1
  srv_env=("RNICDV_SIM_ADDR=$srv_addr") cli_env=("RNICDV_SIM_ADDR=127.0.$((port % 200 + 20)).2")
  [ "$mode" = perftest-server ] && client_extra=(--retry-connect)
fi
timeout 120 env "$(pcap server)" "${srv_env[@]}" "${server[@]}" -p "$port" "$@" >"$work/server.out" 2>&1 &
server_pid=$!
if [ -n "$rdma_cm" ] && [ "$mode" = rnicperf-server ]; then
  for _ in $(seq 1 200); do
    grep -q 'Waiting for client to connect' "$work/server.out" && break
    kill -0 $server_pid 2>/dev/null || break
    sleep 0.05
  done
elif [ -z "$rdma_cm" ]; then
  wait_listening "$port" $server_pid
fi
timeout 120 env "$(pcap client)" "${cli_env[@]}" "${client[@]}" -p "$port" "$@" "${client_extra[@]}" \
  "$srv_addr" >"$work/client.out" 2>&1
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
if [ -n "${EXPECT_CLIENT:-}" ] && ! grep -Eq "$EXPECT_CLIENT" "$work/client.out"; then
  echo "the client's output does not match: $EXPECT_CLIENT" >&2
  status=1
fi
if [ -n "$rdma_cm" ]; then
  for side in server client; do
    grep -q 'Data ex. method : rdma_cm' "$work/$side.out" ||
      { echo "$side: no 'Data ex. method : rdma_cm' in its header" >&2; status=1; }
  done
fi
if [ "$test" != read_lat ] && [ "$test" != atomic_lat ] && ! grep -Eq "$row" "$work/server.out"; then
  echo "the server printed no result row" >&2
  status=1
fi
if [ -n "$qos" ]; then
  for side in server client; do
    # One line per frame: TOS, TTL, destination QP. Frames to QP1 are the CM's.
    tshark -r "$work/$side.pcap" -Y 'infiniband.bth.destqp != 1' \
      -T fields -e ip.dsfield -e ip.ttl >"$work/$side.qos" 2>"$work/$side.tshark" || {
      echo "$side: tshark cannot read the pcap" >&2; cat "$work/$side.tshark"; status=1; }
    frames=$(wc -l <"$work/$side.qos")
    wrong=$(awk -v tos="$qos" '$1 != tos || $2 != 255' "$work/$side.qos" | sort | uniq -c)
    echo "===== $side pcap: $frames RoCE frames of the test's QPs"
    [ "$frames" -gt 0 ] || { echo "$side: no RoCE frame in its pcap" >&2; status=1; }
    [ -z "$wrong" ] || { echo "$side: frames without TOS $qos and TTL 255:" >&2; echo "$wrong" >&2; status=1; }
  done
fi
exit $status
