#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Debian's Open MPI, unmodified, over UCX on the simulated HCA: mpirun starts two ranks of
# PINGPONG (test/verbs/mpi_pingpong.cc), each with librnicdv-uverbs.so preloaded and its own
# simulated HCA on the UDP wire, with Open MPI's UCX messaging layer (pml ucx) and UCX held to
# TL (an RC transport) and AUX (its UD sibling, which carries the wire-up) on rnicsim0:1, so
# that neither shared memory nor TCP can carry a message. Passes when
#   - mpirun exits 0 and rank 0 reports every size's round trips checked;
#   - UCX's own account of each rank's endpoint to the other puts the tag lane on
#     TL/rnicsim0:1;
#   - each rank's simulated HCA sent, in RC frames to the other rank's HCA (its capture,
#     RNICDV_PCAP, read by roce_sent.py), at least the payload bytes the rank's messages
#     hold: ROUNDS times the sum of the sizes.
#
#   run_mpi.sh SHIM PINGPONG TL AUX ROUNDS SIZE...
set -u
shim=$1 pingpong=$2 tl=$3 aux=$4 rounds=$5
shift 5
sizes=("$@")
here=$(dirname "$0")
if ! command -v mpirun >/dev/null; then
  echo "mpirun not found (Debian package openmpi-bin)" >&2
  exit 77
fi
if [ ! -x "$pingpong" ]; then
  echo "$pingpong was not built: Open MPI's development files (libopenmpi-dev) were missing when the build was configured" >&2
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

as_root=()
[ "$(id -u)" -eq 0 ] && as_root=(--allow-run-as-root)
# Only the ranks get the shim (-x), not mpirun and its helpers. UCX_LOG_LEVEL=info makes UCP
# print each endpoint's lanes ("ep_cfg[N]: tag(TL/DEVICE) ..."). %p: one capture per rank.
# --bind-to none: two ranks on a busy two-core machine; --mca osc ^ucx: the program does no
# one-sided communication, whose UCX component would open a second UCX context per rank.
export RNICDV_UVERBS_DEVICES=1 RNICDV_SIM_WIRE=udp RNICDV_PCAP=$work/rank-%p.pcap
export UCX_TLS=$tl,$aux UCX_NET_DEVICES=rnicsim0:1 UCX_LOG_LEVEL=info
timeout 120 mpirun -np 2 --oversubscribe "${as_root[@]}" --bind-to none \
  --mca pml ucx --mca btl self --mca osc ^ucx \
  -x LD_PRELOAD="$shim" -x RNICDV_UVERBS_DEVICES -x RNICDV_SIM_WIRE -x RNICDV_PCAP -x UCX_TLS \
  -x UCX_NET_DEVICES -x UCX_LOG_LEVEL \
  "$pingpong" "$rounds" "${sizes[@]}" >"$work/out" 2>&1
rc=$?
cat "$work/out"
status=0
[ $rc -eq 0 ] || { echo "mpirun: exit $rc" >&2; status=1; }
for size in "${sizes[@]}"; do
  grep -Eq "^mpi_pingpong: $size bytes: $rounds round trips checked" "$work/out" ||
    { echo "rank 0 did not report its $size-byte round trips" >&2; status=1; }
done
tag_lanes=$(grep -Ec "ep_cfg\[[0-9]+\]: tag\($tl/rnicsim0:1\)" "$work/out")
[ "$tag_lanes" -ge 2 ] ||
  { echo "UCX did not put both ranks' tag lanes on $tl/rnicsim0:1 ($tag_lanes found)" >&2; status=1; }

# What each rank's HCA sent.
expected=0
for size in "${sizes[@]}"; do expected=$((expected + rounds * size)); done
mapfile -t pcaps < <(ls "$work"/rank-*.pcap 2>/dev/null)
if [ ${#pcaps[@]} -ne 2 ]; then
  echo "expected one capture per rank, found ${#pcaps[@]}" >&2
  exit 1
fi
python3 - "$expected" "$here/roce_sent.py" "${pcaps[@]}" <<'PY' || status=1
import json, subprocess, sys
expected, tool, pcaps = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
sent = [json.loads(subprocess.run([sys.executable, tool, p], check=True, capture_output=True,
                                  text=True).stdout) for p in pcaps]
ok = True
for i, s in enumerate(sent):
    other = sent[1 - i]["sources"]
    print(f"rank HCA {s['sources']}: {s['rc_frames']} RC frames to {s['rc_destinations']}, "
          f"{s['rc_payload_bytes']} RC payload bytes (the messages hold {expected}), "
          f"{s['ud_frames']} UD frames, {s['other']} other")
    if len(s["sources"]) != 1 or s["rc_destinations"] != other:
        print("FAIL: RC frames not between the two ranks' HCAs", file=sys.stderr)
        ok = False
    if s["rc_payload_bytes"] < expected:
        print("FAIL: fewer RC payload bytes than the messages hold", file=sys.stderr)
        ok = False
sys.exit(0 if ok else 1)
PY
exit $status
