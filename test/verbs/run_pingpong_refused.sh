#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one of ibverbs-utils' unmodified pingpong programs as a server and a client process on
# simulated HCAs with arguments the model refuses (a RoCE v1 GID index, say), and checks that
# both fail cleanly: a non-zero exit well within the time limit, no signal, and the shim's
# line naming the reason (PATTERN, an extended regular expression) from the side that reached
# the refused call (ibv_rc_pingpong's server moves its QP to RTR first; its client then
# finds the exchange closed).
#
#   run_pingpong_refused.sh SHIM PORT PATTERN PROGRAM [ARGS...]
set -u
. "$(dirname "$0")/pingpong_pair.sh"
shim=$1 port=$2 pattern=$3 prog=$4
shift 4
if ! command -v "$prog" >/dev/null; then
  echo "$prog not found (Debian package ibverbs-utils)" >&2
  exit 77
fi
pingpong_pair "$shim" "$port" 60 "$prog" "$@"
status=0 named=0
for side in server client; do
  rc_var=${side}_rc
  rc=${!rc_var}
  echo "===== $prog $* ($side, exit $rc)"
  cat "$work/$side.out"
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || { [ "$rc" -gt 128 ] && [ "$rc" -le 192 ]; }; then
    echo "$prog $side: exit $rc: it should have been refused, and ended by itself" >&2
    status=1
  fi
  grep -Eq -- "^rnicdv-uverbs: .*$pattern" "$work/$side.out" && named=1
done
if [ $named -eq 0 ]; then
  echo "$prog: no line from the shim matching '$pattern' on either side" >&2
  status=1
fi
exit $status
