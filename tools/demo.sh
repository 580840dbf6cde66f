#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The rnicperf demo: a server and a client as two processes, each on its own simulated HCA
# (its own 127.0.0.x) over the UDP wire, exactly as perftest's tools are run on two hosts:
#   1. RDMA write latency        (rnicperf write_lat)
#   2. RDMA write bandwidth      (rnicperf write_bw)
#   3. early posting: 32 writes posted while the client's QP is in RTR, timed from the
#      move to RTS, beside the same 32 posted after it (rnicperf write_lat --early-post=32)
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
# run NAME ARGS...: server and client with the same ARGS; prints the client's report and
# the server's result rows.
run() {
  local name=$1; shift
  local srv_out="$tmp/$name.server" cli_out="$tmp/$name.client" srv_pid rc tries=0
  while :; do
    timeout 45 "$bin" "$@" -p "$port" --timeout=20 >"$srv_out" 2>&1 &
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
  timeout 45 "$bin" "$@" -p "$port" --timeout=20 127.0.0.1 >"$cli_out" 2>&1 || rc=$?
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
say "Early posting: 32 writes posted in RTR, released by the move to RTS"
run early_post write_lat -n 500 --early-post=32
say "demo finished in $(( $(date +%s) - start )) s"
