#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs an unmodified program on the simulated HCA that asks for something it does not have.
# It must fail cleanly: a non-zero exit within the time limit (no hang), no signal (no
# crash), and the shim's one line naming what is not supported (PATTERN, a regular
# expression).
#
#   expect_clean_failure.sh SHIM PATTERN CMD...
set -u
shim=$1 pattern=$2
shift 2
if ! command -v "$1" >/dev/null; then
  echo "$1 not found (Debian package rdmacm-utils)" >&2
  exit 77
fi
out=$(RNICDV_UVERBS_DEVICES=1 timeout 60 env LD_PRELOAD="$shim" "$@" 2>&1)
rc=$?
echo "===== $* (exit $rc)"
echo "$out"
if [ $rc -eq 0 ]; then echo "$1 succeeded; it should have been refused" >&2; exit 1; fi
if [ $rc -eq 124 ]; then echo "$1 hung (timeout)" >&2; exit 1; fi
# 128 + N is death by signal N (N <= 64); 255 is a program's own exit(-1).
if [ $rc -gt 128 ] && [ $rc -le 192 ]; then echo "$1 died of signal $((rc - 128))" >&2; exit 1; fi
if [ "$(grep -c '^rnicdv-uverbs: ' <<<"$out")" -ne 1 ] || ! grep -Eq -- "$pattern" <<<"$out"; then
  echo "$1: expected exactly one 'rnicdv-uverbs:' line matching '$pattern'" >&2
  exit 1
fi
exit 0
