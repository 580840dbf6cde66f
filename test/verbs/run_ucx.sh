#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# UCX (Debian's ucx-utils, unmodified, its memory hooks on: UCX patches mmap, so libmlx5's UAR
# mappings reach the kernel on the command descriptor) on the simulated HCA through the shim.
#
#   run_ucx.sh SHIM info                          ucx_info -d lists rc_mlx5 and rc_verbs
#   run_ucx.sh SHIM perftest PORT TL TEST [ARGS]  ucx_perftest server and client processes
set -u
. "$(dirname "$0")/listening.sh"
shim=$1 what=$2
shift 2
if ! command -v ucx_perftest >/dev/null || ! command -v ucx_info >/dev/null; then
  echo "ucx_info/ucx_perftest not found (Debian package ucx-utils)" >&2
  exit 77
fi
export LD_PRELOAD=$shim RNICDV_UVERBS_DEVICES=1
case $what in
  info)
    out=$(timeout 60 ucx_info -d 2>&1)
    rc=$?
    echo "$out"
    status=0
    # The simulated HCA has no UD QPs; the shim refuses them (EOPNOTSUPP, one line), and UCX
    # 1.13's ud_mlx5 then destroys the QP it never got (ibv_destroy_qp(NULL) from
    # uct_ib_mlx5_destroy_qp) and crashes after listing everything else. That crash, and no
    # other failure, is expected here.
    if [ $rc -ne 0 ]; then
      if echo "$out" | grep -q "failed to create UD QP" &&
         echo "$out" | grep -q "uct_ib_mlx5_destroy_qp"; then
        echo "note: ucx_info crashed in UCX's own UD error path (no UD QPs on the simulated HCA)"
      else
        echo "ucx_info -d failed (exit $rc)" >&2
        status=1
      fi
    fi
    for tl in rc_mlx5 rc_verbs; do
      # "Transport: <tl>" followed by "Device: rnicsim0:1"
      echo "$out" | grep -A1 -E "^# +Transport: $tl\$" | grep -qE "^# +Device: rnicsim0:1\$" ||
        { echo "ucx_info -d does not list $tl on rnicsim0:1" >&2; status=1; }
    done
    echo "$out" | grep -q "failed to open memory domain rnicsim0" &&
      { echo "UCX could not open rnicsim0's memory domain" >&2; status=1; }
    exit $status
    ;;
  perftest)
    port=$1 tl=$2 test=$3
    shift 3
    work=$(mktemp -d)
    trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
    timeout 120 ucx_perftest -d rnicsim0:1 -x "$tl" -p "$port" >"$work/server.out" 2>&1 &
    server_pid=$!
    wait_listening "$port" $server_pid
    timeout 120 ucx_perftest 127.0.0.1 -d rnicsim0:1 -x "$tl" -p "$port" -t "$test" "$@" \
      >"$work/client.out" 2>&1
    client_rc=$?
    wait $server_pid
    server_rc=$?
    echo "===== server (exit $server_rc)"; cat "$work/server.out"
    echo "===== client (exit $client_rc)"; cat "$work/client.out"
    [ $server_rc -eq 0 ] && [ $client_rc -eq 0 ] && grep -q '^Final:' "$work/client.out"
    ;;
  *) echo "run_ucx.sh: info or perftest" >&2; exit 2 ;;
esac
