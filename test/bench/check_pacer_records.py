#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""What run.py does with rnicdv-bench-pacer's records, and what the program refuses.

    check_pacer_records.py RUN_PY BENCH_PACER

- run.py accepts a complete set of pacer records, and refuses one whose rate record is not
  measured against its own limit (wrong baseline name or value), or that lacks a record;
- run.py marks, in its table and notes, exactly the limits that lie above the unpaced rate
  of the same run;
- rnicdv-bench-pacer refuses a bad option with its name on stderr and exit status 1.
Exit status 1 with the reason on stderr when any of these fails.
"""

import importlib.util
import subprocess
import sys


def load_run_py(path):
    spec = importlib.util.spec_from_file_location("bench_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    run = load_run_py(sys.argv[1])
    exe = sys.argv[2]
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    def records(unpaced=700.0, limits=None):
        rec = run.record
        out = [rec("sim_pacer_rate_unpaced", unpaced, "Mb/s")]
        for label, mbps in (limits or run.PACER_LIMITS).items():
            out.append(rec(f"sim_pacer_rate_{label}", min(mbps, unpaced) * 0.9, "Mb/s",
                           f"sim_pacer_limit_{label}", mbps))
        out.append(rec("sim_pacer_rate_10G_vs_unpaced", 600.0, "Mb/s", "sim_pacer_rate_unpaced",
                       unpaced))
        out.append(rec("sim_pacer_burst_64K_at_10M", 66500.0, "B",
                       "sim_pacer_burst_allowance_64K", 65536))
        return out

    def refused(recs, expected=None):
        try:
            run.validate(recs, run.PACER_CASES if expected is None else expected)
        except run.BenchError as e:
            return str(e)
        return None

    check(refused(records()) is None, "a complete, correct set of pacer records was refused")
    wrong_value = records(limits={**run.PACER_LIMITS, "100M": 1000})
    err = refused(wrong_value)
    check(err is not None and "sim_pacer_rate_100M" in err,
          f"a 100M rate against a limit of 1000 Mb/s was not refused naming it (got {err!r})")
    wrong_name = records()
    r = next(x for x in wrong_name if x["name"] == "sim_pacer_rate_1G")
    r["baseline_name"] = "sim_pacer_limit_10G"
    err = refused(wrong_name)
    check(err is not None and "sim_pacer_limit_1G" in err,
          f"a 1G rate against the 10G limit was not refused naming its own (got {err!r})")
    missing = [x for x in records() if x["name"] != "sim_pacer_burst_64K_at_10M"]
    err = refused(missing)
    check(err is not None and "sim_pacer_burst_64K_at_10M" in err,
          f"a missing burst record was not reported (got {err!r})")

    notes = run.pacer_notes(records(unpaced=700.0))
    check(sorted(notes) == ["sim_pacer_rate_10G", "sim_pacer_rate_1G"],
          f"limits above an unpaced 700 Mb/s: expected 1G and 10G marked, got {sorted(notes)}")
    check(all("700.0 Mb/s" in t for t in notes.values()),
          f"the notes do not give the unpaced rate: {notes}")
    check(run.pacer_notes(records(unpaced=20000.0)) == {},
          "a limit was marked although the unpaced rate lies above every limit")
    table = run.table(records(unpaced=700.0))
    marked = [line for line in table.splitlines() if "limit above the unpaced" in line]
    check(len(marked) == 2 and all(("_1G " in m or "_10G " in m) for m in marked),
          f"the table does not mark exactly the 1G and 10G rows:\n{table}")

    for args, name in ((["--poll", "fast"], "--poll"), (["--burst", "0"], "--burst"),
                       (["--seconds", "x"], "--seconds"), (["--seconds"], "--seconds"),
                       (["--frobnicate"], "--frobnicate")):
        p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=60)
        check(p.returncode == 1 and name in p.stderr and not p.stdout,
              f"rnicdv-bench-pacer {' '.join(args)}: exit {p.returncode}, stderr {p.stderr!r}, "
              f"stdout {p.stdout[:80]!r}; expected exit 1 naming {name}")

    for f in failures:
        print(f"check_pacer_records: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
