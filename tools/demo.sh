#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The rnicperf demo: a server and a client as two processes, each on its own simulated HCA
# (its own 127.0.0.x) over the UDP wire, exactly as perftest's tools are run on two hosts:
#   1. RDMA write latency        (rnicperf write_lat)
#   2. RDMA write bandwidth      (rnicperf write_bw)
#   3. what early posting buys: the first reply on a fresh connection, 200 connections for
#      each way the server can reply (posted at once and withheld until RTS, or kept in the
#      server's own queue until it reads ESTABLISHED), with the RTU delivered and lost;
#      once with a server that reads CM events on every pass of its loop, once with one that
#      reads them every millisecond (rnicperf send_lat --loopback --first-reply=200)
# Usage: tools/demo.sh <builddir>. Fails (non-zero) if any run fails; every process it
# starts is bounded by a timeout and killed on any exit.
set -euo pipefail

builddir=${1:?usage: tools/demo.sh <builddir>}
bin="$builddir/tools/rnicperf/rnicperf"
[ -x "$bin" ] || { echo "demo: $bin is missing (build first)" >&2; exit 1; }

export RNICDV_SIM_WIRE=udp
tmp=$(mktemp -d /tmp/rnicperf-demo.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

port=18515
# Server and client on cores of their own when there are two (docs/performance.md, "Threads
# that share the machine"): each process's device thread then shares its own process's core.
pin_server=() pin_client=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  pin_server=(taskset -c 0) pin_client=(taskset -c 1)
fi
# run NAME ARGS...: server and client with the same ARGS; prints the client's report and
# the server's result rows.
run() {
  local name=$1; shift
  local srv_out="$tmp/$name.server" cli_out="$tmp/$name.client" srv_pid rc tries=0
  while :; do
    timeout 45 "${pin_server[@]}" "$bin" "$@" -p "$port" --timeout=20 >"$srv_out" 2>&1 &
    srv_pid=$!
    pids+=("$srv_pid")
    # Wait for the server to listen (or to fail, e.g. when the port is taken).
    local waited=0
    until grep -q 'Waiting for client' "$srv_out" 2>/dev/null; do
      if ! kill -0 "$srv_pid" 2>/dev/null; then break; fi
      sleep 0.05
      waited=$((waited + 1))
      [ "$waited" -lt 200 ] || die "$name: the server did not start: $(cat "$srv_out")"
    done
    if grep -q 'Waiting for client' "$srv_out"; then break; fi
    wait "$srv_pid" || true
    if grep -q 'Address already in use' "$srv_out" && [ "$tries" -lt 20 ]; then
      port=$((port + 1)); tries=$((tries + 1)); continue
    fi
    die "$name: the server failed: $(cat "$srv_out")"
  done
  rc=0
  timeout 45 "${pin_client[@]}" "$bin" "$@" -p "$port" --timeout=20 127.0.0.1 >"$cli_out" 2>&1 || rc=$?
  local src=0
  wait "$srv_pid" || src=$?
  cat "$cli_out"
  if [ "$rc" -ne 0 ] || [ "$src" -ne 0 ]; then
    echo "--- server output:"; cat "$srv_out"
    die "$name failed (client exit $rc, server exit $src)"
  fi
  echo " server's view:"
  sed -n '/^ #bytes/,$p' "$srv_out"
  port=$((port + 1))
}

start=$(date +%s)
say "RDMA write latency: two processes, two simulated HCAs, RoCEv2 over UDP loopback"
run write_lat write_lat -n 2000
say "RDMA write bandwidth: 64 KiB messages, 128 in flight"
run write_bw write_bw -n 2000
say "Early posting: the first reply on a fresh connection (client connect() to the reply)"
first_reply() {
  timeout 120 "$bin" send_lat --loopback --first-reply=200 -p "$port" --timeout=20 "$@" \
    2>"$tmp/first_reply.err" || { cat "$tmp/first_reply.err"; die "first reply failed"; }
  port=$((port + 1))
}
echo " A server that reads its CM events on every pass of its loop:"
first_reply --cm-poll-us=0
echo " A server that reads them every millisecond (an acceptor poller's period):"
first_reply --cm-poll-us=1000
cat <<'EOF'
 Where the time goes. "early post" replies at once: the driver withholds the reply while the
 QP is in RTR and rings when the QP reaches RTS, which happens on the thread that receives the
 RTU, without the server having read ESTABLISHED ("before the event" counts those replies).
 "own queue" keeps the reply until the server reads ESTABLISHED, so it waits for the server's
 next look at its CM events: about nothing when it looks on every pass (the two rows then
 match within noise), up to the whole period when it looks every millisecond. With the RTU
 lost, the client's first request raises COMM_EST in the server's device, which moves the QP
 to RTS and rings on its own thread, as the RTU does: early posting saves the same wait.
EOF
say "demo finished in $(( $(date +%s) - start )) s"
