#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs run_mckey.sh (same arguments) over IPv6: in a network namespace of its own with an
# interface that carries multicast (one end of a veth pair) and holds three unique local
# addresses, fd00:<port>::1 for
# the sender's simulated HCA and ::2 and ::3 for the receivers', and the group
# ff0e::77:<port>. The kernel's IPv6 multicast loopback on that interface replicates the
# group's datagrams to every member. Needs root and iproute2: exits 77 (skipped) where the
# namespace cannot be made. It is removed whatever the outcome.
#
#   run_mckey_ipv6.sh SHIM PORT COUNT [SENDER_OPTION...]
set -u
here=$(dirname "$(readlink -f "$0")")
port=$2
skip() {
  echo "$1" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "the ip command (iproute2) is not available"
ns=rnicdv-mc6-$$
ip netns add "$ns" 2>/dev/null || skip "cannot create network namespaces"
trap 'ip netns del "$ns" 2>/dev/null' EXIT
prefix=$(printf 'fd00:%x:' "$port")
ip -n "$ns" link set lo up || exit 1
# A veth pair with both ends in the namespace: mc0 carries multicast (lo does not), and the
# kernel loops a group's datagrams back to the members on it.
ip -n "$ns" link add mc0 type veth peer name mc1 2>/dev/null || skip "cannot make a veth pair"
ip -n "$ns" link set mc1 up && ip -n "$ns" link set mc0 multicast on up || exit 1
for host in 1 2 3; do
  # Without duplicate address detection, so that all are usable at once.
  ip -n "$ns" -6 addr add "${prefix}:$host/64" dev mc0 nodad ||
    skip "cannot add IPv6 addresses (is IPv6 disabled?)"
done
ip netns exec "$ns" env MCKEY_ADDRS="${prefix}:1 ${prefix}:2 ${prefix}:3" \
  MCKEY_GROUP="$(printf 'ff0e::77:%x' "$port")" "$here/run_mckey.sh" "$@"
