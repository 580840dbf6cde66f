#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one of Debian's unmodified librdmacm programs (rdmacm-utils, perftest -R) as a server
# and a client process, each on its own simulated HCA (its own address on the UDP wire),
# connected through /dev/infiniband/rdma_cm of librnicdv-uverbs.so. Both must exit 0 and the
# client's output must show the work done (PATTERN, an extended regular expression).
#
#   run_rdmacm.sh SHIM PORT PATTERN -- SERVER_CMD... -- CLIENT_CMD...
#
# In the commands, @S@ stands for the server's address and @P@ for the port. RDMACM_TIMEOUT
# (seconds, default 120) bounds each program's run. A server has no way to say that it listens,
# so a client that found no HCA at the address yet (ADDR_ERROR) is started again, up to 100
# times. A client refused by the CM (a REJ, or its crash after one) may have met a server that
# is already serving it: perftest -R connects twice, once to exchange its parameters and once
# for the test, and a loaded server can be late to listen for the second. Such a server is
# spent (it serves one client, and holds the dead client's connection), so it is started again
# too, up to 10 times.
set -u
shim=$1 port=$2 pattern=$3
shift 3
[ "$1" = -- ] && shift
server=() client=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do server+=("$1"); shift; done
shift
client=("$@")
for prog in "${server[0]}" "${client[0]}"; do
  if ! command -v "$prog" >/dev/null; then
    echo "$prog not found (Debian packages rdmacm-utils and perftest)" >&2
    exit 77
  fi
done
# One address pair per port, so that tests that overlap (or a stale process) do not collide.
# RDMACM_SERVER_ADDR and RDMACM_CLIENT_ADDR choose others (run_rdmacm_ipv6.sh's IPv6 pair).
srv_addr=${RDMACM_SERVER_ADDR:-127.0.$((port % 200 + 20)).1}
cli_addr=${RDMACM_CLIENT_ADDR:-127.0.$((port % 200 + 20)).2}
subst() { local a; for a in "$@"; do a=${a//@S@/$srv_addr}; printf '%s\n' "${a//@P@/$port}"; done; }
mapfile -t server < <(subst "${server[@]}")
mapfile -t client < <(subst "${client[@]}")

work=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
# Only the programs get the shim: under a sanitizer it is instrumented, and the shell's own
# tools (timeout, grep) are not.
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
limit=${RDMACM_TIMEOUT:-120}

start_server() {
  timeout "$limit" env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$srv_addr" "${server[@]}" \
    >"$work/server.out" 2>&1 &
  server_pid=$!
}
start_server
client_rc=1 restarts=0 stopped=
for attempt in $(seq 1 100); do
  timeout "$limit" env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$cli_addr" "${client[@]}" >"$work/client.out" 2>&1
  client_rc=$?
  [ $client_rc -eq 0 ] && break
  kill -0 $server_pid 2>/dev/null || break
  # Refused because the server's device has no address yet (ADDR_ERROR, event 1,
  # EHOSTUNREACH), as each program prints it: the server is untouched.
  if grep -Eqi 'ADDR_ERROR|No route to host' "$work/client.out"; then
    sleep 0.1
    continue
  fi
  # Refused by the CM: REJECTED (event 8; the REJ's reason 8 while nothing listens, or 10 for
  # a stale connection), or rdma_connect's ECONNREFUSED. perftest prints "Event:
  # RDMA_CM_EVENT_REJECTED; error: 8." on one path and "Unexpected CM event ... 8" on another
  # (and may crash in its clean-up after either). riostream connects without blocking and,
  # refused, says only "rpoll: " and a stale errno: that counts when no test has run yet.
  if { grep -Eqi 'REJECTED|Connection refused|Unexpected CM event.* [18]$' "$work/client.out" ||
       { grep -Eq '^rpoll: ' "$work/client.out" &&
         ! grep -Eq '^[0-9]+[kmg]?_(lat|bw) ' "$work/client.out"; }; } &&
     [ $restarts -lt 10 ]; then
    restarts=$((restarts + 1))
    # The program itself is timeout's child; killed, it runs no exit handlers (a fault log
    # without its end line, say): its PID is reported for the callers that check such things.
    stopped="$stopped $(cat /proc/$server_pid/task/$server_pid/children 2>/dev/null)"
    kill $server_pid 2>/dev/null
    wait $server_pid 2>/dev/null
    start_server
    sleep 0.1
    continue
  fi
  break
done
wait $server_pid
server_rc=$?

status=0
[ $server_rc -eq 0 ] || { echo "${server[0]} server: exit $server_rc" >&2; status=1; }
[ $client_rc -eq 0 ] || { echo "${client[0]} client: exit $client_rc" >&2; status=1; }
if ! grep -Eq -- "$pattern" "$work/client.out"; then
  echo "${client[0]} client: no line matches '$pattern'" >&2
  status=1
fi
echo "===== server: ${server[*]} (exit $server_rc)"
cat "$work/server.out"
echo "===== client: ${client[*]} (exit $client_rc, attempt $attempt, server started $((restarts + 1)) times)"
[ -n "${stopped// /}" ] && echo "===== servers killed to start again: pids$stopped"
cat "$work/client.out"
exit $status
