#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rnicdv as a Meson subproject: a project with subprojects/rnicdv (this source tree) gets the
# driver with dependency('rnicdv') (meson.override_dependency), links it alone, and opens
# sim0, whose library the subproject build puts beside librnicdv. Built without optimisation,
# tests or tools: only what a consumer compiles.
#
#   subproject_consumer.sh SOURCEDIR
set -eu
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/subprojects"
ln -s "$src" "$work/src/subprojects/rnicdv"
cp "$(dirname "$0")/consumer_main.cc" "$work/src/main.cc"
cat >"$work/src/meson.build" <<'MB'
project('consumer', 'cpp', default_options: ['cpp_std=c++20'])
executable('consumer', 'main.cc', dependencies: dependency('rnicdv'))
MB
meson setup "$work/build" "$work/src" --buildtype=plain -Drnicdv:tests=disabled \
  -Drnicdv:tools=disabled -Drnicdv:dpdk=disabled >/dev/null
# The consumer and the simulator it opens on demand; nothing else of the subproject.
sim=$(ninja -C "$work/build" -t targets all |
      grep -oE '^subprojects/rnicdv/librnicdv-sim\.so(\.[0-9]+)*:' | tr -d : | head -1)
[ -n "$sim" ] || { echo "the subproject has no librnicdv-sim target" >&2; exit 1; }
ninja -C "$work/build" consumer "$sim" >/dev/null
if readelf -d "$work/build/consumer" | grep -q 'librnicdv-sim'; then
  echo "the consumer links the simulator" >&2
  exit 1
fi
out=$("$work/build/consumer")
echo "== subproject consumer: $out"
