#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# librdmacm's mckey, unmodified: two receivers and one sender, each its own process with its
# own simulated HCA on the UDP wire, join an IPv4 multicast group through rdma_cm
# (rdma_join_multicast_ex: MULTICAST_JOIN, then ibv_attach_mcast). The sender sends COUNT
# datagrams to the group; each receiver ends only once it has polled COUNT completions, so a
# datagram lost or not replicated leaves it waiting until its time limit, and the test fails.
#
#   run_mckey.sh SHIM PORT COUNT [SENDER_OPTION...]
#
# PORT picks the test's own addresses and group (so that tests that overlap do not collide);
# SENDER_OPTION goes to the sender only (-l: its QP blocks multicast loopback; -o: it joins as
# a send-only member, with no QP attached).
set -u
shim=$1 port=$2 count=$3
shift 3
command -v mckey >/dev/null || { echo "mckey not found (Debian package rdmacm-utils)" >&2; exit 77; }
net=127.0.$((port % 200 + 20))
group=239.77.$((port % 200)).1
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
run() {  # run NAME ADDRESS MCKEY_ARGS...: one mckey on its own HCA, its output in NAME.out
  local name=$1 addr=$2
  shift 2
  # Line-buffered (stdbuf keeps the shim in LD_PRELOAD), so that its join shows at once.
  timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$addr" \
    stdbuf -oL mckey -m "$group" -b "$addr" -C "$count" -S 1000 "$@" >"$work/$name.out" 2>&1
  echo "exit status $?" >>"$work/$name.out"
}
run receiver1 "$net.2" &
pids+=($!)
run receiver2 "$net.3" &
pids+=($!)
# mckey sends as soon as its own join is answered (and 3 s later): the receivers must have
# joined first.
joined=0
for i in $(seq 1 300); do
  if grep -q 'joined dgid' "$work/receiver1.out" 2>/dev/null &&
     grep -q 'joined dgid' "$work/receiver2.out" 2>/dev/null; then
    joined=1
    break
  fi
  sleep 0.1
done
[ $joined -eq 1 ] && run sender "$net.1" -s "$@"
wait "${pids[@]}"
rc=0
for name in receiver1 receiver2 sender; do
  echo "===== $name"
  cat "$work/$name.out" 2>/dev/null
  grep -q '^exit status 0$' "$work/$name.out" 2>/dev/null &&
    grep -q '^data transfers complete$' "$work/$name.out" || rc=1
done
[ $joined -eq 1 ] || echo "the receivers did not both join within 30 s" >&2
exit $rc
