#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Runs the rnicdv benchmark suite and writes bench.json (docs/performance.md).

    run.py --builddir DIR [--smoke] [--no-callgrind] [--uverbs-shim SO] [--out FILE]

Runs, from DIR: tools/bench/rnicdv-bench-driver (post path, flush, completions, memory, many
QPs on one CQ), tools/bench/rnicdv-bench-cm (connection set-up through the CM),
tools/bench/rnicdv-bench-libmlx5 with the uverbs shim (SO, default
DIR/hw/uverbs/librnicdv-uverbs.so) preloaded (rnicdv's post path beside the unmodified
libmlx5's), both again under callgrind for instructions per operation (when valgrind is
installed), tools/rnicperf/rnicperf for the simulated fabric and the first reply on fresh
connections (--first-reply), tools/bench/rnicdv-bench-fabric for the fabric baselines,
tools/bench/rnicdv-bench-sim-idle for the simulated HCA after idle periods,
tools/bench/rnicdv-bench-pacer for the simulated HCA's packet pacer in real time, and
tools/bench/rnicdv-bench-fanout for UD multicast to 4 subscribers beside unicast fan-out.
Writes a JSON array of records {"name", "value", "unit", "baseline_name", "baseline_value",
"ratio"} (ratio = value / baseline_value, lower is better; for the pacer's rates, 1 is exact;
for a rate in msg/s, higher is better), checks
it against that schema and the list of expected records, and prints a table. --smoke runs
every case for a few iterations only: a test of the tool, whose figures mean nothing. Exit
status 1 on any failure, with the reason on stderr.
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

FIELDS = ("name", "value", "unit", "baseline_name", "baseline_value", "ratio")

POST_CASES = ["post_write_1sge", "post_send_inline_64", "post_batch_32", "post_read",
              "post_atomic_fa"]
TYPED_CASES = ["post_write_typed", "post_send_inline_64_typed", "post_batch_32_typed",
               "post_read_typed", "post_atomic_fa_typed"]
# The same WRITE on a UC QP, through post_send and the typed call.
UC_CASES = ["post_write_uc", "post_write_uc_typed"]
FLUSH_CASES = [f"flush_{k}_{n}" for k in ("in_place", "shadow") for n in (1, 64, 4096)]
POLL_CASES = ["poll_1", "poll_batch_16"]
LEAN_POLL_CASES = ["poll_1_lean", "poll_batch_16_lean"]
MEMORY_CASES = ["memory_per_qp_128x128", "memory_per_cq_256", "memory_per_device"]
# Many QPs (rnicdv-bench-driver's scale group) and many connections (rnicdv-bench-cm).
SCALE_CASES = ["poll_cqe_64qp", "poll_cqe_1024qp", "memory_per_connected_qp_1024"]
# Connection set-up at 2000 connections beside 100 (each pipelined, 32 in flight): what a
# connection costs as the device holds more of them.
CM_CASES = ["cm_setup_us_per_connection_2000", "cm_connections_per_sec_2000",
            "cm_setup_p50_us_2000", "cm_setup_p99_us_2000", "cm_setup_us_per_connection_100"]
FABRIC_CASES = ["fabric_inproc_write_lat_8", "fabric_udp_write_lat_8",
                "fabric_inproc_write_rate_64_pl32", "fabric_udp_write_rate_64_pl32",
                "fabric_inproc_write_lat_8_pinned", "fabric_inproc_write_rate_64_pl32_pinned"]
# The simulated HCA after idle periods (rnicdv-bench-sim-idle) and early posting's value on a
# fresh connection (rnicperf --first-reply).
SIM_IDLE_CASES = [f"sim_doorbell_to_execution_idle{w}_{q}" for w in ("", "_libmlx5")
                  for q in ("p50", "p99")] + ["sim_idle_cpu_per_device"]
FIRST_REPLY_CASES = ["first_reply_early_vs_queue_rtu", "first_reply_early_vs_queue_comm_est",
                     "first_reply_early_vs_queue_rtu_cm_poll_1ms",
                     "first_reply_early_vs_queue_comm_est_cm_poll_1ms"]
