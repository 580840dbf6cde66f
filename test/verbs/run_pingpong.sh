#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one of ibverbs-utils' unmodified pingpong programs (ibv_rc_pingpong, ibv_srq_pingpong,
# ibv_ud_pingpong, ibv_uc_pingpong, ibv_xsrq_pingpong) as a server and a client process, each on a simulated HCA through
# librnicdv-uverbs.so, and checks that both exit 0 having exchanged every message ("N iters in ...").
#
#   run_pingpong.sh SHIM PORT PROGRAM [ARGS...]
set -u
. "$(dirname "$0")/pingpong_pair.sh"
shim=$1 port=$2 prog=$3
shift 3
if ! command -v "$prog" >/dev/null; then
  echo "$prog not found (Debian package ibverbs-utils)" >&2
  exit 77
fi
iters=1000
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = -n ] && iters=${args[$((i + 1))]}
done
pingpong_pair "$shim" "$port" 120 "$prog" "$@"
check_pingpong_outputs "$prog" "$iters" "$*"
