#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Draws rnicperf latency results with matplotlib (Debian: python3-matplotlib).

    rnicperf-plot.py --out FILE.svg|FILE.png RESULT.json...

One result file: the latency histogram and the CDF of that run, with its percentile marks
(p50, p90, p99, p99.9, max, as the run reports them) and its header (test, size,
iterations, device and wire, date). Several files: the same two panels with one series per
file, laid over each other; a series is named after its file (without .json). rnicperf
--plot and --plot-compare run this script; every error is one line on stderr starting
"rnicperf: " and exit status 1.
"""

import argparse
import json
import os
import sys

# Marks drawn on both panels: (label, the result's field). p50 is perftest's t_typical (the
# median of the kept samples), max its t_max.
MARKS = [
    ("p50", "t_typical"),
    ("p90", "percentile_90"),
    ("p99", "percentile_99"),
    ("p99.9", "percentile_99_9"),
    ("max", "t_max"),
]


class PlotError(Exception):
    pass


def load_series(path, name):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise PlotError(f"{path}: cannot read: {e.strerror}")
    except ValueError as e:
        raise PlotError(f"{path}: not a JSON document ({e})")
    if not isinstance(doc, dict) or doc.get("tool") != "rnicperf":
        raise PlotError(f"{path}: not an rnicperf JSON report")
    info = doc.get("test_info", {})
    results = doc.get("results", [])
    if info.get("Latency_unit") is None:
        raise PlotError(f"{path}: a bandwidth result ({info.get('rnicperf_test', '?')}); "
                        "only latency runs have a distribution to draw")
    lat = [r for r in results if "histogram" in r]
    if not lat:
        raise PlotError(f"{path}: no latency histogram in the report (a run with --histogram "
                        "or --plot writes one; -D runs keep no samples)")
    if len(lat) > 1:
        raise PlotError(f"{path}: {len(lat)} sizes in the report; one size's distribution "
                        "is drawn at a time")
    r = lat[0]
    for _, field in MARKS:
        if not isinstance(r.get(field), (int, float)):
            raise PlotError(f"{path}: the result has no '{field}'")
    buckets = r["histogram"].get("buckets", [])
    if not buckets:
        raise PlotError(f"{path}: the histogram is empty")
    return {"path": path, "name": name, "info": info, "result": r, "date": info.get("Date"),
            "buckets": buckets, "cdf": r.get("cdf", {}).get("points")}


def header_line(s):
    info, r = s["info"], s["result"]
    test = info.get("test", info.get("rnicperf_test", "?")).replace("_", " ")
    where = info.get("Device", "?")
    if info.get("Sim_wire"):
        where += ", wire " + info["Sim_wire"]
    parts = [test, f"{r['MsgSize']} B", f"{r['n_iterations']} iterations", where]
    if s["date"]:
        parts.append(s["date"])
    return " | ".join(parts)


def cdf_points(s):
    """(x, fraction) pairs: the run's sorted-sample points, else the histogram's edges."""
    if s["cdf"]:
        return [p[0] for p in s["cdf"]], [p[1] for p in s["cdf"]]
    total = sum(b["count"] for b in s["buckets"])
    xs, ys, acc = [s["buckets"][0]["from"]], [0.0], 0
    for b in s["buckets"]:
        acc += b["count"]
        xs.append(b["to"])
        ys.append(acc / total)
    return xs, ys


def draw(series, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotError(f"--plot needs matplotlib for Debian's python3: apt-get install "
                        f"python3-matplotlib ({e})")
    # Text stays text in the SVG (searchable, selectable), not glyph outlines.
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "rnicperf"
    single = len(series) == 1
    fig, (hist_ax, cdf_ax) = plt.subplots(2, 1, figsize=(10, 8.5), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    mark_styles = {"p50": "-", "p90": "--", "p99": "-.", "p99.9": ":", "max": (0, (1, 3))}
    for i, s in enumerate(series):
        color = colors[i % len(colors)]
        b = s["buckets"]
        total = sum(x["count"] for x in b)
        edges = [x["from"] for x in b] + [b[-1]["to"]]
        pct = [100.0 * x["count"] / total for x in b]
        if single:
            hist_ax.stairs(pct, edges, fill=True, color=color, alpha=0.6, label=s["name"])
        else:
            hist_ax.stairs(pct, edges, fill=False, color=color, linewidth=1.8, label=s["name"])
        xs, ys = cdf_points(s)
        cdf_ax.step(xs, ys, where="post", color=color, linewidth=1.5, label=s["name"])
        # Marks of equal value (at 1000 iterations p99.9 is max) share one line and label.
        groups = []
        for label, field in MARKS:
            v = s["result"][field]
            if groups and groups[-1][1] == v:
                groups[-1][0].append(label)
            else:
                groups.append(([label], v))
        for labels, v in groups:
            text = f"{' = '.join(labels)} {v:.2f}"
            if not single:
                text = f"{s['name']} {text}"
            for ax in (hist_ax, cdf_ax):
                ax.axvline(v, color=color if not single else "black",
                           linestyle=mark_styles[labels[0]], linewidth=0.9, alpha=0.8)
            # The label on the CDF panel, at the mark, stacked per series.
            cdf_ax.annotate(text, xy=(v, 0.02 + 0.07 * i),
                            xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                            color=color if not single else "black", va="bottom", ha="right")
    all_x = [x for s in series for x in ([s["buckets"][0]["from"], s["buckets"][-1]["to"]] +
                                         [s["result"][f] for _, f in MARKS])]
    lo, hi = min(all_x), max(all_x)
    for ax in (hist_ax, cdf_ax):
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.15, hi * 1.15)
        ax.grid(True, which="both", alpha=0.25)
    unit = series[0]["info"].get("Latency_unit", "usec")
    hist_ax.set_ylabel("samples [%]")
    hist_ax.set_xlabel(f"latency [{unit}] (buckets: 4 per doubling)")
    hist_ax.set_title("Latency histogram")
    cdf_ax.set_ylabel("fraction of samples")
    cdf_ax.set_xlabel(f"latency [{unit}]")
    cdf_ax.set_ylim(0, 1.02)
    cdf_ax.set_title("Latency CDF")
    if single:
        from matplotlib.lines import Line2D
        handles = [Line2D([], [], color="black", linestyle=mark_styles[l],
                          label=f"{l} {series[0]['result'][f]:.2f} {unit}") for l, f in MARKS]
        hist_ax.legend(handles=handles, title="as the run reports them", fontsize=8)
        fig.suptitle(header_line(series[0]), fontsize=10)
    else:
        hist_ax.legend(fontsize=8)
        cdf_ax.legend(loc="upper left", fontsize=8)
        fig.suptitle("\n".join(f"{s['name']}: {header_line(s)}" for s in series), fontsize=9)
    fig.savefig(out, metadata={"Date": None} if out.endswith(".svg") else None)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(prog="rnicperf-plot.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    ext = os.path.splitext(a.out)[1]
    if ext not in (".svg", ".png"):
        raise PlotError(f"--plot {a.out}: the file must end in .svg or .png")
    names = [os.path.splitext(os.path.basename(f))[0] for f in a.files]
    series = [load_series(f, n) for f, n in zip(a.files, names)]
    try:
        draw(series, a.out)
    except OSError as e:
        raise PlotError(f"--plot {a.out}: cannot write: {e.strerror}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except PlotError as e:
        print(f"rnicperf: {e}", file=sys.stderr)
        sys.exit(1)
