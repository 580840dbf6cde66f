#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a test program in a network namespace of its own whose interface mc0 (one end of a
# veth pair, both ends inside; it carries multicast, which lo does not) holds three unique
# local addresses, given to the program in RNICDV_TEST_IPV6_ADDRS. Needs root and iproute2:
# exits 77 (skipped) where the namespace cannot be made. It is removed whatever the outcome.
#
#   run_in_ipv6_netns.sh PROGRAM [ARGS...]
set -u
skip() {
  echo "skipped: $1"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "the ip command (iproute2) is not available"
ns=rnicdv-t6-$$
ip netns add "$ns" 2>/dev/null || skip "cannot create network namespaces"
trap 'ip netns del "$ns" 2>/dev/null' EXIT
ip -n "$ns" link set lo up || exit 1
ip -n "$ns" link add mc0 type veth peer name mc1 2>/dev/null || skip "cannot make a veth pair"
ip -n "$ns" link set mc1 up && ip -n "$ns" link set mc0 multicast on up || exit 1
prefix=$(printf 'fd00:%x:' $(($$ % 65536)))
for host in 1 2 3; do
  # Without duplicate address detection, so that all are usable at once.
  ip -n "$ns" -6 addr add "${prefix}:$host/64" dev mc0 nodad ||
    skip "cannot add IPv6 addresses (is IPv6 disabled?)"
done
ip netns exec "$ns" env RNICDV_TEST_IPV6_ADDRS="${prefix}:1 ${prefix}:2 ${prefix}:3" "$@"
