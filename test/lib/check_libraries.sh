#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The libraries' dependencies follow the architecture: librnicdv needs rdma-core and the C++
# runtime only (no DPDK, no simulator), librnicdv-sim no DPDK; only librnicdv-dpdk carries
# DPDK's libraries.
#
#   check_libraries.sh BUILDDIR
set -u
build=$1
status=0
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for lib in librnicdv.so librnicdv-sim.so; do
  echo "== $lib needs: $(needed "$build/$lib" | tr '\n' ' ')"
  if needed "$build/$lib" | grep -E '^(librte_|libnuma|libfdt|librnicdv-dpdk)'; then
    echo "$lib must not need DPDK" >&2
    status=1
  fi
done
if needed "$build/librnicdv.so" | grep -E '^librnicdv-sim'; then
  echo "librnicdv.so must not need the simulator" >&2
  status=1
fi
if [ -e "$build/librnicdv-dpdk.so" ]; then
  echo "== librnicdv-dpdk.so needs: $(needed "$build/librnicdv-dpdk.so" | tr '\n' ' ')"
fi
exit $status
