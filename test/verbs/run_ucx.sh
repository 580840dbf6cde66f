#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# UCX (Debian's ucx-utils, unmodified, its memory hooks on: UCX patches mmap, so libmlx5's UAR
# mappings reach the kernel on the command descriptor) on the simulated HCA through the shim.
#
#   run_ucx.sh SHIM info                          ucx_info -d lists rc_mlx5, rc_verbs, ud_mlx5
#                                                 and ud_verbs, and exits 0
#   run_ucx.sh SHIM perftest PORT TL TEST [ARGS]  ucx_perftest server and client processes, a
#                                                 UCT test over one transport
#   run_ucx.sh SHIM ucp PORT TL AUX TEST [ARGS]   the same for a UCP test (tag_lat) with
#                                                 UCX_TLS=TL,AUX: the client must put its tag
#                                                 lane on TL (AUX, a UD transport, carries the
#                                                 wire-up)
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
    [ $rc -eq 0 ] || { echo "ucx_info -d failed (exit $rc)" >&2; status=1; }
    for tl in rc_mlx5 rc_verbs ud_mlx5 ud_verbs; do
      # "Transport: <tl>" followed by "Device: rnicsim0:1"
      echo "$out" | grep -A1 -E "^# +Transport: $tl\$" | grep -qE "^# +Device: rnicsim0:1\$" ||
        { echo "ucx_info -d does not list $tl on rnicsim0:1" >&2; status=1; }
    done
    echo "$out" | grep -q "failed to open memory domain rnicsim0" &&
      { echo "UCX could not open rnicsim0's memory domain" >&2; status=1; }
    exit $status
    ;;
  perftest | ucp)
    port=$1 tl=$2
    shift 2
    if [ "$what" = ucp ]; then
      # UCP picks its transports from UCX_TLS; its info log names each endpoint's lanes.
      export UCX_TLS=$tl,$1 UCX_NET_DEVICES=rnicsim0:1
      shift
      server_args=() client_args=()
      client_env=(UCX_LOG_LEVEL=info)
    else
      server_args=(-d rnicsim0:1 -x "$tl") client_args=(-d rnicsim0:1 -x "$tl")
      client_env=()
    fi
    test=$1
    shift
    work=$(mktemp -d)
    trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
    timeout 120 ucx_perftest "${server_args[@]}" -p "$port" >"$work/server.out" 2>&1 &
    server_pid=$!
    wait_listening "$port" $server_pid
    env "${client_env[@]}" timeout 120 ucx_perftest 127.0.0.1 "${client_args[@]}" -p "$port" \
      -t "$test" "$@" >"$work/client.out" 2>&1
    client_rc=$?
    wait $server_pid
    server_rc=$?
    echo "===== server (exit $server_rc)"; cat "$work/server.out"
    echo "===== client (exit $client_rc)"; cat "$work/client.out"
    [ $server_rc -eq 0 ] && [ $client_rc -eq 0 ] && grep -q '^Final:' "$work/client.out" ||
      exit 1
    if [ "$what" = ucp ] && ! grep -qF "ep_cfg[0]: tag($tl/rnicsim0:1)" "$work/client.out"; then
      echo "the client's tag lane is not on $tl/rnicsim0:1" >&2
      exit 1
    fi
    ;;
  *) echo "run_ucx.sh: info, perftest or ucp" >&2; exit 2 ;;
esac
