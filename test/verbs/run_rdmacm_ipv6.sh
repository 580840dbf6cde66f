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
port=$2
skip() {
  echo "$1" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "the ip command (iproute2) is not available"
ns=rnicdv-cm6-$$
ip netns add "$ns" 2>/dev/null || skip "cannot create network namespaces"
trap 'ip netns del "$ns" 2>/dev/null' EXIT
prefix=$(printf 'fd00:%x:' "$port")
ip -n "$ns" link set lo up || exit 1
# Without duplicate address detection, so that both are usable at once.
ip -n "$ns" -6 addr add "${prefix}:1/128" dev lo nodad &&
  ip -n "$ns" -6 addr add "${prefix}:2/128" dev lo nodad ||
  skip "cannot add IPv6 addresses (is IPv6 disabled?)"
ip netns exec "$ns" env RDMACM_SERVER_ADDR="${prefix}:1" RDMACM_CLIENT_ADDR="${prefix}:2" \
  "$here/run_rdmacm.sh" "$@"
