# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the tests that run programs in a network namespace of their own.
#
#   make_netns NAME      creates namespace NAME with lo up, removed at exit; exits 77
#                        (skipped, the reason on stdout) without root, iproute2 or namespaces
#   netns_add6 NS DEV ADDRESS...
#                        adds IPv6 addresses to DEV (no duplicate address detection, so all are
#                        usable at once); exits 77 where IPv6 is disabled
skip() {
  echo "skipped: $1"
  exit 77
}

make_netns() {
  [ "$(id -u)" = 0 ] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "the ip command (iproute2) is not available"
  ip netns add "$1" 2>/dev/null || skip "cannot create network namespaces"
  # shellcheck disable=SC2064 # the name is fixed now
  trap "ip netns del '$1' 2>/dev/null" EXIT
  ip -n "$1" link set lo up || exit 1
}

netns_add6() {
  local ns=$1 dev=$2 address
  shift 2
  for address in "$@"; do
    ip -n "$ns" -6 addr add "$address" dev "$dev" nodad ||
      skip "cannot add IPv6 addresses (is IPv6 disabled?)"
  done
}
