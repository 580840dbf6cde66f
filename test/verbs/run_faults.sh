#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Unmodified programs on simulated HCAs under a fault specification (RNICDV_SIM_FAULTS), each
# process writing a fault log of its own (log=DIR/faults.%p.jsonl). write_bw, rping_rtu and
# ucx_reorder run through the test script of their kind (run_perftest.sh, run_rdmacm.sh,
# run_ucx.sh) with the specification in both processes: the program must complete as without
# faults, and the logs must show the faults injected and what they cost (every log ends with
# a line of kind "end" that sums the counters of the process's devices: faults/schedule.h).
# rping_reject and rping_dreq start rping's server and client here: the CM faults change how
# the run ends.
#
#   run_faults.sh SHIM PORT write_bw     ib_write_bw (RC) under drop p=0.02: its report line;
#                                        frames dropped, and retransmissions counted
#   run_faults.sh SHIM PORT rping_rtu    rping whose first two RTUs are dropped: the passive
#                                        side's REP retries bring the RTU again, rping runs its
#                                        -C count
#   run_faults.sh SHIM PORT rping_reject rping against a passive side that rejects every REQ
#                                        (cm-reject reason=27): REJECTED with status 27
#   run_faults.sh SHIM PORT rping_dreq   rping whose server's device sends a DREQ at 3 s
#                                        (cm-dreq): the client sees DISCONNECTED, both end
#   run_faults.sh SHIM PORT ucx_reorder  ucx_perftest (rc_mlx5 put_bw) under reorder p=0.05
set -u
here=$(dirname "$0")
shim=$1 port=$2 what=$3
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
seed=7
unset RNICDV_SIM_SEED

# Sums field $1 of the "end" lines of every log.
sum_end() {
  cat "$logs"/faults.*.jsonl 2>/dev/null | grep '"kind":"end"' |
    grep -o "\"$1\":[0-9]*" | awk -F: '{ s += $2 } END { print s + 0 }'
}
# Counts the lines of every log that contain all the given strings.
count_lines() {
  local pattern=$1
  shift
  local lines
  lines=$(cat "$logs"/faults.*.jsonl 2>/dev/null | grep -F -- "$pattern")
  for p in "$@"; do lines=$(printf '%s\n' "$lines" | grep -F -- "$p"); done
  printf '%s\n' "$lines" | grep -c . || true
}
# Every process's log ends with its "end" line (a client started again has a log too), but
# those of the servers run_rdmacm.sh killed to start them again ($logs/run.out names them).
every_log_ends() {
  local f n=0 killed
  killed=$(sed -n 's/^===== servers killed to start again: pids//p' "$logs/run.out" 2>/dev/null)
  for f in "$logs"/faults.*.jsonl; do
    [ -e "$f" ] || continue
    local pid=${f##*/faults.}
    pid=${pid%.jsonl}
    case " $killed " in *" $pid "*) continue ;; esac
    tail -n 1 "$f" | grep -qF '"kind":"end"' || return 1
    n=$((n + 1))
  done
  [ $n -ge 2 ]
}
show_logs() {
  for f in "$logs"/faults.*.jsonl; do
    [ -e "$f" ] || continue
    local n
    n=$(wc -l <"$f")
    if [ "$n" -le 10 ]; then
      echo "===== $(basename "$f"): $n lines"
      cat "$f"
    else
      echo "===== $(basename "$f"): $n lines, the first 3 and the last 2"
      head -n 3 "$f"
      tail -n 2 "$f"
    fi
  done
}
fail() { echo "run_faults.sh $what: $*" >&2; show_logs; exit 1; }

