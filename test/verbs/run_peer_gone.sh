#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The survivor of an rdma_cm connection learns within seconds that the process at the other
# end is gone (peer_gone.cc), whichever way it went:
#
#   exit                  the client calls exit() with the connection established (its DREQ)
#   exit-on-dreq          the server disconnects; the client exits on the DREQ without a word
#   exit-in-handler       the client's timer handler calls exit() in the middle of its verbs
#                         commands (its DREQ still goes out)
#   exit-in-get-event     the client's timer handler calls exit() while it waits in
#                         rdma_get_cm_event (a wait that holds no lock: its DREQ goes out)
#   exit-in-ucma          the client's timer handler calls exit() in the middle of its rdma_cm
#                         commands (the CM sends the DREQ without the rdma_cm ID table)
#   exit-in-two-threads   two of the client's threads call exit() at once (the second must not
#                         end the process before the first one's teardown has sent the DREQ)
#   kill-while-sending    the client is killed (SIGKILL) while the server sends to it
#   kill-then-disconnect  the client is killed; then the server disconnects (its DREQ)
#
# The server's DISCONNECTED must come less than 5 s after the event (the exit, the kill, or
# the server's own disconnect): a peer that answers nothing would keep it waiting for the
# DREQ's 16 tries, about 34 s.
#
#   run_peer_gone.sh SHIM PEER_GONE PORT CASE
set -u
shim=$1 prog=$2 port=$3 case=$4
srv=127.0.$((port % 200 + 20)).1
cli=127.0.$((port % 200 + 20)).2
work=$(mktemp -d)
server_pid= client_pid=
trap 'kill -9 $server_pid $client_pid 2>/dev/null; rm -rf "$work"' EXIT
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
case $case in
  exit) then=idle end=exit ;;
  exit-on-dreq) then=disconnect end=exit-on-dreq ;;
  exit-in-handler) then=idle end=exit-in-handler ;;
  exit-in-get-event) then=idle end=exit-in-get-event ;;
  exit-in-ucma) then=idle end=exit-in-ucma ;;
  exit-in-two-threads) then=idle end=exit-in-two-threads ;;
  kill-while-sending) then=send end=wait ;;
  kill-then-disconnect) then=disconnect-on-usr1 end=wait ;;
  *) echo "unknown case $case" >&2; exit 2 ;;
esac
stamp() { sed -n "s/^$1 at \([0-9]*\)$/\1/p" "$2" | head -1; }
waitfor() {  # PATTERN FILE SECONDS
  for _ in $(seq 1 $(($3 * 20))); do grep -q "$1" "$2" && return 0; sleep 0.05; done
  return 1
}

# No timeout(1) between the script and the programs: the signals go to the programs
# themselves (the server gives up by itself after 60 s; the trap ends the client).
env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$srv" "$prog" server --addr "$srv" \
  --port "$port" --then "$then" >"$work/server.out" 2>&1 &
server_pid=$!
waitfor '^listening' "$work/server.out" 30 || { echo "server did not listen"; cat "$work/server.out"; exit 1; }
for attempt in $(seq 1 50); do
  env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$cli" "$prog" client --peer "$srv" \
    --port "$port" --end "$end" >"$work/client.out" 2>&1 &
  client_pid=$!
  waitfor '^established\|^not yet' "$work/client.out" 30
  grep -q '^established' "$work/client.out" && break
  wait $client_pid
  sleep 0.1
done
waitfor '^established' "$work/server.out" 30 || { echo "not connected"; cat "$work/server.out" "$work/client.out"; exit 1; }

case $case in
  kill-while-sending)
    sleep 0.3
    start=$(date +%s%N)
    kill -9 $client_pid
    what="the client's SIGKILL" ;;
  kill-then-disconnect)
    sleep 0.3
    kill -9 $client_pid
    wait $client_pid 2>/dev/null
    sleep 0.3
    kill -USR1 $server_pid
    waitfor '^disconnect at' "$work/server.out" 10
    start=$(stamp disconnect "$work/server.out")
    what="the server's rdma_disconnect (the client was killed before)" ;;
  exit)
    waitfor '^exiting at' "$work/client.out" 10
    start=$(stamp exiting "$work/client.out")
    what="the client's exit()" ;;
  exit-in-two-threads)
    waitfor '^exiting at' "$work/client.out" 10
    start=$(stamp exiting "$work/client.out")
    what="the client's two exit() calls" ;;
  exit-in-handler|exit-in-ucma)
    # The handler runs 1 to 40 ms after the client's ESTABLISHED; that is the start here.
    start=$(stamp established "$work/client.out")
    what="the client's ESTABLISHED (its handler's exit() 1-40 ms later)" ;;
  exit-in-get-event)
    start=$(stamp established "$work/client.out")
    what="the client's ESTABLISHED (its handler's exit() 100 ms later)" ;;
  exit-on-dreq)
    waitfor '^disconnect at' "$work/server.out" 10
    start=$(stamp disconnect "$work/server.out")
    what="the server's rdma_disconnect (the client exits on its DREQ)" ;;
esac
wait $server_pid
server_rc=$?
server_pid=
# A client that exits must end by itself (a hung exit is a failure too); a killed one is gone.
client_hung=0
for _ in $(seq 1 200); do kill -0 $client_pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $client_pid 2>/dev/null; then
  client_hung=1
  kill -9 $client_pid
fi
wait $client_pid 2>/dev/null
client_pid=
echo "===== server (exit $server_rc)"
cat "$work/server.out"
echo "===== client (attempt $attempt)"
cat "$work/client.out"
if [ $client_hung -eq 1 ]; then
  echo "FAILED: the client was still running 20 s after the server ended (killed)"
  exit 1
fi
end_ns=$(stamp disconnected "$work/server.out")
if [ $server_rc -ne 0 ] || [ -z "$end_ns" ] || [ -z "${start:-}" ]; then
  echo "FAILED: the server saw no DISCONNECTED"
  exit 1
fi
ms=$(( (end_ns - start) / 1000000 ))
echo "DISCONNECTED $ms ms after $what"
if [ $ms -ge 5000 ]; then
  echo "FAILED: 5000 ms or more"
  exit 1
fi
exit 0
