#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs tools/examples/storage.cc as an initiator and a target process, each on its own
# simulated HCA on the UDP wire, and checks what each reports.
#
#   run_storage.sh EXAMPLE PORT [--connections N] [--commands N] [--depth N] [--block B]
#                  [--faults SPEC] [--expect-fault ROLE:REGEX]... [--test-bad-rkey K]
#                  [--expect-failed-command]
#   run_storage.sh EXAMPLE PORT --no-target [--wait-ms N]
#
# --faults SPEC: both processes run under RNICDV_SIM_FAULTS=SPEC, each logging its faults to
#   its own file (the spec plus "log=...").
# --expect-fault ROLE:REGEX: the fault log of ROLE (initiator or target) has a line matching
#   the extended REGEX (so that the faults the run is about were injected).
# --test-bad-rkey K: the initiator's K-th WRITE command advertises a wrong rkey (a genuine
#   remote access error on the target's RDMA READ); implies --expect-failed-command, and the
#   failed command must be that one.
# --expect-failed-command: exactly one command fails, with a remote access error on its RDMA
#   READ; the initiator reports it, the target dials that connection again, the initiator
#   re-sends the unanswered commands on it, and every command is still answered exactly once.
# Without either, no connection may fail.
# --no-target: only the initiator runs; it must give up (exit 1) once --wait-ms has passed
#   without a connection, naming the first connection and its unanswered commands.
set -u
exe=$1 port=$2
shift 2
conns=4 cmds=64 block=4096 common=() initiator_only=() faults= bad_rkey= expect_failure=0
expect_faults=() no_target=0
while [ $# -gt 0 ]; do
  case $1 in
    --connections) conns=$2; common+=("$1" "$2") ;;
    --block) block=$2; common+=("$1" "$2") ;;
    --commands) cmds=$2; initiator_only+=("$1" "$2") ;;
    --faults) faults=$2 ;;
    --expect-fault) expect_faults+=("$2") ;;
    --test-bad-rkey) bad_rkey=$2; expect_failure=1; initiator_only+=("$1" "$2") ;;
    --expect-failed-command) expect_failure=1; shift; continue ;;
    --no-target) no_target=1; shift; continue ;;
    *) initiator_only+=("$1" "$2") ;;
  esac
  shift 2
done
ini=127.0.$((port % 200 + 20)).1
tgt=127.0.$((port % 200 + 20)).2
work=$(mktemp -d)
trap 'kill $ini_pid 2>/dev/null; rm -rf "$work"' EXIT
unset RNICDV_SIM_FAULTS
spec() { [ -n "$faults" ] && echo "$faults; log=$work/$1.faults.jsonl"; }
RNICDV_SIM_FAULTS=$(spec initiator) timeout 50 "$exe" initiator --addr "$ini" --port "$port" "${common[@]}" "${initiator_only[@]}" \
  --idle-ms 300 >"$work/initiator.out" 2>&1 &
ini_pid=$!
if [ $no_target -eq 1 ]; then
  wait $ini_pid
  ini_rc=$?
  echo "===== initiator alone (exit $ini_rc)"
  cat "$work/initiator.out"
  [ $ini_rc -eq 1 ] || { echo "FAIL: the initiator exited with $ini_rc, not 1" >&2; exit 1; }
  grep -q "^examples-storage: connection 0: no connection from the target for [0-9]* ms (from the start), $((cmds * 2)) of its commands unanswered: giving up" "$work/initiator.out" ||
    { echo "FAIL: the initiator did not say why it gave up" >&2; exit 1; }
  exit 0
fi
for _ in $(seq 1 200); do
  grep -q '^initiator: listening' "$work/initiator.out" && break
  kill -0 $ini_pid 2>/dev/null || break
  sleep 0.05
