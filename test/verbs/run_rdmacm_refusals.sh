#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# How librdmacm programs learn that a connection will not happen, through the shim's rdma_cm:
# a REJ with private data from an rdma_cm server (REJECTED, reason 28, the data intact),
# and an address that no simulated HCA owns (ADDR_ERROR at once, not a REQ timing out).
#
#   run_rdmacm_refusals.sh SHIM RDMACM_PEER PORT
set -u
shim=$1 peer=$2 port=$3
srv=127.0.$((port % 200 + 20)).1
cli=127.0.$((port % 200 + 20)).2
nobody=127.0.$((port % 200 + 20)).9
work=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
status=0

timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$srv" "$peer" server --addr "$srv" --port "$port" \
  --reject 1 >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 1 400); do
  grep -q '^listening' "$work/server.out" && break
  sleep 0.05
done
timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$cli" "$peer" client --peer "$srv" \
  --port "$port" >"$work/client.out" 2>&1
rc=$?
wait $server_pid
server_rc=$?
echo "===== rejected (client exit $rc, server exit $server_rc)"
cat "$work/server.out" "$work/client.out"
[ $rc -eq 3 ] && [ $server_rc -eq 0 ] || status=1
grep -q "rejected: reason 28, private data 'go away'" "$work/client.out" || status=1

timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$cli" "$peer" client --peer "$nobody" \
  --port "$port" >"$work/nobody.out" 2>&1
rc=$?
echo "===== nobody at $nobody (client exit $rc)"
cat "$work/nobody.out"
[ $rc -eq 4 ] || status=1
grep -q "address error: status -113" "$work/nobody.out" || status=1
exit $status
