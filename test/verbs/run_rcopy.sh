#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rdmacm-utils' rcopy, unmodified, over rsockets on two simulated HCAs (librnicdv-uverbs.so,
# the UDP wire): the server process (which serves until killed) receives a file of SIZE_KIB
# KiB of random bytes from the client process into a file of its own. Passes when both
# processes behaved (the client exits 0 having printed its transfer line, the server is still
# serving and reported the transfer) and the two files have the same SHA-256.
#
#   run_rcopy.sh SHIM PORT SIZE_KIB
set -u
shim=$1 port=$2 size_kib=$3
if ! command -v rcopy >/dev/null; then
  echo "rcopy not found (Debian package rdmacm-utils)" >&2
  exit 77
fi
srv_addr=127.0.$((port % 200 + 20)).1
cli_addr=127.0.$((port % 200 + 20)).2
work=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill $server_pid 2>/dev/null; rm -rf "$work"' EXIT
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
head -c $((size_kib * 1024)) /dev/urandom >"$work/source"

# The server binds the wildcard address; its one device has the address srv_addr.
timeout 120 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$srv_addr" rcopy -p "$port" \
  >"$work/server.out" 2>&1 &
server_pid=$!
client_rc=1
for attempt in $(seq 1 100); do
  timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR="$cli_addr" \
    rcopy "$work/source" "$srv_addr:$work/copy" -p "$port" >"$work/client.out" 2>&1
  client_rc=$?
  [ $client_rc -eq 0 ] && break
  # The server's device has no address yet, or nothing listens yet: try again.
  if ! kill -0 $server_pid 2>/dev/null ||
     ! grep -Eqi 'Connection refused|No route to host|REJECTED|ADDR_ERROR' "$work/client.out"; then
    break
  fi
  sleep 0.1
done

status=0
[ $client_rc -eq 0 ] || { echo "rcopy client: exit $client_rc" >&2; status=1; }
if ! grep -Eq "^opening\.\.\.transferring\.\.\.closing\.\.\.done$" "$work/client.out" ||
   ! grep -Eq "^$((size_kib * 1024)) bytes in [0-9.]+ seconds" "$work/client.out"; then
  echo "rcopy client: no transfer report for $((size_kib * 1024)) bytes" >&2
  status=1
fi
# The server reports the close after answering it: give it a moment.
for _ in $(seq 1 100); do
  grep -qF "closing...done" "$work/server.out" && break
  sleep 0.1
done
# Served and still serving (rcopy's server loops for the next connection).
if ! kill -0 $server_pid 2>/dev/null; then
  wait $server_pid
  echo "rcopy server: exited (status $?) instead of serving on" >&2
  status=1
fi
grep -qF "transferring...$((size_kib * 1024)) bytes...closing...done" "$work/server.out" ||
  { echo "rcopy server: no report of the transfer" >&2; status=1; }
src_sum=$(sha256sum <"$work/source" | cut -d' ' -f1)
copy_sum=$( [ -f "$work/copy" ] && sha256sum <"$work/copy" | cut -d' ' -f1)
echo "source: $src_sum"
echo "copy:   ${copy_sum:-(no file)}"
[ "$src_sum" = "$copy_sum" ] || { echo "the copy differs from the source" >&2; status=1; }
echo "===== server: rcopy -p $port"
cat "$work/server.out"
echo "===== client: rcopy source $srv_addr:copy -p $port (exit $client_rc, attempt $attempt)"
cat "$work/client.out"
exit $status
