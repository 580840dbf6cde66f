# SPDX-License-Identifier: BSD-3-Clause
# Sourced by run_pingpong.sh and run_pingpong_faults.sh: one of ibverbs-utils' pingpong
# programs as a server and a client process on simulated HCAs (the shim preloaded, one device
# each, the shim's log on), over GID index 3 (::ffff:<the device's address>, RoCE v2).
#
#   pingpong_pair SHIM PORT SECONDS PROGRAM [ARGS...]
#
# Sets $work (a temporary directory, removed at exit) holding server.out and client.out, and
# $server_rc and $client_rc (124: killed by the SECONDS limit).
. "$(dirname "${BASH_SOURCE[0]}")/listening.sh"

pingpong_pair() {
  local shim=$1 port=$2 seconds=$3 prog=$4
  shift 4
  work=$(mktemp -d)
  trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
  export LD_PRELOAD=$shim RNICDV_UVERBS_DEVICES=1 RNICDV_UVERBS_LOG=1
  timeout "$seconds" "$prog" -d rnicsim0 -g 3 -p "$port" "$@" >"$work/server.out" 2>&1 &
  server_pid=$!
  wait_listening "$port" $server_pid
  timeout "$seconds" "$prog" -d rnicsim0 -g 3 -p "$port" "$@" 127.0.0.1 >"$work/client.out" 2>&1
  client_rc=$?
  wait $server_pid
  server_rc=$?
}

# check_pingpong_outputs PROGRAM ITERS LABEL: prints both sides' output and returns non-zero
# unless both exited 0 having run all ITERS iterations ("N iters in ..."; ibv_xsrq_pingpong,
# which checks every message itself, prints "success" instead). Reads $work, $server_rc,
# $client_rc.
check_pingpong_outputs() {
  local prog=$1 iters=$2 label=$3 side rc_var status=0 done_line
  done_line="^$iters iters in"
  [ "$prog" = ibv_xsrq_pingpong ] && done_line='^success$'
  for side in server client; do
    rc_var=${side}_rc
    echo "===== $prog $label ($side, exit ${!rc_var})"
    cat "$work/$side.out"
    if [ "${!rc_var}" -ne 0 ] || ! grep -q "$done_line" "$work/$side.out"; then
      echo "$prog $side: exit ${!rc_var}, or not all $iters iterations" >&2
      status=1
    fi
  done
  return $status
}
