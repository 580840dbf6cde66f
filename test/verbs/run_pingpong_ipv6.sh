#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one of ibverbs-utils' pingpong programs, unmodified, between two network namespaces
# joined by a veth pair, each process on a simulated HCA (the shim preloaded) whose address is
# the link-local IPv6 address of its veth end (fe80::a, fe80::b): GID index 1, the port's
# default GID, RoCE v2 over IPv6 through the kernel. The programs' TCP exchange goes over IPv4
# on the same link. Checks that both exit 0 having exchanged every message, each with the
# other's link-local GID. Needs root and iproute2: exits 77 (skipped) where the namespaces
# cannot be made. They are removed whatever the outcome.
#
#   run_pingpong_ipv6.sh SHIM PORT PROGRAM [ARGS...]
set -u
. "$(dirname "$0")/pingpong_pair.sh"
shim=$1 port=$2 prog=$3
shift 3
skip() {
  echo "$1" >&2
  exit 77
}
command -v "$prog" >/dev/null || skip "$prog not found (Debian package ibverbs-utils)"
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "the ip command (iproute2) is not available"
iters=1000
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = -n ] && iters=${args[$((i + 1))]}
done

id=$$
ns_a=rnicdv-pp6-$id-a ns_b=rnicdv-pp6-$id-b veth_a=rpp${id}a veth_b=rpp${id}b
net=10.211.$((1 + id % 250))
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns_a" 2>/dev/null || skip "cannot create network namespaces"
ip netns add "$ns_b" || exit 1
for step in "link add $veth_a type veth peer name $veth_b" "link set $veth_a netns $ns_a" \
  "link set $veth_b netns $ns_b" "-n $ns_a addr add $net.1/24 dev $veth_a" \
  "-n $ns_b addr add $net.2/24 dev $veth_b" "-n $ns_a link set lo up" \
  "-n $ns_b link set lo up" "-n $ns_a link set $veth_a up" "-n $ns_b link set $veth_b up"; do
  # shellcheck disable=SC2086 # the steps are word lists
  ip $step || { echo "ip $step failed" >&2; exit 1; }
done
# Without duplicate address detection, so that both are usable at once.
ip -n "$ns_a" -6 addr add fe80::a/64 dev "$veth_a" nodad &&
  ip -n "$ns_b" -6 addr add fe80::b/64 dev "$veth_b" nodad ||
  skip "cannot add IPv6 addresses (is IPv6 disabled?)"

run() {  # NAMESPACE ADDRESS [SERVER]
  ip netns exec "$1" env LD_PRELOAD="$shim" RNICDV_UVERBS_DEVICES=1 RNICDV_UVERBS_LOG=1 \
    RNICDV_SIM_ADDR="$2" timeout 120 "$prog" -d rnicsim0 -g 1 -p "$port" "${args[@]}" ${3:+"$3"}
}
run "$ns_a" fe80::a >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 1 200); do
  ip netns exec "$ns_a" ss -Htln "sport = :$port" | grep -q . && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
run "$ns_b" fe80::b "$net.1" >"$work/client.out" 2>&1
client_rc=$?
wait "$server_pid"
server_rc=$?
server_pid=

status=0
check_pingpong_outputs "$prog" "$iters" "${args[*]} -g 1 over fe80::" || status=1
# Each side sent from its link-local GID and learnt the other's.
for check in "server:local address:.*GID fe80::a" "server:remote address:.*GID fe80::b" \
  "client:local address:.*GID fe80::b" "client:remote address:.*GID fe80::a"; do
  if ! grep -q "${check#*:}" "$work/${check%%:*}.out"; then
    echo "no line \"${check#*:}\" from the ${check%%:*}" >&2
    status=1
  fi
done
exit $status
