#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs run_rdmacm.sh (same arguments) over IPv6: in a network namespace of its own whose
# loopback holds two unique local addresses, fd00:<port>::1 for the server's simulated HCA and
# fd00:<port>::2 for the client's, so that rdma_cm, its CM and the UDP wire all run over IPv6
# between two processes. Needs root and iproute2: exits 77 (skipped) where the namespace cannot
# be made. It is removed whatever the outcome.
#
#   run_rdmacm_ipv6.sh SHIM PORT PATTERN -- SERVER_CMD... -- CLIENT_CMD...
set -u
here=$(dirname "$(readlink -f "$0")")
. "$here/../common/netns.sh"
port=$2
ns=rnicdv-cm6-$$
make_netns "$ns"
prefix=$(printf 'fd00:%x:' "$port")
netns_add6 "$ns" lo "${prefix}:1/128" "${prefix}:2/128"
ip netns exec "$ns" env RDMACM_SERVER_ADDR="${prefix}:1" RDMACM_CLIENT_ADDR="${prefix}:2" \
  "$here/run_rdmacm.sh" "$@"
