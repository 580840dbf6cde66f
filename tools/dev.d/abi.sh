# SPDX-License-Identifier: BSD-3-Clause
# `tools/dev abi [--update]`, sourced by tools/dev (ensure_pkgs, say, die and $builddir come
# from there; the build directory is build-abi/ unless --builddir names another).
#
# librnicdv's ABI check (docs/driver.md, "Libraries and symbols"): builds librnicdv alone with
# debug information, describes its ABI with libabigail's abidw (only the types of the
# installed headers count, and only the public version nodes: abi/librnicdv.suppr) and
# compares that with the committed baseline, abi/librnicdv.abi, using abidiff. Any difference
# fails, with abidiff's report: an incompatible change (a symbol gone, a public struct's
# layout changed) and an addition alike, since an addition has to be recorded in a new
# version node and in the baseline. --update writes the baseline instead: the one command to
# run after an intended change of the ABI (and after a change of the soname or a new node).

abi_update=0
while [ $# -gt 0 ]; do
  case "$1" in
    --update) abi_update=1; shift ;;
    *) die "abi: unknown argument '$1' (--update)" ;;
  esac
done
[ "$builddir" = build ] && builddir=build-abi

ensure_pkgs "${build_pkgs[@]}" abigail-tools
baseline=$top/abi/librnicdv.abi
suppressions=$top/abi/librnicdv.suppr

if [ ! -f "$builddir/build.ninja" ]; then
  say "configuring $builddir (librnicdv with debug information)"
  # The library alone, as the default build makes it (debugoptimized: -O2 -g).
  meson setup "$builddir" --buildtype=debugoptimized -Dtests=disabled -Dtools=disabled \
    -Ddpdk=disabled >/dev/null
fi
say "building librnicdv in $builddir"
meson compile -C "$builddir" rnicdv:shared_library >/dev/null ||
  meson compile -C "$builddir" rnicdv:shared_library

# The installed headers: the ABI is what they declare; types of private headers do not count.
abi_tmp=$(mktemp -d)
trap 'rm -rf "$abi_tmp"' EXIT
meson install -C "$builddir" --destdir "$abi_tmp/root" --no-rebuild --quiet --tags devel \
  >/dev/null 2>&1 || die "abi: meson install of the headers failed"
headers=$(find "$abi_tmp/root" -type d -path '*/include/rnicdv' -print -quit)
[ -n "$headers" ] || die "abi: no installed headers under $abi_tmp/root"
lib=$(readlink -f "$builddir/librnicdv.so")

say "abidw $lib"
# No source locations and hashed type ids: the baseline changes only when the ABI does.
abidw --headers-dir "$(dirname "$headers")" --drop-private-types --suppressions "$suppressions" \
  --no-show-locs --no-corpus-path --no-comp-dir-path --type-id-style hash \
  --out-file "$abi_tmp/librnicdv.abi" "$lib"

if [ $abi_update = 1 ]; then
  mkdir -p "$(dirname "$baseline")"
  cp "$abi_tmp/librnicdv.abi" "$baseline"
  say "wrote $baseline ($(grep -c '<elf-symbol ' "$baseline") exported symbols); commit it"
  exit 0
fi

[ -f "$baseline" ] || die "abi: no baseline $baseline (tools/dev abi --update writes it)"
say "abidiff abi/librnicdv.abi against the build"
abi_rc=0
abidiff --suppressions "$suppressions" --no-show-locs --harmless "$baseline" \
  "$abi_tmp/librnicdv.abi" || abi_rc=$?
if [ $abi_rc = 0 ]; then
  say "librnicdv's ABI matches abi/librnicdv.abi"
  exit 0
fi
# abidiff's exit status is a bit mask: 1 error, 2 usage, 4 a change, 8 an incompatible one.
if [ $((abi_rc & 3)) != 0 ]; then
  die "abi: abidiff failed (exit $abi_rc)"
elif [ $((abi_rc & 8)) != 0 ]; then
  say "librnicdv's ABI changed incompatibly (above): undo the change, or raise the soname"
  say "(rnicdv_abi_version's major number in meson.build) and run tools/dev abi --update"
else
  # abidiff leaves a changed type (a member added, moved or resized) to the reader.
  say "librnicdv's ABI changed (above). Added symbols: record them in a new version node of"
  say "drv/librnicdv.map.in and raise rnicdv_abi_version's minor number. A changed type of the"
  say "installed headers: programs built against the old ones break, so raise the major number"
  say "(the soname). Then run tools/dev abi --update and commit abi/librnicdv.abi"
fi
exit 1
