#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs socket-bulk (a plain TCP sockets program) as server and client processes with
# librspreload.so (Debian's librdmacm1) preloaded after the uverbs shim: its sockets become
# rsockets over the simulated HCA (run_rdmacm.sh starts the two processes, each on its own
# device). The server must report every byte verified.
#
#   run_rsocket.sh SHIM PORT SOCKET_BULK BYTES [--poll]
set -u
shim=$1 port=$2 bulk=$3 bytes=$4
shift 4
preload=""
for dir in /usr/lib/*/rsocket /usr/lib64/rsocket /usr/lib/rsocket; do
  if [ -e "$dir/librspreload.so" ]; then preload="$dir/librspreload.so"; break; fi
done
if [ -z "$preload" ]; then
  echo "librspreload.so not found (Debian package librdmacm1)" >&2
  exit 77
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The server's line is checked here; run_rdmacm.sh checks the client's.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$here/run_rdmacm.sh" "$shim:$preload" "$port" "^sent $bytes bytes" \
  -- "$bulk" server @S@ @P@ "$bytes" "$@" \
  -- "$bulk" client @S@ @P@ "$bytes" "$@" | tee "$out"
status=${PIPESTATUS[0]}
if ! grep -Eq "^verified $bytes bytes" "$out"; then
  echo "socket-bulk server: no 'verified $bytes bytes'" >&2
  status=1
fi
exit "$status"
