#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rdma_cm's port spaces are apart: udaddy (RDMA_PS_UDP) asks a host whose only listener on its
# port, 7174, is rping's (RDMA_PS_TCP). The host's CM answers the SIDR_REQ with status 1
# (service ID not supported), which the client's rdma_cm reports as UNREACHABLE with that
# status, as the kernel's does (cma_sidr_rep_handler).
#
#   run_sidr_unsupported.sh SHIM PORT
set -u
shim=$1 port=$2
for prog in rping udaddy; do
  command -v $prog >/dev/null || { echo "$prog not found (Debian package rdmacm-utils)" >&2; exit 77; }
done
srv=127.0.$((port % 200 + 20)).1 cli=127.0.$((port % 200 + 20)).2
work=$(mktemp -d)
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR=$srv rping -s -a $srv -p 7174 \
  >"$work/server.out" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
seen=0
for attempt in $(seq 1 100); do
  timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR=$cli udaddy -s $srv >"$work/client.out" 2>&1
  if grep -q 'RDMA_CM_EVENT_UNREACHABLE, error: 1$' "$work/client.out"; then
    seen=1
    break
  fi
  # Not up yet: no HCA at the address.
  grep -q 'ADDR_ERROR' "$work/client.out" || break
  sleep 0.1
done
echo "===== udaddy -s $srv (attempt $attempt)"
cat "$work/client.out"
[ $seen -eq 1 ] || { echo "udaddy did not report UNREACHABLE with SIDR status 1" >&2; exit 1; }