done
RNICDV_SIM_FAULTS=$(spec target) timeout 50 "$exe" target --addr "$tgt" --peer "$ini" --port "$port" "${common[@]}" \
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
fail() { echo "FAIL: $*" >&2; status=1; }
[ $ini_rc -eq 0 ] || fail "the initiator exited with $ini_rc"
[ $tgt_rc -eq 0 ] || fail "the target exited with $tgt_rc"
grep -q "^initiator: $conns connections, $total commands ([1-9][0-9]* posted before establishment), $total answered exactly once, 0 more than once, 0 never, 0 data mismatches, 0 stray responses, $expect_failure reconnections" "$work/initiator.out" ||
  fail "the initiator's summary is missing or wrong"
summary=$(grep "^target: $conns connections, [0-9]* commands served ([0-9]* writes by RDMA READ, [0-9]* reads by RDMA WRITE) from one SRQ of [0-9]* receives; $expect_failure connection failures, [0-9]* commands executed again after a reconnection" "$work/target.out")
if [ -z "$summary" ]; then
  fail "the target's summary is missing or wrong"
else
  served=$(sed -E 's/.* ([0-9]+) commands served.*/\1/' <<<"$summary")
  again=$(sed -E 's/.* ([0-9]+) commands executed again.*/\1/' <<<"$summary")
  # Each command is executed once, and again for each time a lost connection left it
  # unanswered; the failed command itself got no response from its first execution.
  [ $((served - again)) -eq $total ] ||
    fail "the target served $served commands, $again of them again: not $total distinct"
  if [ $expect_failure -eq 0 ]; then
    grep -q "^target: $conns connections, $total commands served ($((total / 2)) writes by RDMA READ, $((total / 2)) reads by RDMA WRITE)" "$work/target.out" ||
      fail "the target's counts differ from a run without faults"
  fi
fi
for role in initiator target; do
  [ -f "$work/$role.faults.jsonl" ] &&
    echo "===== $role: $(grep -c '"kind":' "$work/$role.faults.jsonl") fault log lines, e.g.:" &&
    grep -v '"kind":"start"' "$work/$role.faults.jsonl" | head -3
done
for e in "${expect_faults[@]}"; do
  role=${e%%:*} regex=${e#*:}
  grep -Eq "$regex" "$work/$role.faults.jsonl" 2>/dev/null ||
    fail "the $role's fault log has no line matching $regex"
done
grep -q "^initiator: idle .* ms of CPU" "$work/initiator.out" || fail "no idle measurement"
failed_lines=$(grep -c "^initiator: connection [0-9]*: command [0-9]* failed" "$work/initiator.out")
if [ $expect_failure -eq 0 ]; then
  [ "$failed_lines" -eq 0 ] || fail "a command failed"
  if grep -q "lost\|reconnected\|dialling" "$work/initiator.out" "$work/target.out"; then
    fail "a connection was lost"
  fi
else
  line=$(grep "^initiator: connection [0-9]*: command [0-9]* failed" "$work/initiator.out")
  [ "$failed_lines" -eq 1 ] || fail "expected one failed command, the initiator reported $failed_lines"
  c=$(sed -E 's/^initiator: connection ([0-9]+): .*/\1/' <<<"$line")
  id=$(sed -E 's/^initiator: connection [0-9]+: command ([0-9]+) .*/\1/' <<<"$line")
  grep -qx "initiator: connection $c: command $id failed: the target's RDMA READ of its data completed with IBV_WC_REM_ACCESS_ERR (remote access error)" "$work/initiator.out" ||
    fail "the failure line does not name the remote access error of the command's RDMA READ"
  if [ -n "$bad_rkey" ]; then
    grep -qx "initiator: test fault: command $id on connection $c advertises a wrong rkey" "$work/initiator.out" ||
      fail "the failed command is not the one with the wrong rkey"
  fi
  grep -q "^target: connection $c: command $id: the RDMA READ of the initiator's buffer completed with IBV_WC_REM_ACCESS_ERR" "$work/target.out" ||
    fail "the target did not report the failed READ"
  grep -q "^target: connection $c: dialling the initiator again (connection 2 of this index)" "$work/target.out" ||
    fail "the target did not dial connection $c again"
  grep -q "^initiator: connection $c: reconnected (connection 2 of this index), [1-9][0-9]* unanswered commands sent again" "$work/initiator.out" ||
    fail "the initiator did not re-send on a new connection $c"
fi
exit $status
