#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rnicdv's own CM and the unmodified librdmacm reach each other over the UDP wire, with
# private data both ways: tools/cm-peer (rnicdv on a simulated HCA, no shim) against
# rdmacm-peer (librdmacm and libibverbs through the uverbs shim), the same protocol on both.
#
#   run_interop.sh SHIM CM_PEER RDMACM_PEER PORT rnicdv-server|rdmacm-server
set -u
shim=$1 cm_peer=$2 rdmacm_peer=$3 port=$4 mode=$5
srv=127.0.$((port % 200 + 20)).1
cli=127.0.$((port % 200 + 20)).2
work=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
case $mode in
  rnicdv-server)
    timeout 60 "$cm_peer" server --addr "$srv" --port "$port" --timeout 30 >"$work/server.out" 2>&1 &
    client=(env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$cli" "$rdmacm_peer" client --peer "$srv"
            --port "$port")
    ;;
  rdmacm-server)
    timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$srv" "$rdmacm_peer" server --addr "$srv" \
      --port "$port" >"$work/server.out" 2>&1 &
    client=("$cm_peer" client --peer "$srv" --addr "$cli" --port "$port" --timeout 30)
    ;;
  *) echo "mode: rnicdv-server or rdmacm-server" >&2; exit 2 ;;
esac
server_pid=$!
for _ in $(seq 1 400); do
  grep -q '^listening' "$work/server.out" && break
  kill -0 $server_pid 2>/dev/null || break
  sleep 0.05
done
timeout 60 "${client[@]}" >"$work/client.out" 2>&1
client_rc=$?
wait $server_pid
server_rc=$?
echo "===== server ($mode, exit $server_rc)"
cat "$work/server.out"
echo "===== client (exit $client_rc)"
cat "$work/client.out"
status=0
[ $server_rc -eq 0 ] && [ $client_rc -eq 0 ] || status=1
# Private data crossed both ways, and every message came back.
grep -q 'hello from cm-peer' "$work/server.out" || { echo "REQ private data lost" >&2; status=1; }
grep -q 'established: welcome' "$work/client.out" || { echo "REP private data lost" >&2; status=1; }
grep -q 'received 4 greetings and 16 echoes' "$work/client.out" || status=1
exit $status
