#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A passive rdma_cm QP takes the path the REQ carries, as the kernel's CM gives it: the client
# sets its ID's type of service (RDMA_OPTION_ID_TOS 184, DSCP 46), and the server, which set
# none, finds that class in its QP's RTR address vector (rdma_init_qp_attr); both run the
# exchange to the end. Two librdmacm processes through the shim on the UDP wire.
#
#   run_rdmacm_tos.sh SHIM RDMACM_PEER PORT
set -u
shim=$1 peer=$2 port=$3
srv=127.0.$((port % 200 + 20)).1
cli=127.0.$((port % 200 + 20)).2
work=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$srv" "$peer" server --addr "$srv" \
  --port "$port" >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 1 400); do
  grep -q '^listening' "$work/server.out" && break
  kill -0 $server_pid 2>/dev/null || break
  sleep 0.05
done
timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$cli" "$peer" client --peer "$srv" \
  --port "$port" --tos 184 >"$work/client.out" 2>&1
client_rc=$?
wait $server_pid
server_rc=$?
echo "===== server (exit $server_rc)"
cat "$work/server.out"
echo "===== client (exit $client_rc)"
cat "$work/client.out"
status=0
[ $server_rc -eq 0 ] && [ $client_rc -eq 0 ] || status=1
grep -q '^path traffic class 184$' "$work/server.out" ||
  { echo "the server's QP did not take the REQ's traffic class" >&2; status=1; }
grep -q '^route traffic class 184$' "$work/server.out" ||
  { echo "the passive ID's route does not carry the REQ's traffic class" >&2; status=1; }
exit $status
