#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""rdma-core's own Python test suite (pyverbs) on the simulated HCA, through the uverbs shim.

Runs each named module of the suite in its own process (Debian's /usr/bin/python3 and
python3-pyverbs, the shim preloaded) and passes only if every module reports no failure and
no error, and every skip gives a reason that docs/uverbs-shim.md lists (in backquotes) as a
documented limitation.

The suite is read from SOURCE (an rdma-core source tree, its tests/ folder) where that exists,
else from the copy Debian's python3-pyverbs installs (DEBIAN_TESTS, some modules gzipped),
unpacked into UNPACK_DIR/tests so that tests/run_tests.py finds its package as in the source
tree. Exits 77 (skipped), saying why in one line, when neither is on this machine or pyverbs
itself is not.

usage: run_pyverbs.py SHIM SOURCE DEBIAN_TESTS UNPACK_DIR DOC MODULE...
"""
import gzip
import os
import re
import shutil
import subprocess
import sys

PYTHON = "/usr/bin/python3"  # the interpreter python3-pyverbs is built for
MODULE_TIMEOUT_S = 240


def unpack_debian_copy(src: str, unpack_dir: str) -> str:
    """Copies Debian's tests folder to UNPACK_DIR/tests, decompressing each *.gz file; returns
    UNPACK_DIR (the folder to run tests/run_tests.py from)."""
    dest = os.path.join(unpack_dir, "tests")
    staging = dest + ".new"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path):
            continue
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as f_in, open(os.path.join(staging, name[:-3]), "wb") as f_out:
                shutil.copyfileobj(f_in, f_out)
        else:
            shutil.copyfile(path, os.path.join(staging, name))
    # A fresh copy every run: the package may have changed since the last one.
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(staging, dest)
    return unpack_dir


def main() -> int:
    if len(sys.argv) < 7:
        print(__doc__, file=sys.stderr)
        return 2
    shim, source, debian_tests, unpack_dir, doc_path = sys.argv[1:6]
    modules = sys.argv[6:]
    if subprocess.run([PYTHON, "-c", "import pyverbs.device"], capture_output=True).returncode:
        print("SKIP: pyverbs is not installed (Debian package python3-pyverbs)")
        return 77
    if os.path.isfile(os.path.join(source, "tests", "run_tests.py")):
        suite = source
        print(f"pyverbs: the suite from {source}/tests")
    elif os.path.isfile(os.path.join(debian_tests, "run_tests.py")):
        suite = unpack_debian_copy(debian_tests, unpack_dir)
        print(f"pyverbs: the suite from {debian_tests}, unpacked into {suite}/tests")
    else:
        print(f"SKIP: rdma-core's test suite is neither at {source}/tests nor at {debian_tests} "
              "(python3-pyverbs installs it there unless dpkg excludes /usr/share/doc)")
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
        # unittest prints the reason's repr(): in double quotes when it holds a single quote.
        skips = [m.group(2) for m in re.finditer(r"skipped (['\"])(.*)\1$", out, re.M)]
        print(f"{module}: ran {ran.group(1) if ran else '?'}, "
              f"{verdict.group(0) if verdict else 'no verdict'}")
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
