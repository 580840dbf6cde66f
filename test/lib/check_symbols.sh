#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Each library exports its API through its version script (.map) and nothing else: every
# exported symbol carries one of the library's version nodes, and its name belongs to what
# that node promises. A standard-library instantiation, a helper outside the project's
# namespaces, or a symbol in the wrong node fails the test and is listed.
#
# librnicdv's public node is checked symbol by symbol against its stated ABI by
# check_stated_abi.sh (test stated_abi).
#
#   check_symbols.sh BUILDDIR PRIVATE_VERSION
set -u
build=$1
priv=$2
status=0
# check LIB NODE REGEX [NODE REGEX]...: the demangled names allowed in each node.
check() {
  local lib=$1
  shift
  local -A allowed=()
  while [ $# -gt 0 ]; do allowed[$1]=$2; shift 2; done
  [ -e "$build/$lib" ] || return 0
  local bad=0 total=0
  declare -A per=()
  while IFS= read -r line; do
    local node=${line##*@@} name=${line% *}
    name=${line#* * }            # drop address and type
    name=${name%@@*}
    total=$((total + 1))
    if [ "$node" = "$line" ] || [ -z "${allowed[$node]+x}" ]; then
      echo "$lib: not in a version node of its own: $line" >&2
      bad=1
      continue
    fi
    per[$node]=$(( ${per[$node]:-0} + 1 ))
    if ! grep -Eq -- "${allowed[$node]}" <<<"$name"; then
      echo "$lib: unintended export in $node: $name" >&2
      bad=1
    fi
  done < <(nm -D --defined-only --with-symbol-versions -C "$build/$lib" | grep -v ' A ')
  printf '%s: %d symbols;' "$lib" "$total"
  for n in "${!per[@]}"; do printf ' %s %d' "$n" "${per[$n]}"; done
  echo
  [ $bad = 0 ] || status=1
}
ns() { echo "^((vtable|typeinfo|typeinfo name|guard variable) for |void )?$1"; }
check librnicdv.so RNICDV_5.0 "$(ns 'rnicdv::')" \
                   "RNICDV_PRIVATE_$priv" "$(ns 'rnicdv::')"
check librnicdv-sim.so "RNICDV_SIM_PRIVATE_$priv" "^rnicdv_sim_provider$|$(ns 'rnicdv::sim::')"
check librnicdv-dpdk.so "RNICDV_DPDK_PRIVATE_$priv" \
  '^rnicdv_dpdk_provider$|^rnicdv::sim::(plan_eal_args|parse_dpdk_args|split_dpdk_args|mac_string)'
exit $status
