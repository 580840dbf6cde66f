# SPDX-License-Identifier: BSD-3-Clause
# `tools/dev bench [--smoke] [--no-callgrind]`, sourced by tools/dev (configure, build,
# ensure_pkgs, say, die and $builddir come from there).
#
# Builds an optimised configuration (buildtype=release: -O3, -DNDEBUG) in build-bench/, runs
# the benchmark suite (tools/bench/run.py), writes build-bench/bench.json and prints the
# table. --smoke runs every case a few iterations and checks the JSON: a test of the tool.
# docs/performance.md explains every figure.

bench_args=()
for arg in "$@"; do
  case "$arg" in
    --smoke|--no-callgrind) bench_args+=("$arg") ;;
    *) die "bench: unknown argument '$arg' (--smoke, --no-callgrind)" ;;
  esac
done

# The default build/ is a debug-optimised one; benchmarks get their own directory unless
# --builddir names another.
[ "$builddir" = build ] && [ -z "$sanitize" ] && builddir=build-bench
[ -n "$sanitize" ] && say "warning: benchmarking a sanitizer build; the figures are not the driver's"

# valgrind gives the instruction counts; without it run.py reports time only. The mlx5
# provider (ibverbs-providers) is the libmlx5 that rnicdv's post path is compared with, run on
# the simulated HCAs through the uverbs shim.
# libucx-dev: UCX's uct_ep_put_short measured beside rnicdv's post (post_write_ucx).
ensure_pkgs "${build_pkgs[@]}" python3 valgrind ibverbs-providers libucx-dev
configure -Dbuildtype=release -Db_ndebug=true -Ducx=enabled
# A build directory configured before libucx-dev was installed looks again.
meson configure "$builddir" -Ducx=enabled >/dev/null
say "building the benchmarks in $builddir"
bench_targets=(tools/bench/rnicdv-bench-driver tools/bench/rnicdv-bench-fabric
               tools/bench/rnicdv-bench-sim-idle tools/bench/rnicdv-bench-libmlx5 tools/bench/rnicdv-bench-cm
               tools/bench/rnicdv-bench-pacer tools/bench/rnicdv-bench-fanout
               hw/uverbs/librnicdv-uverbs.so tools/rnicperf/rnicperf)
ninja -C "$builddir" "${bench_targets[@]}" >/dev/null || ninja -C "$builddir" "${bench_targets[@]}"
say "running the benchmark suite"
exec python3 "$top/tools/bench/run.py" --builddir "$builddir" "${bench_args[@]}"
