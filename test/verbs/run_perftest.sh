#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one of Debian's unmodified perftest programs as a server and a client process on this
# machine, both on simulated HCAs through librnicdv-uverbs.so, and checks that both exit 0
# and that the client prints its result table (the server prints one too, except for READ
# and atomic tests, whose server side only answers; it must still have connected).
#
#   run_perftest.sh SHIM PORT PROGRAM [ARGS...]
#
# PERFTEST_EXPECT_CLIENT, PERFTEST_EXPECT_SERVER: extended regular expressions, each of whose
# `;`-separated parts must match a line of that side's output.
set -u
. "$(dirname "$0")/listening.sh"
shim=$1 port=$2 prog=$3
shift 3
if ! command -v "$prog" >/dev/null; then
  echo "$prog not found (Debian package perftest)" >&2
  exit 77
fi
work=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
export LD_PRELOAD=$shim RNICDV_UVERBS_DEVICES=1

timeout 120 "$prog" -p "$port" "$@" >"$work/server.out" 2>&1 &
server_pid=$!
wait_listening "$port" $server_pid
timeout 120 "$prog" -p "$port" "$@" 127.0.0.1 >"$work/client.out" 2>&1
client_rc=$?
wait $server_pid
server_rc=$?

status=0
for side in server client; do
  rc_var=${side}_rc
  out=$work/$side.out
  if [ "${!rc_var}" -ne 0 ] || ! grep -q 'remote address' "$out"; then
    echo "$prog $side: exit ${!rc_var}, did not connect" >&2
    status=1
  fi
  # The result table: its header, then a row that starts with the message size.
  if [ $side = client ] && { ! grep -q '#bytes' "$out" ||
                             ! grep -Eq '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$out"; }; then
    echo "$prog $side: no result table" >&2
    status=1
  fi
  expect_var=PERFTEST_EXPECT_${side^^}
  IFS=';' read -r -a expected <<<"${!expect_var:-}"
  for re in "${expected[@]}"; do
    if ! grep -Eq -- "$re" "$out"; then
      echo "$prog $side: no line matches /$re/" >&2
      status=1
    fi
  done
  echo "===== $prog $* ($side, exit ${!rc_var})"
  cat "$out"
done
exit $status