# The simulated HCA's packet pacer in real time (rnicdv-bench-pacer): the rate a stream of
# WRITEs achieves under each limit (baseline: the limit), with none, the highest limit beside
# none, and the bytes a 64 KiB burst allowance lets leave at once (baseline: the allowance).
PACER_LIMITS = {"10M": 10, "100M": 100, "1G": 1000, "10G": 10000}
PACER_CASES = (["sim_pacer_rate_unpaced"] + [f"sim_pacer_rate_{k}" for k in PACER_LIMITS]
               + ["sim_pacer_rate_10G_vs_unpaced", "sim_pacer_burst_64K_at_10M"])
# One publisher to 4 subscribers over UD (rnicdv-bench-fanout): multicast, whose baseline is
# the same fan-out by unicast (one datagram per subscriber). For the rate, higher is better.
FANOUT_CASES = ["fanout_mcast_4_lat_p50", "fanout_mcast_4_lat_p99", "fanout_mcast_4_msgs_per_sec"]
COUNTED_CASES = (POST_CASES + TYPED_CASES + UC_CASES + FLUSH_CASES + POLL_CASES +
                 LEAN_POLL_CASES)
# rnicdv against libmlx5 (rnicdv-bench-libmlx5): each is printed after the rnicdv case it
# repeats, and its baseline is libmlx5's figure.
LIBMLX5_CASES = {"post_write_1sge_libmlx5": "post_write_1sge",
                 "post_write_typed_libmlx5": "post_write_typed"}
LIBMLX5_BASELINES = {"post_write_1sge_libmlx5": "libmlx5_write_1sge",
                     "post_write_typed_libmlx5": "libmlx5_write_1sge"}
# UCX's uct_ep_put_short in the same program (built with the `ucx` feature): its baseline is
# rnicdv's post_write_1sge loop, repeated there.
UCX_CASES = {"post_write_ucx": "post_write_1sge"}
UCX_BASELINES = {"post_write_ucx": "rnicdv_write_1sge"}


def built_with_ucx(builddir):
    """Whether meson found UCX for this build (the `ucx` feature)."""
    try:
        with open(os.path.join(builddir, "meson-info", "intro-dependencies.json")) as f:
            return any(d.get("name") == "ucx-uct" for d in json.load(f))
    except (OSError, ValueError):
        return False

# The targets (ratio at most this); cases not listed have none.
TARGETS = {**{c: 1.3 for c in POST_CASES + TYPED_CASES + UC_CASES},
           **{c + "_instr": 1.3 for c in POST_CASES + TYPED_CASES + UC_CASES},
           "poll_1_lean": 2.0, "poll_1_lean_instr": 2.0,
           "poll_batch_16_lean": 1.5, "poll_batch_16_lean_instr": 1.5,
           "post_write_1sge_libmlx5_instr": 0.6, "post_write_typed_libmlx5_instr": 0.3,
           **{f"flush_in_place_{n}{s}": 2.0 for n in (1, 64, 4096) for s in ("", "_instr")},
           **{f"flush_shadow_{n}{s}": 1.3 for n in (1, 64, 4096) for s in ("", "_instr")},
           "fabric_inproc_write_lat_8": 1.5, "fabric_udp_write_lat_8": 1.5,
           "poll_cqe_64qp": 1.2, "poll_cqe_1024qp": 1.5,
           **{f"sim_doorbell_to_execution_idle{w}_p50": 1.5 for w in ("", "_libmlx5")},
           **{f"sim_doorbell_to_execution_idle{w}_p99": 3.0 for w in ("", "_libmlx5")},
           "sim_idle_cpu_per_device": 0.01,
           "cm_setup_us_per_connection_2000": 1.2,
           "first_reply_early_vs_queue_comm_est_cm_poll_1ms": 0.2}


class BenchError(Exception):
    pass


def say(msg):
    print(f"==> {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=600):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(cmd)}: no result after {timeout} s")
    if p.returncode != 0:
        raise BenchError(f"{' '.join(cmd)}: exit status {p.returncode}\n{p.stderr.strip()}")
    return p.stdout


def record(name, value, unit, baseline_name=None, baseline_value=None):
    has_base = baseline_name is not None and baseline_value
    return {"name": name, "value": value, "unit": unit,
            "baseline_name": baseline_name if has_base else None,
            "baseline_value": baseline_value if has_base else None,
            "ratio": value / baseline_value if has_base else None}


# ---- The driver's cases -------------------------------------------------------------------

def driver_records(builddir, smoke):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-driver")
    say("post path, flush, completions, memory, many QPs")
    raw = json.loads(run([exe] + (["--smoke"] if smoke else [])))
    # The ratio again from the printed figures, so that it is exactly value / baseline_value.
    return [record(r["name"], r["value"], r["unit"], r["baseline_name"], r["baseline_value"])
            for r in raw]


