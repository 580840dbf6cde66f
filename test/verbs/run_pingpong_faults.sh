#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one of ibverbs-utils' unmodified pingpong programs as a server and a client process,
# each on a simulated HCA through librnicdv-uverbs.so, under a fault specification
# (RNICDV_SIM_FAULTS, docs/faults.md) that makes the exchange fail, and checks how: the
# client's first failed completion is CLIENT_LINE, the server prints every SERVER_LINE, and
# both processes end, with a failure, well within the timeout (nothing hangs).
#
#   run_pingpong_faults.sh SHIM PORT SPEC CLIENT_LINE [SERVER_LINE...] -- PROGRAM [ARGS...]
#
# The lines are fixed strings, each matched against a whole line of that side's output (the
# program's messages and the shim's log, RNICDV_UVERBS_LOG=1).
set -u
. "$(dirname "$0")/pingpong_pair.sh"
shim=$1 port=$2 spec=$3 client_line=$4
shift 4
server_lines=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  server_lines+=("$1")
  shift
done
if [ $# -lt 2 ]; then
  echo "usage: $0 SHIM PORT SPEC CLIENT_LINE [SERVER_LINE...] -- PROGRAM [ARGS...]" >&2
  exit 2
fi
prog=$2
shift 2
if ! command -v "$prog" >/dev/null; then
  echo "$prog not found (Debian package ibverbs-utils)" >&2
  exit 77
fi
export RNICDV_SIM_FAULTS=$spec
pingpong_pair "$shim" "$port" 60 "$prog" "$@"
status=0
for side in server client; do
  rc_var=${side}_rc
  echo "===== $prog $* under '$spec' ($side, exit ${!rc_var})"
  cat "$work/$side.out"
  if [ "${!rc_var}" -eq 124 ] || [ "${!rc_var}" -eq 0 ]; then
    echo "$prog $side: exit ${!rc_var}: it should have failed, and ended by itself" >&2
    status=1
  fi
done
# The client's first failed completion, and only that one, is the chosen status.
first_failure=$(grep -m1 '^Failed status' "$work/client.out")
if [ "$first_failure" != "$client_line" ]; then
  echo "client: first failure '$first_failure', expected '$client_line'" >&2
  status=1
fi
for line in "${server_lines[@]}"; do
  if ! grep -qxF "$line" "$work/server.out"; then
    echo "server: no line '$line'" >&2
    status=1
  fi
done
exit $status
