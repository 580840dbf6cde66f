#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A fault specification that does not parse stops everything before it starts, in one line that
# names the clause, the field and what it accepts: check-faults (which `tools/dev verbs
# --faults` runs first) exits 2 with that line, and an unmodified program under the shim opens
# no device and says it once, however many devices it tries.
#
#   bad_fault_spec.sh SHIM CHECK_FAULTS
set -u
shim=$1 check=$2
bad="seed=3; drop p=0.02; reorder p=1.5 hold=10us"
want="clause 3 'reorder p=1.5 hold=10us': p: '1.5' is not a probability in \[0, 1\]"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$check" "$bad" 2>&1); rc=$?
echo "check-faults: exit $rc: $out"
[ $rc -eq 2 ] || fail "check-faults exited $rc, not 2"
[ "$(wc -l <<<"$out")" -eq 1 ] && grep -q -- "$want" <<<"$out" || fail "check-faults: not the one line"
out=$("$check" "seed=3; drop p=0.02 dir=request; wr status=retry nth=2" 2>&1) ||
  fail "check-faults refused a good specification: $out"
grep -q "1 frame rules, 0 link events, 1 chosen completions, 0 CM faults, seed 3" <<<"$out" ||
  fail "check-faults: unexpected summary: $out"

if ! command -v ibv_devinfo >/dev/null; then echo "ibv_devinfo not found (ibverbs-utils)"; exit 77; fi
out=$(RNICDV_SIM_FAULTS="$bad" RNICDV_UVERBS_DEVICES=2 timeout 60 env LD_PRELOAD="$shim" ibv_devinfo 2>&1)
rc=$?
echo "ibv_devinfo: exit $rc"; echo "$out"
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -le 128 ] || fail "ibv_devinfo: exit $rc (expected a clean failure)"
[ "$(grep -c '^rnicdv-uverbs: ' <<<"$out")" -eq 1 ] || fail "expected exactly one rnicdv-uverbs line"
grep -q -- "RNICDV_SIM_FAULTS: fault spec: $want" <<<"$out" || fail "the line does not name the field"
exit 0
