#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Model-checks test/model/early_post.pml with Spin: an exhaustive search of every
# configuration below for assertion violations and invalid end states, then one search per
# LTL property (design.md's invariants 1-5), or shows that a known-bad variant is rejected.
#
#   run_spin.sh verify [CONFIG...]   every CONFIG must verify with no error (default: all)
#   run_spin.sh broken [CASE...]     every known-bad CASE must fail (default: all)
#   run_spin.sh list                 the configurations and the known-bad cases
#
# A CONFIG is a name from the table below; a CASE is CONFIG:VARIANT, a configuration built
# with one known-bad variant of the code (or CONFIG: alone, a configuration the driver refuses). Exit status: 0 as expected, 1 not as expected,
# 77 when spin or a C compiler is missing (the meson test then reports a skip).
# Environment: SPIN_WORKDIR (default: a temporary directory), CC (default: cc), SPIN_OPT (the
# verifier's optimisation, default -O2; -O0 compiles 5x faster and suits the small
# configurations), SPIN_LTL=0 skips the LTL searches (assertions are still checked).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model="$here/early_post.pml"

# name: spin -D flags. THREADING 2 (thread_safe) runs two posting threads, 1 (single_poster)
# the one lock-free poster its contract allows, 0 (single) one thread for everything; each
# beside one event thread, the device and the CQ poller.
declare -A configs=(
  [thread_safe-in_place]="-DTHREADING=2 -DSHADOW=0 -DSCANNING=0"
  [thread_safe-shadow]="-DTHREADING=2 -DSHADOW=1 -DSCANNING=0"
  [thread_safe-shadow-scanning]="-DTHREADING=2 -DSHADOW=1 -DSCANNING=1"
  [single_poster-in_place]="-DTHREADING=1 -DSHADOW=0 -DSCANNING=0"
  [single_poster-shadow]="-DTHREADING=1 -DSHADOW=1 -DSCANNING=0"
  [single_poster-shadow-scanning]="-DTHREADING=1 -DSHADOW=1 -DSCANNING=1"
  [single-in_place]="-DTHREADING=0 -DSHADOW=0 -DSCANNING=0"
  [single-shadow]="-DTHREADING=0 -DSHADOW=1 -DSCANNING=0"
  [single-shadow-scanning]="-DTHREADING=0 -DSHADOW=1 -DSCANNING=1"
  # In-place withholding on a scanning device: Device::create_qp refuses it, because the
  # device runs the withheld WQEs the moment its QP reaches RTS. Only a known-bad case.
  [single_poster-in_place-scanning]="-DTHREADING=1 -DSHADOW=0 -DSCANNING=1"
)
order=(thread_safe-in_place thread_safe-shadow thread_safe-shadow-scanning
       single_poster-in_place single_poster-shadow single_poster-shadow-scanning
       single-in_place single-shadow single-shadow-scanning)
# Known-bad variants, each of which the checks must reject:
#  * BROKEN_FLUSH_ORDER: publishing RTS before the doorbell lets the lock-free fast path
#    (single_poster) post and ring in the middle of the flush. Under thread_safe every post
#    holds the lock the flush holds, so the order does not matter there.
#  * SCANNING_BROKEN_ORDER (the scanning configurations): writing a WQE before its sq_entries
#    slot and ring_pi lets a device that runs valid-looking WQEs past the doorbell record
#    complete it first; the poller drops that CQE as stale and the WR never completes.
#  * CTRL_HEAD_FIRST (the scanning configurations): storing a ctrl segment's head (what the
#    device tests for a valid WQE) before its fm_ce_se lets the device run a signaled WQE as
#    unsignaled; its completion is never written.
#  * single_poster-in_place-scanning, as it is: the device runs withheld WQEs before the
#    driver has announced them, and their CQEs are dropped as stale.
broken_cases=(single_poster-in_place:BROKEN_FLUSH_ORDER single_poster-shadow:BROKEN_FLUSH_ORDER
              single_poster-shadow-scanning:SCANNING_BROKEN_ORDER
              single_poster-shadow-scanning:CTRL_HEAD_FIRST single-shadow-scanning:CTRL_HEAD_FIRST
              single_poster-in_place-scanning:)
ltls=(inv1_no_doorbell_below_rts inv2_nothing_runs_before_rts inv3_exactly_once inv4_sq_order
      inv5_bounded_batch)

mode=${1:-}
[ $# -gt 0 ] && shift
case "$mode" in
  list) printf '%s\n' "${order[@]}" "${broken_cases[@]}"; exit 0 ;;
  verify) [ $# -gt 0 ] || set -- "${order[@]}" ;;
  broken) [ $# -gt 0 ] || set -- "${broken_cases[@]}" ;;
  *) echo "usage: $0 verify|broken|list [CONFIG...|CASE...]" >&2; exit 2 ;;
