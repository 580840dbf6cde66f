#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# librnicdv exports exactly its stated ABI (docs/driver.md, "Libraries and symbols"):
# - the strong symbols of its public version nodes (RNICDV_<major>.<minor>) are those that the
#   committed baseline, abi/librnicdv.abi, records: one more is an export that nobody stated
#   (a pattern in drv/librnicdv.map.in that matches an internal), one fewer a broken promise;
#   weak symbols (template instantiations, vtables) vary with the compiler and are left to
#   the ABI check itself (tools/dev abi);
# - every export carries a public node or the private one, RNICDV_PRIVATE_<project version>;
# - known internals are not exported at all: the driver's cores beyond the calls of the inline
#   fast path, the backend table, Result<> and standard-library instantiations.
#
#   check_stated_abi.sh BUILDDIR SOURCEDIR PRIVATE_VERSION
set -u
build=$1
src=$2
priv=$3
lib=$build/librnicdv.so
baseline=$src/abi/librnicdv.abi
status=0
fail() { echo "$*" >&2; status=1; }
[ -f "$baseline" ] || { echo "no baseline $baseline" >&2; exit 1; }

# name@version of each defined, exported symbol; strong ones (T, D, B, R) only for the
# comparison with the baseline.
all=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '$2 != "A" { print $2, $3 }')
exported_public=$(awk '$1 ~ /^[TDBR]$/ && $2 ~ /@@RNICDV_[0-9]+\.[0-9]+$/ { sub("@@", "@", $2); print $2 }' \
                  <<<"$all" | sort -u)
# abidw's <elf-symbol name='...' version='...' ... binding='global-binding' .../>: the global
# (not weak) symbols of the public nodes that the baseline holds.
stated_public=$(grep -o "<elf-symbol [^>]*>" "$baseline" | grep "binding='global-binding'" |
                grep -E "version='RNICDV_[0-9]+\.[0-9]+'" |
                sed -E "s/.* name='([^']*)'.* version='([^']*)'.*/\1@\2/" | sort -u)
[ -n "$stated_public" ] || fail "$baseline states no symbol"

extra=$(comm -13 <(echo "$stated_public") <(echo "$exported_public"))
missing=$(comm -23 <(echo "$stated_public") <(echo "$exported_public"))
if [ -n "$extra" ]; then
  fail "exported in a public node but not in the stated ABI (abi/librnicdv.abi):"
  c++filt <<<"$extra" | sed 's/^/  /' >&2
fi
if [ -n "$missing" ]; then
  fail "stated in abi/librnicdv.abi but not exported:"
  c++filt <<<"$missing" | sed 's/^/  /' >&2
fi
echo "librnicdv: $(wc -l <<<"$exported_public") strong public symbols, as stated"

# Every export in a node of its own.
unversioned=$(awk '$2 !~ /@@RNICDV_([0-9]+\.[0-9]+|PRIVATE_'"${priv//./\\.}"')$/ { print $2 }' <<<"$all")
[ -z "$unversioned" ] || fail "exported outside RNICDV_<n>.<m> and RNICDV_PRIVATE_$priv:
$(c++filt <<<"$unversioned")"

# Internals that no node may hold (demangled prefixes).
demangled=$(nm -D --defined-only -C "$lib" | awk '$2 != "A"' | cut -d' ' -f3-)
for internal in 'rnicdv::detail::QpCore::reset_locked' 'rnicdv::detail::QpCore::modify' \
                'rnicdv::detail::CqCore::attach' 'rnicdv::detail::DeviceCore' \
                'rnicdv::detail::ChannelCore' 'rnicdv::detail::ConnectionCore' \
                'rnicdv::detail::register_' 'rnicdv::hw::sim_loader::' 'rnicdv::Result<' \
                'std::' '__gnu_cxx::'; do
  hits=$(awk -v p="$internal" 'index($0, p) == 1' <<<"$demangled")
  [ -z "$hits" ] || fail "internal exported ($internal):
$hits"
done
[ $status = 0 ] || echo "regenerate the baseline with tools/dev abi --update if the change is intended" >&2
exit $status