case $what in
  write_bw)
    export RNICDV_SIM_FAULTS="seed=$seed; log=$logs/faults.%p.jsonl; drop p=0.02"
    "$here/run_perftest.sh" "$shim" "$port" ib_write_bw -s 4096 -n 400
    rc=$?
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || fail "ib_write_bw failed under $RNICDV_SIM_FAULTS"
    every_log_ends || fail "a process's log has no end line"
    data_drops=$(count_lines '"fault":"drop"' '"op":"write"')
    drops=$(count_lines '"fault":"drop"')
    retransmits=$(sum_end retransmits)
    echo "frames dropped: $drops (RDMA WRITE requests: $data_drops); retransmissions: $retransmits"
    [ "$data_drops" -gt 0 ] || fail "no RDMA WRITE request was dropped"
    [ "$retransmits" -gt 0 ] || fail "WRITE requests were dropped but nothing was retransmitted"
    ;;
  rping_rtu)
    # The active side's first two RTUs are lost. librdmacm moves the passive QP to RTS before
    # it sends the REP (rdma_accept), so the first SEND raises no COMM_EST there (that is
    # raised in RTR only), and rping does not call rdma_notify: the passive side's REP timer
    # resends the REP, the active side answers the duplicate with the RTU again (the second
    # RTU, lost too), and the third completes the connection, within the REP's deadline.
    export RNICDV_SIM_FAULTS="seed=$seed; log=$logs/faults.%p.jsonl; drop mad=rtu every=1 count=2"
    "$here/run_rdmacm.sh" "$shim" "$port" 'ping data: rdma-ping-19:' \
      -- rping -s -a @S@ -p @P@ -- rping -c -a @S@ -p @P@ -C 20 -v | tee "$logs/run.out"
    rc=${PIPESTATUS[0]}
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || fail "rping failed under $RNICDV_SIM_FAULTS"
    rtu_drops=$(count_lines '"fault":"drop"' '"mad":"rtu"')
    echo "RTUs dropped: $rtu_drops; COMM_EST raised: $(sum_end comm_est_raised)"
    # A second RTU is sent only in answer to a retransmitted REP.
    [ "$rtu_drops" -eq 2 ] || fail "expected the first 2 RTUs dropped, the second answering a repeated REP"
    every_log_ends || fail "a process's log has no end line"
    ;;
  rping_reject)
    # The passive side answers every REQ with REJ 27 (insufficient responder resources): the
    # client's rdma_cm reports REJECTED with that status, as for a genuine REJ. The server is
    # never offered a request; it is stopped at the end.
    command -v rping >/dev/null || { echo "rping not found (Debian package rdmacm-utils)" >&2; exit 77; }
    srv=127.0.$((port % 200 + 20)).1 cli=127.0.$((port % 200 + 20)).2
    export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
    export RNICDV_SIM_FAULTS="seed=$seed; log=$logs/faults.%p.jsonl; cm-reject reason=27 every=1"
    timeout 120 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR=$srv rping -s -a $srv -p "$port" \
      >"$logs/server.out" 2>&1 &
    server_pid=$!
    trap 'kill $server_pid 2>/dev/null; rm -rf "$logs"' EXIT
    seen=0
    for attempt in $(seq 1 100); do
      timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR=$cli rping -c -a $srv -p "$port" -C 1 \
        >"$logs/client.out" 2>&1
      if grep -q 'RDMA_CM_EVENT_REJECTED, error 27$' "$logs/client.out"; then
        seen=1
        break
      fi
      # Not up yet: no HCA at the address, or nothing listening (REJ 8).
      grep -Eq 'ADDR_ERROR|REJECTED, error 8$' "$logs/client.out" || break
      sleep 0.1
    done
    echo "===== client (attempt $attempt)"; cat "$logs/client.out"
    kill $server_pid 2>/dev/null
    wait $server_pid 2>/dev/null
    echo "===== server"; cat "$logs/server.out"
    [ $seen -eq 1 ] || fail "the client did not see REJECTED with status 27"
    rejects=$(count_lines '"fault":"reject"' '"reason":27' "\"peer\":\"$cli\"")
    echo "REQs rejected: $rejects"
    [ "$rejects" -ge 1 ] || fail "no reject in the server's log"
    ;;
  rping_dreq)
    # 3 s after it started, the server's device sends a DREQ on its connection as if rping
    # had disconnected: the client, pinging without end, sees DISCONNECTED (rping's state 10)
    # and stops; the server's own connection ends with the DREP, and both exit by themselves.
    command -v rping >/dev/null || { echo "rping not found (Debian package rdmacm-utils)" >&2; exit 77; }
    srv=127.0.$((port % 200 + 20)).1 cli=127.0.$((port % 200 + 20)).2
    export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp
    timeout 120 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR=$srv \
      RNICDV_SIM_FAULTS="seed=$seed; log=$logs/faults.%p.jsonl; cm-dreq at=3s" \
      rping -s -a $srv -p "$port" >"$logs/server.out" 2>&1 &
    server_pid=$!
    trap 'kill $server_pid 2>/dev/null; rm -rf "$logs"' EXIT
    count=200000
    for attempt in $(seq 1 100); do
      timeout 60 env LD_PRELOAD="$shim" RNICDV_SIM_ADDR=$cli \
        RNICDV_SIM_FAULTS= \
        rping -c -a $srv -p "$port" -C $count -v >"$logs/client.out" 2>&1
      client_rc=$?
      grep -Eq 'ADDR_ERROR|REJECTED, error 8$' "$logs/client.out" || break
      sleep 0.1
    done
    wait $server_pid
    server_rc=$?
    pings=$(grep -c '^ping data: ' "$logs/client.out")
    grep -v '^ping data: ' "$logs/client.out" | sed 's/^/client: /'
    grep -o 'client DISCONNECT EVENT\.\.\.' "$logs/client.out" | sed 's/^/client: /'
    sed 's/^/server: /' "$logs/server.out"
    echo "client: exit $client_rc after $pings pings (attempt $attempt); server: exit $server_rc"
    [ $client_rc -ne 124 ] && [ "$pings" -gt 0 ] && [ "$pings" -lt $count ] ||
      fail "the client did not stop after some pings"
    # rping's CM thread prints "client DISCONNECT EVENT..." when DISCONNECTED reaches it
    # (stderr, so it may land inside a buffered "ping data" line of stdout). Its ping loop
    # then usually stops with "state 10"; but the loop stores RDMA_READ_ADV (6) at the top of
    # each ping without a lock, so an event that lands just before that store is overwritten
    # and the loop reports "state 6": a race inside rping (rping_test_client), like the
    # server's below. The event handler's own line is what shows the client saw it.
    grep -q 'client DISCONNECT EVENT' "$logs/client.out" || fail "the client did not see DISCONNECTED"
    grep -Eq 'state (10|6)$' "$logs/client.out" || fail "the client's loop did not stop at the DISCONNECTED event"
    # The server sees the disconnection and ends by itself. Its exit status is rping's
    # choice: 0 when the DISCONNECTED event finds its loop waiting, 255 ("wait for
    # RDMA_READ_ADV state 8") when a receive completed in the same moment moves its state on
    # first, which is a race between rping's own CM and CQ threads.
    [ $server_rc -ne 124 ] || fail "the server did not end by itself"
    grep -q 'server DISCONNECT EVENT' "$logs/server.out" || fail "the server did not see DISCONNECTED"
    [ "$(count_lines '"fault":"dreq"' '"outcome":"sent"' "\"peer\":\"$cli:")" -eq 1 ] ||
      fail "the server's log has no DREQ sent to the client"
    ;;
  ucx_reorder)
    export RNICDV_SIM_FAULTS="seed=$seed; log=$logs/faults.%p.jsonl; reorder p=0.05"
    "$here/run_ucx.sh" "$shim" perftest "$port" rc_mlx5 put_bw -n 2000 -s 64
    rc=$?
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || fail "ucx_perftest failed under $RNICDV_SIM_FAULTS"
    reorders=$(count_lines '"fault":"reorder"')
    echo "frames reordered: $reorders"
    [ "$reorders" -gt 0 ] || fail "no frame was reordered"
    ;;
  *) echo "run_faults.sh: write_bw, rping_rtu, rping_reject, rping_dreq or ucx_reorder" >&2; exit 2 ;;
esac
show_logs
exit 0
