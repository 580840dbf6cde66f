#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# External programs build against an installed copy, as users build them: `meson install
# --destdir` into a temporary tree, then a Meson project with dependency('rnicdv') and a CMake
# project with pkg_check_modules(... rnicdv), each linking the driver alone and opening sim0
# (the simulator comes from beside the installed librnicdv, on demand).
#
#   consumers.sh BUILDDIR
set -eu
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
meson install -C "$build" --destdir "$root" --no-rebuild --quiet >/dev/null
pcdir=$(dirname "$(find "$root" -name rnicdv.pc | head -1)")
[ -n "$pcdir" ] || { echo "no rnicdv.pc installed" >&2; exit 1; }
libdir=$(dirname "$(find "$root" -name 'librnicdv.so' | head -1)")
# The .pc files name the configured prefix; point theirs into the tree (PKG_CONFIG_SYSROOT_DIR
# would also move rdma-core's paths, which are the system's).
mkdir -p "$work/pc"
for pc in "$pcdir"/rnicdv*.pc; do
  sed "s|^prefix=|prefix=$root|" "$pc" >"$work/pc/$(basename "$pc")"
done
export PKG_CONFIG_PATH=$work/pc
echo "== pkg-config: rnicdv $(pkg-config --modversion rnicdv): $(pkg-config --cflags --libs rnicdv)"
pkg-config --exists rnicdv-sim
# What the installed headers need and nothing else: no DPDK flags or requirements (they used
# to reach every consumer: -include rte_config.h, -march, RTE_ macros, Requires.private).
for what in "--cflags rnicdv" "--cflags rnicdv-sim" "--print-requires-private rnicdv" \
            "--print-requires-private rnicdv-sim"; do
  if pkg-config $what | grep -Eq 'rte_|dpdk|-march|-include'; then
    echo "pkg-config $what: $(pkg-config $what): DPDK's flags reach the consumer" >&2
    exit 1
  fi
done

mkdir -p "$work/src"
cp "$(dirname "$0")/consumer_main.cc" "$work/src/main.cc"
cat >"$work/src/meson.build" <<'MB'
project('consumer', 'cpp', default_options: ['cpp_std=c++20'])
executable('consumer', 'main.cc', dependencies: dependency('rnicdv'))
MB
cat >"$work/src/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(consumer CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(PkgConfig REQUIRED)
pkg_check_modules(RNICDV REQUIRED IMPORTED_TARGET rnicdv)
add_executable(consumer main.cc)
target_link_libraries(consumer PkgConfig::RNICDV)
CM

# The consumer binds to librnicdv by its soname, and to the public version nodes only
# (docs/driver.md, "The ABI"); the simulator it opens on demand is found by its soname too.
check_binding() {
  local exe=$1 needed versions
  needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(librnicdv[^]]*\)\]/\1/p')
  if [ "$needed" != "$(readelf -d "$libdir/librnicdv.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')" ] ||
     [[ "$needed" != librnicdv.so.[0-9]* ]]; then
    echo "$exe needs '$needed', not librnicdv's soname" >&2
    return 1
  fi
  versions=$(nm -D --undefined-only --with-symbol-versions "$exe" | grep -o '@RNICDV[A-Z_]*[0-9.]*' | sort -u)
  echo "== $(basename "$(dirname "$exe")"): needs $needed, versions $(echo $versions)"
  if grep -qv '^@RNICDV_[0-9]*\.[0-9]*$' <<<"$versions"; then
    echo "$exe binds to a node other than the public ones: $versions" >&2
    return 1
  fi
}
[ -e "$libdir/$(readelf -d "$libdir/librnicdv.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p' |
      sed 's/librnicdv/librnicdv-sim/')" ] || { echo "no librnicdv-sim by the soname's number in $libdir" >&2; exit 1; }

status=0
meson setup "$work/meson-build" "$work/src" >/dev/null && ninja -C "$work/meson-build" >/dev/null
check_binding "$work/meson-build/consumer" || status=1
out=$(LD_LIBRARY_PATH=$libdir "$work/meson-build/consumer") || status=1
echo "== meson consumer: $out"
if command -v cmake >/dev/null; then
  cmake -S "$work/src" -B "$work/cmake-build" >/dev/null && cmake --build "$work/cmake-build" >/dev/null
  check_binding "$work/cmake-build/consumer" || status=1
  out=$(LD_LIBRARY_PATH=$libdir "$work/cmake-build/consumer") || status=1
  echo "== cmake consumer: $out"
else
  echo "cmake not found (Debian package cmake)" >&2
  status=1
fi
exit $status