esac
for c in "$@"; do
  [ -n "${configs[${c%%:*}]:-}" ] ||
    { echo "run_spin.sh: unknown configuration '${c%%:*}'" >&2; exit 2; }
done

command -v spin >/dev/null || { echo "SKIP: spin is not installed (Debian package spin)"; exit 77; }
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "SKIP: no C compiler ($cc) to build Spin's verifier"; exit 77; }

work=${SPIN_WORKDIR:-}
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Generates and compiles the verifiers for one configuration: pan-safety (assertions and
# invalid end states, no never claim) and, unless only that is wanted, pan-ltl (the never
# claims); the two compile side by side.
build() {
  local dir=$1 want_ltl=$2; shift 2
  mkdir -p "$dir"
  cp "$model" "$dir/early_post.pml"
  (cd "$dir" && spin "$@" -a early_post.pml >spin.log 2>&1) || { cat "$dir/spin.log"; return 1; }
  # COLLAPSE: lossless state compression (memory). Not bitstate: the search is exhaustive.
  local opt=${SPIN_OPT:--O2} pid=
  if [ "$want_ltl" = 1 ]; then
    (cd "$dir" && "$cc" $opt -w -DCOLLAPSE -o pan-ltl pan.c) &
    pid=$!
  fi
  (cd "$dir" && "$cc" $opt -w -DCOLLAPSE -DSAFETY -DNOCLAIM -o pan-safety pan.c) || return 1
  [ -z "$pid" ] || wait "$pid"
}

# Runs one search; prints a summary line; returns 0 when it found no error and was complete.
search() {
  local dir=$1 label=$2; shift 2
  local t0 out
  t0=$(now)
  out=$(cd "$dir" && "$@" 2>&1) || true
  printf '%s\n' "$out" >"$dir/$label.log"
  local errors states depth
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' <<<"$out" | tail -1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
  printf '  %-32s errors %s, states %s, depth %s, %s s\n' "$label" "${errors:-?}" \
    "${states:-?}" "${depth:-?}" "$(since "$t0")"
  # A search stops at its first error; with none, it must have covered every state.
  if [ "${errors:-x}" = 0 ] &&
     grep -q -e 'Search not completed' -e 'max search depth too small' <<<"$out"; then
    echo "    incomplete search (see $dir/$label.log)"
    return 2
  fi
  [ "${errors:-x}" = 0 ]
}

# Checks one configuration; prints its report; returns 0 when it came out as expected.
check() {
  local c=$1 t0 dir want_ltl bad=0
  t0=$(now)
  dir="$work/$mode-$c"
  if [ "$mode" = broken ]; then
    local config=${c%%:*} variant=${c#*:} what flags
    dir="$work/$mode-$config-${variant:-as-is}"
    case "$variant" in
      BROKEN_FLUSH_ORDER) what="a flush that publishes RTS before the doorbell" ;;
      SCANNING_BROKEN_ORDER) what="a WQE written before its entry and ring_pi on a scanning device" ;;
      CTRL_HEAD_FIRST) what="a ctrl segment stored head first on a scanning device" ;;
      "") what="in-place withholding on a scanning device" ;;
      *) echo "run_spin.sh: unknown variant '$variant'" >&2; return 1 ;;
    esac
    flags=${configs[$config]}
    [ -z "$variant" ] || flags="$flags -D$variant"
    echo "$config, ${variant:-as it is} (must fail):"
    # shellcheck disable=SC2086
    build "$dir" 0 $flags || return 1
    if search "$dir" assertions ./pan-safety -m100000; then
      echo "  NOT REJECTED: the model accepts $what"
      bad=1
    else
      # Name what caught it: the first violated assertion of the counterexample.
      grep -m1 -e 'assertion violated' -e 'invalid end state' "$dir/assertions.log" |
        sed 's/^/    caught: /'
    fi
  else
    echo "$c:"
    want_ltl=1
    [ "${SPIN_LTL:-1}" != 0 ] || want_ltl=0
    build "$dir" $want_ltl ${configs[$c]} || return 1
    search "$dir" assertions ./pan-safety -m100000 || bad=1
    if [ $want_ltl = 1 ]; then
      for p in "${ltls[@]}"; do
        search "$dir" "$p" ./pan-ltl -a -m100000 -N "$p" || bad=1
      done
    fi
  fi
  echo "  ($c: $(since "$t0") s)"
  return $bad
}

# SPIN_JOBS=N checks N configurations at a time (each search is single-threaded).
jobs=${SPIN_JOBS:-1}
fail=0
if [ "$jobs" -le 1 ]; then
  for c in "$@"; do check "$c" || fail=1; done
else
  pids=()
  for c in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    check "$c" >"$work/$c.report" 2>&1 &
    pids+=($!)
  done
  i=0
  for c in "$@"; do
    wait "${pids[$i]}" || fail=1
    cat "$work/$c.report"
    i=$((i + 1))
  done
fi
exit $fail