def callgrind_counts(cmd, env=None):
    """Instructions per operation of every counted region of one callgrind run of `cmd`
    (each region is one dump)."""
    with tempfile.TemporaryDirectory(prefix="rnicdv-cg-") as tmp:
        run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
             f"--callgrind-out-file={tmp}/cg.out"] + cmd, env=env, timeout=1800)
        per_op = {}
        for path in glob.glob(os.path.join(tmp, "cg.out*")):
            desc = total = None
            with open(path) as f:
                for line in f:
                    m = re.match(r"desc: Trigger: Client Request: (\S+) ops=(\d+)", line)
                    if m:
                        desc = (m.group(1), int(m.group(2)))
                    m = re.match(r"(?:summary|totals): (\d+)", line)
                    if m:
                        total = int(m.group(1))
            if desc and total is not None:
                per_op[desc[0]] = total / desc[1]
    return per_op


def instr_records(per_op, timed, names):
    """The `_instr` record of every timed record named in `names`."""
    out = []
    for r in timed:
        if r["name"] not in names:
            continue
        name, base = r["name"], r["baseline_name"]
        if name not in per_op or base not in per_op:
            raise BenchError(f"callgrind: no instruction count for {name} or {base}")
        unit = "instr/" + r["unit"].split("/", 1)[1]
        out.append(record(name + "_instr", per_op[name], unit, base + "_instr", per_op[base]))
    return out


def callgrind_records(builddir, smoke, timed):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-driver")
    say("instructions per operation (callgrind)")
    per_op = callgrind_counts([exe, "--callgrind", "--only=post", "--only=flush", "--only=poll"]
                              + (["--smoke"] if smoke else []))
    return instr_records(per_op, timed, COUNTED_CASES)


# ---- rnicdv beside the unmodified libmlx5 -------------------------------------------------

def libmlx5_env(shim):
    """The environment of rnicdv-bench-libmlx5: the shim preloaded, two simulated HCAs on an
    in-process wire (the devices are paused while posts are timed; the wire only carries the
    WRITEs that free libmlx5's SQ between repetitions), libmlx5 posting as rnicdv's QP does
    (no locks, an 8-byte doorbell)."""
    if not os.path.isfile(shim):
        raise BenchError(f"{shim}: no uverbs shim (build the uverbs_shim target)")
    env = dict(os.environ)
    for k in ("RNICDV_PCAP", "RNICDV_SIM_ADDR", "RNICDV_SIM_PROFILE", "SYSFS_PATH"):
        env.pop(k, None)
    env.update({"LD_PRELOAD": shim, "RNICDV_UVERBS_DEVICES": "2", "RNICDV_SIM_WIRE": "inproc",
                "MLX5_SINGLE_THREADED": "1", "MLX5_POST_SEND_PREFER_BF": "0"})
    # gcc's shared sanitizer runtime would otherwise insist on being first in the load order.
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"),
                                                 "verify_asan_link_order=0"]))
    return env


def libmlx5_records(builddir, shim, smoke):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-libmlx5")
    say("post path: rnicdv beside libmlx5 (uverbs shim)")
    raw = json.loads(run([exe] + (["--smoke"] if smoke else []), env=libmlx5_env(shim)))
    return [record(r["name"], r["value"], r["unit"], r["baseline_name"], r["baseline_value"])
            for r in raw]


def libmlx5_callgrind_records(builddir, shim, smoke, timed):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-libmlx5")
    say("instructions per operation, rnicdv beside libmlx5 (callgrind)")
    per_op = callgrind_counts([exe, "--callgrind"] + (["--smoke"] if smoke else []),
                              env=libmlx5_env(shim))
    return instr_records(per_op, timed, list(LIBMLX5_CASES) + list(UCX_CASES))


def place_libmlx5(records):
    """Moves each rnicdv-against-libmlx5 record (and its _instr) right after the rnicdv
    record it repeats, so that the table shows them together."""
    moved = {}
    for name, after in {**LIBMLX5_CASES, **UCX_CASES}.items():
        for suffix in ("", "_instr"):
            moved[name + suffix] = after + suffix
    rest = [r for r in records if r["name"] not in moved]
    out = []
    for r in rest:
        out.append(r)
        out += [m for m in records if moved.get(m["name"]) == r["name"]]
    placed = {r["name"] for r in out}
    return out + [r for r in records if r["name"] not in placed]


