#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a test program in a network namespace of its own whose interface mc0 (one end of a
# veth pair, both ends inside; it carries multicast, which lo does not) holds three unique
# local addresses, given to the program in RNICDV_TEST_IPV6_ADDRS. Needs root and iproute2:
# exits 77 (skipped) where the namespace cannot be made. It is removed whatever the outcome.
#
#   run_in_ipv6_netns.sh PROGRAM [ARGS...]
set -u
. "$(dirname "$(readlink -f "$0")")/../common/netns.sh"
ns=rnicdv-t6-$$
make_netns "$ns"
ip -n "$ns" link add mc0 type veth peer name mc1 2>/dev/null || skip "cannot make a veth pair"
ip -n "$ns" link set mc1 up && ip -n "$ns" link set mc0 multicast on up || exit 1
prefix=$(printf 'fd00:%x:' $(($$ % 65536)))
netns_add6 "$ns" mc0 "${prefix}:1/64" "${prefix}:2/64" "${prefix}:3/64"
ip netns exec "$ns" env RNICDV_TEST_IPV6_ADDRS="${prefix}:1 ${prefix}:2 ${prefix}:3" "$@"
