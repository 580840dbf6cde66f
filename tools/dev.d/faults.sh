# SPDX-License-Identifier: BSD-3-Clause
# `tools/dev faults [--seeds N] [--first-seed S] [--wire inproc|udp|both] [--max-rate R]
#                   [--rates P,P,...] [--no-mib] [--jobs J] [--json PATH] [--verbose]`, sourced by tools/dev
# (configure, build helpers, ensure_pkgs, say, die and $builddir come from there).
#
# The long fault campaign: builds rnicdv-faults optimised (with assertions) in build-faults/
# and runs N seeds (default 1000), each a full connection with early posting in RTR and every
# RC opcode at small, MTU-crossing and multi-MiB sizes over a wire with seeded drop,
# duplicate, reorder, corrupt and delay faults up to 30%. Prints the table of totals, writes
# build-faults/faults.json (or --json PATH) and fails if any run lost, duplicated or damaged
# anything, completed a WR other than exactly once, or hung. docs/reliability.md explains it.
# With --rates (e.g. 30,45,60,80) the seeds run once per rate, every run at exactly that rate,
# and one row per rate gives runs, connections that never came up, transport give-ups, lost
# and duplicated (the rate sweep); it fails if anything was lost or duplicated.

faults_args=()
json_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds|--first-seed|--wire|--max-rate|--rates|--jobs|--udp-every)
      [ $# -ge 2 ] || die "faults: $1 needs a value"
      faults_args+=("$1" "$2"); shift 2 ;;
    --json)
      [ $# -ge 2 ] || die "faults: --json needs a path"
      faults_args+=("$1" "$2"); json_given=1; shift 2 ;;
    --no-mib|--verbose|-v) faults_args+=("$1"); shift ;;
    *) die "faults: unknown argument '$1' (--seeds N, --first-seed S, --wire inproc|udp|both, --max-rate R, --rates P,P,..., --no-mib, --jobs J, --json PATH, --verbose)" ;;
  esac
done

[ "$builddir" = build ] && [ -z "$sanitize" ] && builddir=build-faults
case " ${faults_args[*]} " in *" --jobs "*) ;; *) faults_args+=(--jobs "$(nproc 2>/dev/null || echo 2)") ;; esac
[ "$json_given" = 1 ] || faults_args+=(--json "$builddir/faults.json")

ensure_pkgs "${build_pkgs[@]}"
configure -Dbuildtype=debugoptimized
say "building the fault campaign in $builddir"
ninja -C "$builddir" test/faults/rnicdv-faults >/dev/null || ninja -C "$builddir" test/faults/rnicdv-faults
say "running the fault campaign: ${faults_args[*]}"
exec "$builddir/test/faults/rnicdv-faults" "${faults_args[@]}"
