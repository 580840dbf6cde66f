#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs every libFuzzer program of a -Dfuzzing=enabled build for a bounded time, starting from
# the committed corpora (test/fuzz/corpus/<target>/, which are only read), and reports
# executions per second and corpus growth. A crash fails the run and leaves the input in
# WORKDIR/<target>/crash-*: fix the library, then add the input to the corpus so that the
# corpus_replay test keeps checking it.
#
#   run_fuzzers.sh BUILDDIR [SECONDS_PER_TARGET] [TARGET...]
#
# Environment: FUZZ_WORKDIR (default: a temporary directory, removed unless a target failed).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${1:?usage: run_fuzzers.sh BUILDDIR [SECONDS_PER_TARGET] [TARGET...]}
builddir=$(cd "$builddir" && pwd)
seconds=${2:-15}
shift $(( $# >= 2 ? 2 : $# ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(sq_executor receive_path cm_mad cqe_decoder fault_spec shim_commands)

# The largest input worth trying per target: a whole SQ ring (64 blocks), a datagram with a
# 4096-byte payload, a MAD and a little more, a CQ ring of up to 16 128-byte entries.
# shim_commands: a few records of up to 1 KiB each. fault_spec: a long specification.
declare -A max_len=([sq_executor]=4096 [receive_path]=4200 [cm_mad]=300 [cqe_decoder]=2049
                    [fault_spec]=1024 [shim_commands]=2048)

work=${FUZZ_WORKDIR:-}
keep=0
if [ -z "$work" ]; then work=$(mktemp -d); else keep=1; fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

fail=0
for t in "${targets[@]}"; do
  exe="$builddir/test/fuzz/fuzz-$t"
  [ -x "$exe" ] || { echo "run_fuzzers.sh: $exe not built (configure with -Dfuzzing=enabled)" >&2; exit 2; }
  seeds="$here/corpus/$t"
  mkdir -p "$work/$t/corpus"
  start=$(date +%s)
  set +e
  # New inputs go to the work corpus (first directory); the seeds are read only.
  (cd "$work/$t" && "$exe" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
      -max_len="${max_len[$t]}" -print_final_stats=1 corpus "$seeds") >"$work/$t/log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t/log")
  cov=$(grep -o 'cov: [0-9]*' "$work/$t/log" | tail -1 | cut -d' ' -f2)
  seed_count=$(find "$seeds" -type f | wc -l)
  new_count=$(find "$work/$t/corpus" -type f | wc -l)
  printf '  %-13s %3s s  %8s execs  %6s exec/s  coverage %5s  seeds %3s  new inputs %4s\n' \
    "$t" "$(( $(date +%s) - start ))" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$seed_count" "$new_count"
  if [ $rc -ne 0 ]; then
    fail=1
    echo "  $t FAILED (exit $rc); log: $work/$t/log"
    grep -m3 -e 'ERROR:' -e 'SUMMARY:' -e 'property failed' -e 'runtime error' "$work/$t/log" | sed 's/^/    /'
    ls "$work/$t"/crash-* "$work/$t"/timeout-* "$work/$t"/oom-* 2>/dev/null | sed 's/^/    input: /'
  fi
done
[ $fail = 0 ] && [ $keep = 0 ] && rm -rf "$work"
exit $fail
