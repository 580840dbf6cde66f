# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the run_*.sh scripts of this directory.
#
# wait_listening PORT PID: waits (up to 10 s) until something listens on TCP port PORT, without
# connecting to it (perftest's and ibverbs-utils' servers take exactly one connection, and
# their clients do not retry), or until process PID has exited.
wait_listening() {
  local port=$1 pid=$2 _
  for _ in $(seq 1 200); do
    ss -Htln "sport = :$port" | grep -q . && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
