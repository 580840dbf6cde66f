#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `tools/dev verbs -- CMD` runs CMD where the user stands, with the shim preloaded: a program
# given by a relative path is found, and the files it writes land in the user's directory.
#
#   check_dev_verbs_cwd.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
top=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/app.sh" <<'APP'
#!/bin/sh
pwd > where.txt
echo "$LD_PRELOAD" >> where.txt
APP
chmod +x "$work/app.sh"
cd "$work"
"$top/tools/dev" --builddir="$build" verbs -- ./app.sh >/dev/null 2>"$work/err" || {
  echo "tools/dev verbs -- ./app.sh failed:" >&2
  cat "$work/err" >&2
  exit 1
}
[ -f "$work/where.txt" ] || { echo "the command's output did not land in $work" >&2; exit 1; }
[ "$(sed -n 1p "$work/where.txt")" = "$work" ] ||
  { echo "the command ran in $(sed -n 1p "$work/where.txt"), not $work" >&2; exit 1; }
case "$(sed -n 2p "$work/where.txt")" in
  */hw/uverbs/librnicdv-uverbs.so*) ;;
  *) echo "the shim was not preloaded: $(sed -n 2p "$work/where.txt")" >&2; exit 1 ;;
esac
