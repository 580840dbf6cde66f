#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# With RNICDV_UVERBS_LOG=1 the shim says once, when a program first opens a device, how
# libmlx5's doorbell stores reach a sleeping simulated HCA: "userfaultfd", or why not and
# that the device polls. Without it, it says nothing.
#
#   doorbell_wake_logged.sh SHIM
set -u
shim=$1
if ! command -v ibv_devinfo >/dev/null; then
  echo "ibv_devinfo not found (Debian package ibverbs-utils)" >&2
  exit 77
fi
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=inproc
with=$(RNICDV_UVERBS_LOG=1 LD_PRELOAD="$shim" timeout 60 ibv_devinfo -d rnicsim0 2>&1)
without=$(LD_PRELOAD="$shim" timeout 60 ibv_devinfo -d rnicsim0 2>&1)
echo "===== with RNICDV_UVERBS_LOG=1"
echo "$with"
status=0
lines=$(grep -c '^rnicdv-uverbs: doorbell wake-up: ' <<<"$with")
if [ "$lines" -ne 1 ] ||
   ! grep -Eq '^rnicdv-uverbs: doorbell wake-up: (userfaultfd$|.*the device polls its UAR pages$)' <<<"$with"; then
  echo "expected one line saying how doorbells wake the device, got $lines" >&2
  status=1
fi
if grep -q 'doorbell wake-up' <<<"$without"; then
  echo "the line appeared without RNICDV_UVERBS_LOG=1" >&2
  status=1
fi
exit $status
