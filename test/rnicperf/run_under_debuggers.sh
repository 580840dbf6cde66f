#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A program on the simulated HCA runs under a debugger and under valgrind as it runs alone:
# the device takes over no signal (it used to fault on purpose, and gdb stopped the program
# with SIGSEGV/SIGTRAP), so neither tool needs a setting. A ping-pong of rnicperf over two
# threaded devices in one process, under `gdb -batch -ex run` and `valgrind --tool=none`;
# each must print its result row and exit 0. valgrind runs one thread at a time, and by
# default lets a spinning one keep the CPU for long stretches: its run is 20 round trips with
# a 1 s ACK timeout (-u 18), so that the starved device threads' retransmission timers do not
# give up (`--fair-sched=yes` makes it as fast as gdb's).
#
#   run_under_debuggers.sh RNICPERF
set -u
rnicperf=$1
run=("$rnicperf" write_lat --loopback -n 200)
run_vg=("$rnicperf" write_lat --loopback -n 20 -u 18)
status=0
check() {
  local name=$1 out=$2 rc=$3 iters=$4
  echo "===== $name (exit $rc)"
  cat "$out"
  if [ "$rc" -ne 0 ] || ! grep -Eq "^ *2 +$iters +[0-9.]+" "$out"; then
    echo "$name: no result row, or exit $rc" >&2
    status=1
  fi
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if command -v gdb >/dev/null; then
  # gdb's own exit status is that of its last command; the program's is in its output.
  timeout 300 gdb -q -batch -ex run -ex 'info program' --args "${run[@]}" >"$work/gdb.out" 2>&1
  rc=$?
  if grep -Eq 'received signal|terminated with signal|exited with code [0-9]*[1-9]' "$work/gdb.out"; then rc=1; fi
  check "under gdb" "$work/gdb.out" $rc 200
else
  echo "gdb not found: skipped"
fi
if command -v valgrind >/dev/null; then
  timeout 600 valgrind -q --tool=none --error-exitcode=9 "${run_vg[@]}" >"$work/vg.out" 2>&1
  check "under valgrind --tool=none" "$work/vg.out" $? 20
else
  echo "valgrind not found: skipped"
fi
exit $status
