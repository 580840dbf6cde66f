#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# The report of `tools/dev hardware`: one JSON file and, beside it with .txt, a readable
# summary. Arguments: WORKDIR (steps.tsv, device.json, experiment.json, early-post.json,
# rnicperf-*.json), REPORT.json, SIM (1 when run through the uverbs shim). Exit status 0 only
# if every step passed.
import datetime
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    work, report, sim = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    device = load(os.path.join(work, "device.json")) or {}
    steps = []
    with open(os.path.join(work, "steps.tsv")) as f:
        for line in f:
            name, status, seconds, log = line.rstrip("\n").split("\t")
            with open(log, errors="replace") as lf:
                tail = lf.read().splitlines()[-40:]
            step = {"name": name, "status": status, "seconds": float(seconds)}
            if status != "pass":
                step["log_tail"] = tail
            if name.startswith("rnicperf "):
                perf = load(os.path.join(work, "rnicperf-%s.json" % name.split()[1]))
                if perf is not None:
                    step["rnicperf"] = perf
            steps.append(step)
    experiment = load(os.path.join(work, "experiment.json"))
    early = load(os.path.join(work, "early-post.json"))
    passed = bool(steps) and all(s["status"] == "pass" for s in steps)
    simulated = sim or bool(device.get("simulated"))
    out = {
        "passed": passed,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device.get("name"),
        "simulated": simulated,
        "firmware": device.get("firmware"),
        "device_info": device,
        "steps": steps,
        "early_post": early,
        "experiment": experiment,
    }
    with open(report, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    lines = []
    kind = ("SIMULATED device (rnicdv's software HCA through the uverbs shim)" if simulated
            else "hardware")
    lines.append("rnicdv hardware qualification: %s" % ("PASSED" if passed else "FAILED"))
    lines.append("device:   %s, %s" % (device.get("name", "?"), kind))
    lines.append("firmware: %s  vendor %s part %s  hw_ver %s" % (
        device.get("firmware", "?"), device.get("vendor_id", "?"),
        device.get("vendor_part_id", "?"), device.get("hw_ver", "?")))
    for p in device.get("ports", []):
        lines.append("port %d:   %s, %s, MTU %d" % (p["port"], p["state"], p["link_layer"],
                                                   p["active_mtu"]))
    lines.append("")
    for s in steps:
        lines.append("  %-34s %-4s %8.2f s" % (s["name"], s["status"], s["seconds"]))
    for c in early or []:
        lines.append("    %-32s %-4s %8.2f s  %s" % (c["name"], "pass" if c["passed"] else "FAIL",
                                                    c["seconds"], c["detail"]))
    lines.append("")
    if experiment and "finding_a" in experiment:
        lines.append("experiment (each stage watched %d ms):" % experiment["window_ms"])
        lines.append("  (a) no doorbell across RTR->RTS: %s" % experiment["finding_a"])
        lines.append("  (b) beyond the doorbell record:  %s" % experiment["finding_b"])
        lines.append("  (c) a doorbell rung in RTR:      %s" % experiment["finding_c"])
        if experiment.get("conclusive"):
            lines.append("  profile: %s (fetches_beyond_dbr %s, keeps_rtr_doorbell %s): early "
                         "posting withholds %s" % (
                             experiment["profile"],
                             "yes" if experiment["fetches_beyond_dbr"] else "no",
                             {True: "yes", False: "no", None: "undetermined"}[
                                 experiment["keeps_rtr_doorbell"]],
                             "in place" if experiment["withholding"] == "in_place"
                             else "in a shadow queue"))
        else:
            lines.append("  inconclusive: a control doorbell did not run every WQE")
        if experiment.get("conclusive") and not experiment.get("agrees_with_backend"):
            lines.append("  DISAGREES with the profile the hw/mlx5 backend gives the driver "
                         "(%s)" % experiment.get("backend_profile"))
    elif experiment:
        lines.append("experiment failed: %s" % experiment.get("error"))
    lines.append("")
    lines.append("report: %s" % report)
    with open(os.path.splitext(report)[0] + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
