#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A program may call exit() from a signal handler at any moment, also while one of its verbs
# or rdma_cm commands is in the shim: exit-in-handler (exit_in_handler.cc) loops over one kind
# of command until its timer's handler calls exit(0), RUNS times with a random interval each.
# Every run must end by itself, with status 0, within LIMIT seconds (default 20).
#
#   run_exit_in_handler.sh SHIM EXIT_IN_HANDLER KIND RUNS PORT
#
# PORT picks the device's address (127.0.<PORT % 200 + 20>.1), apart from other tests'.
set -u
shim=$1 prog=$2 kind=$3 runs=$4 port=$5
limit=${EXIT_IN_HANDLER_LIMIT:-20}
addr=127.0.$((port % 200 + 20)).1
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
status=0
for run in $(seq 1 "$runs"); do
  seed=$(( (RANDOM << 15) | RANDOM ))
  start=$(date +%s%N)
  out=$(timeout -s KILL "$limit" env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$addr" \
          "$prog" "$kind" "$seed" "$addr" 2>&1)
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  if [ $rc -eq 0 ]; then
    echo "run $run (seed $seed): exit 0 after $ms ms"
    continue
  fi
  status=1
  if [ $rc -eq 137 ]; then
    echo "run $run (seed $seed): FAILED: still running after $limit s (killed)"
  else
    echo "run $run (seed $seed): FAILED: exit status $rc after $ms ms"
  fi
  [ -n "$out" ] && printf '%s\n' "$out"
done
exit $status
