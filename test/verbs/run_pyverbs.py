#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""rdma-core's own Python test suite (pyverbs) on the simulated HCA, through the uverbs shim.

Runs each named module of the suite in its own process (Debian's /usr/bin/python3 and
python3-pyverbs, the shim preloaded) and passes only if every module reports no failure and
no error, and every skip gives a reason that docs/uverbs-shim.md lists (in backquotes) as a
documented limitation. Exits 77 (skipped) when the suite or pyverbs is not on this machine.

usage: run_pyverbs.py SHIM SUITE_DIR DOC MODULE...
"""
import os
import re
import subprocess
import sys

PYTHON = "/usr/bin/python3"  # the interpreter python3-pyverbs is built for
MODULE_TIMEOUT_S = 240


def main() -> int:
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    shim, suite, doc_path, modules = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if not os.path.isfile(os.path.join(suite, "tests", "run_tests.py")):
        print(f"SKIP: rdma-core's test suite is not at {suite}")
        return 77
    if subprocess.run([PYTHON, "-c", "import pyverbs.device"], capture_output=True).returncode:
        print("SKIP: pyverbs is not installed (Debian package python3-pyverbs)")
        return 77
    with open(doc_path, encoding="utf-8") as f:
        # The table rows of the doc (one line each, so a stray backquote elsewhere cannot
        # shift the pairing).
        documented = {m for line in f if line.startswith("|")
                      for m in re.findall(r"`([^`]+)`", line)}

    env = dict(os.environ, LD_PRELOAD=shim)
    problems = []
    totals = {"ran": 0, "skipped": 0}
    for module in modules:
        try:
            r = subprocess.run(
                [PYTHON, "tests/run_tests.py", "--dev", "rnicsim0", "--gid", "3", "-v", module],
                cwd=suite, env=env, capture_output=True, text=True, timeout=MODULE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            problems.append(f"{module}: did not finish in {MODULE_TIMEOUT_S} s")
            continue
        out = r.stdout + r.stderr
        ran = re.search(r"^Ran (\d+) tests? in", out, re.M)
        verdict = re.search(r"^(OK|FAILED)\b(.*)$", out, re.M)
        skips = re.findall(r"skipped '(.*)'$", out, re.M)
        print(f"{module}: {verdict.group(0) if verdict else 'no verdict'}")
        if not ran or not verdict:
            problems.append(f"{module}: no unittest summary (exit {r.returncode}):\n{out[-3000:]}")
            continue
        totals["ran"] += int(ran.group(1))
        totals["skipped"] += len(skips)
        if verdict.group(1) != "OK" or r.returncode != 0:
            failed = re.findall(r"^(?:FAIL|ERROR): .*$", out, re.M)
            problems.append(f"{module}: {verdict.group(0)} (exit {r.returncode}): "
                            + "; ".join(failed) + "\n" + out[-4000:])
        if int(ran.group(1)) == 0:
            problems.append(f"{module}: ran no tests")
        for reason in sorted(set(skips)):
            if reason not in documented:
                problems.append(f"{module}: skip reason not documented in {doc_path}: '{reason}'")

    print(f"pyverbs: {len(modules)} modules, {totals['ran']} tests, "
          f"{totals['skipped']} skipped (each for a documented limitation)")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