# ---- The simulated fabric -----------------------------------------------------------------

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rnicperf_result(path):
    with open(path) as f:
        doc = json.load(f)
    results = doc.get("results") or []
    if not results:
        raise BenchError(f"{path}: rnicperf wrote no results")
    return results[0]


def rnicperf_udp_pair(rnicperf, args, env, tmp, tag):
    """Runs rnicperf `args` as a server and a client process on the UDP wire; the client's
    JSON result."""
    port = str(free_port())
    js, jc = os.path.join(tmp, f"{tag}_server.json"), os.path.join(tmp, f"{tag}_client.json")
    common = args + ["-F", "-p", port]
    server = subprocess.Popen([rnicperf] + common + [f"--out_json_file={js}"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        run([rnicperf] + common + [f"--out_json_file={jc}", "--retry-connect", "127.0.0.1"],
            env=env)
        _, err = server.communicate(timeout=300)
    except BaseException:
        server.kill()
        server.wait()
        raise
    if server.returncode != 0:
        raise BenchError(f"rnicperf server: exit status {server.returncode}\n{err.strip()}")
    return rnicperf_result(jc)


def fabric_records(builddir, smoke):
    rnicperf = os.path.join(builddir, "tools/rnicperf/rnicperf")
    fabric = os.path.join(builddir, "tools/bench/rnicdv-bench-fabric")
    lat_iters = 20 if smoke else 2000
    rate_iters = 640 if smoke else 64000
    env = dict(os.environ)
    env.pop("RNICDV_PCAP", None)
    out = []
    with tempfile.TemporaryDirectory(prefix="rnicdv-bench-") as tmp:
        # In-process: both ends in one process, the server end on a thread.
        say("fabric: in-process write latency")
        # Without $RNICDV_SIM_WIRE, --loopback puts both HCAs on a private in-process wire.
        inproc = {k: v for k, v in env.items() if k != "RNICDV_SIM_WIRE"}
        j = os.path.join(tmp, "inproc_lat.json")
        run([rnicperf, "write_lat", "--loopback", "-s", "8", "-n", str(lat_iters), "-F",
             f"--out_json_file={j}"], env=inproc)
        value = rnicperf_result(j)["t_typical"] * 1000
        base = json.loads(run([fabric, "ring-pingpong", "--iters", str(lat_iters),
                               "--size", "8"]))["t_typical"] * 1000
        out.append(record("fabric_inproc_write_lat_8", value, "ns", "ring_pingpong_8", base))
        # What holding registered memory by its pages costs: the same run with every region
        # accessed by address (RNICDV_SIM_REGISTER_BY_ADDRESS=1) is the baseline.
        j = os.path.join(tmp, "inproc_lat_by_address.json")
        run([rnicperf, "write_lat", "--loopback", "-s", "8", "-n", str(lat_iters), "-F",
             f"--out_json_file={j}"], env=dict(inproc, RNICDV_SIM_REGISTER_BY_ADDRESS="1"))
        out.append(record("fabric_inproc_write_lat_8_pinned", value, "ns",
                          "fabric_inproc_write_lat_8_by_address",
                          rnicperf_result(j)["t_typical"] * 1000))

        # UDP: two processes.
        say("fabric: UDP write latency, two processes")
        udp = dict(env, RNICDV_SIM_WIRE="udp")
        result = rnicperf_udp_pair(rnicperf, ["write_lat", "-s", "8", "-n", str(lat_iters)],
                                   udp, tmp, "udp_lat")
        value = result["t_typical"] * 1000
        base = json.loads(run([fabric, "udp-pingpong", "--iters", str(lat_iters),
                               "--size", "8"]))["t_typical"] * 1000
        out.append(record("fabric_udp_write_lat_8", value, "ns", "udp_pingpong_8", base))

        # Message rate: 64-byte WRITEs, post lists of 32, in process.
        say("fabric: 64-byte write message rate, post list 32")
        j = os.path.join(tmp, "inproc_bw.json")
        run([rnicperf, "write_bw", "--loopback", "-s", "64", "-l", "32", "-n",
             str(rate_iters), "-F", f"--out_json_file={j}"], env=inproc)
        mpps = rnicperf_result(j)["MsgRate"]
        if not mpps > 0:
            raise BenchError("rnicperf write_bw: message rate 0")
        base = json.loads(run([fabric, "ring-stream", "--iters", str(rate_iters), "--size",
                               "64", "--burst", "32"]))["ns_per_msg"]
        out.append(record("fabric_inproc_write_rate_64_pl32", 1000.0 / mpps, "ns/msg",
                          "ring_stream_64_burst32", base))
        j = os.path.join(tmp, "inproc_bw_by_address.json")
        run([rnicperf, "write_bw", "--loopback", "-s", "64", "-l", "32", "-n",
             str(rate_iters), "-F", f"--out_json_file={j}"],
            env=dict(inproc, RNICDV_SIM_REGISTER_BY_ADDRESS="1"))
        by_address = rnicperf_result(j)["MsgRate"]
        if not by_address > 0:
            raise BenchError("rnicperf write_bw by address: message rate 0")
        out.append(record("fabric_inproc_write_rate_64_pl32_pinned", 1000.0 / mpps, "ns/msg",
                          "fabric_inproc_write_rate_64_pl32_by_address", 1000.0 / by_address))

        # Message rate over UDP: two processes.
        say("fabric: 64-byte write message rate, post list 32, UDP, two processes")
        mpps = rnicperf_udp_pair(rnicperf, ["write_bw", "-s", "64", "-l", "32", "-n",
                                            str(rate_iters)], udp, tmp, "udp_bw")["MsgRate"]
        if not mpps > 0:
            raise BenchError("rnicperf write_bw over UDP: message rate 0")
        base = json.loads(run([fabric, "udp-stream", "--iters", str(rate_iters), "--size",
                               "64", "--burst", "32"]))["ns_per_msg"]
        out.append(record("fabric_udp_write_rate_64_pl32", 1000.0 / mpps, "ns/msg",
                          "udp_stream_64_burst32", base))
    return out


def cm_records(builddir, smoke):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-cm")
    small, large = ("20", "200") if smoke else ("100", "2000")
    say(f"connection set-up through the CM: {small}, then {large} connections between two "
        "processes, 32 in flight")
    base = {r["name"]: r for r in json.loads(run([exe, "--connections", small, "--serial", "10"]))}
    raw = json.loads(run([exe, "--connections", large, "--serial", "10"]))
    per_small = base[f"cm_setup_us_per_connection_{small}"]
    out = []
    for r in raw:
        name = r["name"].replace(f"_{large}", "_2000")
        if name == "cm_setup_us_per_connection_2000":
            # What a connection costs beside 2000 others, against beside 100.
            out.append(record(name, r["value"], r["unit"], "cm_setup_us_per_connection_100",
                              per_small["value"]))
        else:
            out.append(record(name, r["value"], r["unit"], r["baseline_name"],
                              r["baseline_value"]))
    out.append(record("cm_setup_us_per_connection_100", per_small["value"], per_small["unit"],
                      per_small["baseline_name"], per_small["baseline_value"]))
    return out


def sim_idle_records(builddir, smoke, shim):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-sim-idle")
    samples = "5" if smoke else "200"
    out = []
    say("simulated HCA: doorbell to execution after 10 ms idle (rnicdv's driver kicks it)")
    raw = json.loads(run([exe, "doorbell", "--samples", samples]))
    say("simulated HCA: doorbell to execution after 10 ms idle (libmlx5 through the shim)")
    verbs = dict(os.environ, LD_PRELOAD=shim, RNICDV_UVERBS_DEVICES="2", RNICDV_SIM_WIRE="inproc")
    raw += json.loads(run([exe, "doorbell-libmlx5", "--samples", samples], env=verbs))
    for r in raw:
        # Beside the floor of any design that sleeps (a thread asleep on an eventfd, woken by
        # a write), measured in the same program.
        out.append(record(r["name"], r["value"], "ns", r["baseline_name"], r["baseline_value"]))
    for q in ("p50", "p99"):
        r = next(x for x in raw if x["name"] == f"sim_doorbell_to_execution_idle_{q}")
        out.append(record(f"thread_wakeup_idle_{q}", r["baseline_value"], "ns"))
    say("simulated HCA: idle CPU per device")
    seconds = "1" if smoke else "3"
    w = json.loads(run([exe, "idle-cpu", "--seconds", seconds]))[0]
    out.append(record(w["name"], w["value"], "core", "one_core", 1.0))
    return out


def first_reply_records(builddir, smoke):
    rnicperf = os.path.join(builddir, "tools/rnicperf/rnicperf")
    conns = "4" if smoke else "200"
    env = {k: v for k, v in os.environ.items() if k not in ("RNICDV_SIM_WIRE", "RNICDV_PCAP")}
    out = []
    with tempfile.TemporaryDirectory(prefix="rnicdv-bench-") as tmp:
        for poll_us, suffix in ((0, ""), (1000, "_cm_poll_1ms")):
            say(f"first reply on a fresh connection, server reads CM events every "
                f"{poll_us or 'pass'}{' us' if poll_us else ''}")
            j = os.path.join(tmp, f"first_reply{suffix}.json")
            run([rnicperf, "send_lat", "--loopback", f"--first-reply={conns}",
                 f"--cm-poll-us={poll_us}", "-p", str(free_port()), f"--out_json_file={j}"],
                env=env)
            with open(j) as f:
                doc = json.load(f)
            rows = {(r["reply"], r["rtu"]): r["t_median_us"] * 1000 for r in doc["rows"]}
            out.append(record(f"first_reply_early_vs_queue_rtu{suffix}",
                              rows[("early post", "delivered")], "ns",
                              f"first_reply_own_queue_rtu{suffix}",
                              rows[("own queue", "delivered")]))
            out.append(record(f"first_reply_early_vs_queue_comm_est{suffix}",
                              rows[("early post", "lost")], "ns",
                              f"first_reply_own_queue_comm_est{suffix}",
                              rows[("own queue", "lost")]))
    return out


def pacer_records(builddir, smoke):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-pacer")
    say("simulated HCA: packet pacing in real time, 10 Mb/s to 10 Gb/s and unpaced")
    out = [record(r["name"], r["value"], r["unit"], r["baseline_name"], r["baseline_value"])
           for r in json.loads(run([exe] + (["--smoke"] if smoke else [])))]
    for name, text in pacer_notes(out).items():
        say(f"{name}: {text}")
    return out


def fanout_records(builddir, smoke):
    exe = os.path.join(builddir, "tools/bench/rnicdv-bench-fanout")
    say("UD multicast: one publisher to 4 subscribers, beside unicast fan-out")
    return [record(r["name"], r["value"], r["unit"], r["baseline_name"], r["baseline_value"])
            for r in json.loads(run([exe] + (["--smoke"] if smoke else [])))]


def pacer_notes(records):
    """For each pacer rate record whose limit lies above the unpaced rate of the same run, why
    its ratio falls short: the machine, not the pacer, sets that rate."""
    by_name = {r["name"]: r for r in records}
    unpaced = by_name.get("sim_pacer_rate_unpaced")
    if unpaced is None:
        return {}
    notes = {}
    for label in PACER_LIMITS:
        r = by_name.get(f"sim_pacer_rate_{label}")
        if r and r["baseline_value"] and r["baseline_value"] > unpaced["value"]:
            notes[r["name"]] = (f"limit above the unpaced {fmt(unpaced['value'])} "
                                f"{unpaced['unit']}")
    return notes


# ---- Schema, table ------------------------------------------------------------------------

def validate(records, expected):
    if not isinstance(records, list) or not records:
        raise BenchError("bench.json: not a non-empty JSON array")
    seen = set()
    for r in records:
        if not isinstance(r, dict) or tuple(sorted(r)) != tuple(sorted(FIELDS)):
            raise BenchError(f"bench.json: record {r!r}: fields must be exactly {FIELDS}")
        name = r["name"]
        if not isinstance(name, str) or not name or name in seen:
            raise BenchError(f"bench.json: record name {name!r} empty or repeated")
        seen.add(name)
        v = r["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise BenchError(f"bench.json: {name}: value {v!r} is not a finite number >= 0")
        if not isinstance(r["unit"], str) or not r["unit"]:
            raise BenchError(f"bench.json: {name}: unit missing")
        b, bv, ratio = r["baseline_name"], r["baseline_value"], r["ratio"]
        if b is None:
            if bv is not None or ratio is not None:
                raise BenchError(f"bench.json: {name}: baseline_value/ratio without a baseline")
            continue
        if not isinstance(b, str) or not b:
            raise BenchError(f"bench.json: {name}: baseline_name {b!r}")
        if isinstance(bv, bool) or not isinstance(bv, (int, float)) or not bv > 0:
            raise BenchError(f"bench.json: {name}: baseline_value {bv!r} is not > 0")
        if not isinstance(ratio, (int, float)) or not math.isclose(ratio, v / bv, rel_tol=1e-9):
            raise BenchError(f"bench.json: {name}: ratio {ratio!r} != value / baseline_value")
    for r in records:
        for case, base in {**LIBMLX5_BASELINES, **UCX_BASELINES}.items():
            for suffix in ("", "_instr"):
                if r["name"] == case + suffix and r["baseline_name"] != base + suffix:
                    raise BenchError(f"bench.json: {r['name']}: baseline must be {base + suffix}, "
                                     f"not {r['baseline_name']!r}")
    for r in records:
        # A pacer rate is measured against its own limit, in Mb/s.
        for label, mbps in PACER_LIMITS.items():
            limit = f"sim_pacer_limit_{label}"
            if r["name"] == f"sim_pacer_rate_{label}" and (
                    r["baseline_name"] != limit or r["baseline_value"] != mbps):
                raise BenchError(f"bench.json: {r['name']}: baseline must be {limit} = {mbps}, "
                                 f"not {r['baseline_name']!r} = {r['baseline_value']!r}")
    missing = [n for n in expected if n not in seen]
    if missing:
        raise BenchError(f"bench.json: missing records: {', '.join(missing)}")


def fmt(v):
    if v is None:
        return "-"
    if v >= 1e5:
        return f"{v:.0f}"
    return f"{v:.4g}" if v < 100 else f"{v:.1f}"


def table(records):
    rows = [("name", "value", "unit", "baseline", "baseline value", "ratio", "target or note")]
    notes = pacer_notes(records)
    for r in records:
        t = TARGETS.get(r["name"])
        verdict = notes.get(r["name"], "-")
        if t is not None and r["ratio"] is not None:
            verdict = f"<= {t} " + ("met" if r["ratio"] <= t else "MISSED")
        rows.append((r["name"], fmt(r["value"]), r["unit"], r["baseline_name"] or "-",
                     fmt(r["baseline_value"]),
                     "-" if r["ratio"] is None else f"{r['ratio']:.2f}", verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(row)) + " |")
        if k == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--smoke", action="store_true", help="a few iterations per case")
    ap.add_argument("--no-callgrind", action="store_true", help="skip instruction counts")
    ap.add_argument("--uverbs-shim", help="librnicdv-uverbs.so "
                    "(default BUILDDIR/hw/uverbs/librnicdv-uverbs.so)")
    ap.add_argument("--out", help="output file (default BUILDDIR/bench.json)")
    args = ap.parse_args()
    out = args.out or os.path.join(args.builddir, "bench.json")
    shim = args.uverbs_shim or os.path.join(args.builddir, "hw/uverbs/librnicdv-uverbs.so")
    try:
        records = driver_records(args.builddir, args.smoke)
        lm_records = libmlx5_records(args.builddir, shim, args.smoke)
        records += lm_records
        with_ucx = built_with_ucx(args.builddir)
        lm_cases = list(LIBMLX5_CASES) + (list(UCX_CASES) if with_ucx else [])
        if not with_ucx:
            say("built without UCX (libucx-dev): no post_write_ucx record")
        expected = COUNTED_CASES + lm_cases + MEMORY_CASES + FABRIC_CASES
        if not args.no_callgrind and shutil.which("valgrind"):
            records += callgrind_records(args.builddir, args.smoke, records)
            records += libmlx5_callgrind_records(args.builddir, shim, args.smoke, lm_records)
            expected += [c + "_instr" for c in COUNTED_CASES + lm_cases]
        elif not args.no_callgrind:
            say("valgrind is not installed: no instruction counts")
        records += fabric_records(args.builddir, args.smoke)
        records += sim_idle_records(args.builddir, args.smoke, shim)
        records += first_reply_records(args.builddir, args.smoke)
        records += cm_records(args.builddir, args.smoke)
        records += pacer_records(args.builddir, args.smoke)
        records += fanout_records(args.builddir, args.smoke)
        expected += (SIM_IDLE_CASES + FIRST_REPLY_CASES + SCALE_CASES + CM_CASES + PACER_CASES +
                     FANOUT_CASES)
        validate(records, expected)
        records = place_libmlx5(records)
    except BenchError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    print(table(records))
    say(f"{len(records)} records in {out}" + (" (smoke: the figures mean nothing)"
                                              if args.smoke else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
