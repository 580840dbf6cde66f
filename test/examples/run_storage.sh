#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs tools/examples/storage.cc as an initiator and a target process, each on its own
# simulated HCA on the UDP wire, and checks what each reports.
#
#   run_storage.sh EXAMPLE PORT [--connections N] [--commands N] [--depth N] [--block B]
set -u
exe=$1 port=$2
shift 2
conns=4 cmds=64 block=4096 common=() initiator_only=()
while [ $# -gt 0 ]; do
  case $1 in
    --connections) conns=$2; common+=("$1" "$2") ;;
    --block) block=$2; common+=("$1" "$2") ;;
    --commands) cmds=$2; initiator_only+=("$1" "$2") ;;
    *) initiator_only+=("$1" "$2") ;;
  esac
  shift 2
done
ini=127.0.$((port % 200 + 20)).1
tgt=127.0.$((port % 200 + 20)).2
work=$(mktemp -d)
trap 'kill $ini_pid 2>/dev/null; rm -rf "$work"' EXIT
timeout 90 "$exe" initiator --addr "$ini" --port "$port" "${common[@]}" "${initiator_only[@]}" \
  --idle-ms 300 >"$work/initiator.out" 2>&1 &
ini_pid=$!
for _ in $(seq 1 200); do
  grep -q '^initiator: listening' "$work/initiator.out" && break
  kill -0 $ini_pid 2>/dev/null || break
  sleep 0.05
done
timeout 90 "$exe" target --addr "$tgt" --peer "$ini" --port "$port" "${common[@]}" \
  >"$work/target.out" 2>&1
tgt_rc=$?
wait $ini_pid
ini_rc=$?
echo "===== initiator (exit $ini_rc)"
cat "$work/initiator.out"
echo "===== target (exit $tgt_rc)"
cat "$work/target.out"
total=$((conns * cmds * 2))
status=0
[ $ini_rc -eq 0 ] && [ $tgt_rc -eq 0 ] || status=1
grep -q "^initiator: $conns connections, $total commands ([1-9][0-9]* posted before establishment), $total answered exactly once, 0 data mismatches" "$work/initiator.out" ||
  { echo "the initiator's summary is missing or wrong" >&2; status=1; }
grep -q "^target: $conns connections, $total commands served ($((total / 2)) writes by RDMA READ, $((total / 2)) reads by RDMA WRITE) from one SRQ" "$work/target.out" ||
  { echo "the target's summary is missing or wrong" >&2; status=1; }
grep -q "^initiator: idle .* ms of CPU" "$work/initiator.out" ||
  { echo "no idle measurement" >&2; status=1; }
exit $status
