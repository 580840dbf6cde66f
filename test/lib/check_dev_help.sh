#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `tools/dev help` prints the whole of its usage text: every command, every option and the
# environment, ending with a full sentence.
set -euo pipefail
top=$1
out=$("$top/tools/dev" help)
fail() { printf 'tools/dev help: %s\n--- output ---\n%s\n' "$1" "$out" >&2; exit 1; }
for word in demo test build bench faults verbs hardware help --sanitize= --builddir= RNICDV_WERROR \
            RNICDV_MESON_ARGS; do
  grep -q -- "$word" <<<"$out" || fail "does not mention '$word'"
done
last=$(tail -n 1 <<<"$out")
[[ "$last" == *. ]] || fail "stops mid-sentence: '$last'"
grep -q '^set -' <<<"$out" && fail "prints code after the usage text"
exit 0
