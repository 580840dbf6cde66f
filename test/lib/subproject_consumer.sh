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
cat >"$work/src/main.cc" <<'CC'
#include <cstdio>
#include <rnicdv/rnicdv.h>
int main() {
  auto dev = rnicdv::Device::open("sim0");
  if (!dev) { std::fprintf(stderr, "%s\n", dev.status().message().c_str()); return 1; }
  auto pd = dev.value().alloc_pd();
  std::printf("opened %s (%s), pd %s\n", dev.value().name().c_str(),
              dev.value().info().kind.c_str(), pd ? "ok" : "failed");
  return pd ? 0 : 1;
}
CC
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
