#!/usr/bin/env python3
"""Summarizes nexmark-sql-side-by-side.sh's results TSV: medians over the runs.

Per query x parallelism: CPU seconds (user + sys of the whole process) of Riffle and Flink,
events per CPU-second of each, the ratio Riffle / Flink of events per CPU-second (= Flink CPU /
Riffle CPU: above 1, Riffle used less CPU for the same events), wall seconds, peak RSS, and
with --startup runs (each query on 1000 events) the same ratio with each engine's start-up CPU
taken off: (events - 1000) / (CPU - start-up CPU). Flink's net job runtime (the job's own
wall time, from its JobExecutionResult) is shown for reference.

Usage: summarize.py RESULTS.tsv [--markdown]
"""
import collections
import csv
import statistics
import sys


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def rate(x):
    if x != x:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    return f"{x / 1e3:.1f}K"


def main():
    path = sys.argv[1]
    markdown = "--markdown" in sys.argv[2:]
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    groups = collections.OrderedDict()
    for r in rows:
        groups.setdefault((r["query"], int(r["p"])), {}).setdefault(
            (r["system"], r["kind"]), []).append(r)

    def stat(rs):
        cpu = [float(r["user_s"]) + float(r["sys_s"]) for r in rs]
        return dict(n=len(rs), events=int(rs[0]["events"]), cpu=med(cpu),
                    cpu_min=min(cpu), cpu_max=max(cpu),
                    wall=med([float(r["wall_s"]) for r in rs]),
                    rss=med([int(r["rss_kb"]) / 1024 for r in rs]),
                    net=med([int(r["net_runtime_ms"]) / 1e3 for r in rs
                             if r.get("net_runtime_ms") not in (None, "", "-1")]))

    head = ["query", "p", "runs", "Riffle CPU s", "Flink CPU s", "Riffle ev/CPU-s",
            "Flink ev/CPU-s", "Riffle/Flink", "start-up off", "wall s R / F",
            "Flink job s", "RSS MB R / F"]
    lines = []
    ratios = []
    for (q, p), g in groups.items():
        r, f = g.get(("riffle", "run")), g.get(("flink", "run"))
        rs = stat(r) if r else None
        fs = stat(f) if f else None
        cells = [q, str(p), str(max(rs["n"] if rs else 0, fs["n"] if fs else 0))]
        cells.append(f"{rs['cpu']:.2f}" + (f" ({rs['cpu_min']:.2f}-{rs['cpu_max']:.2f})"
                                           if rs and rs["n"] > 1 else "") if rs else "FAILED")
        cells.append(f"{fs['cpu']:.2f}" + (f" ({fs['cpu_min']:.2f}-{fs['cpu_max']:.2f})"
                                           if fs and fs["n"] > 1 else "") if fs else "FAILED")
        cells.append(rate(rs["events"] / rs["cpu"]) if rs else "-")
        cells.append(rate(fs["events"] / fs["cpu"]) if fs else "-")
        if rs and fs:
            ratio = fs["cpu"] / rs["cpu"]
            ratios.append(ratio)
            cells.append(f"{ratio:.2f}x")
        else:
            cells.append("-")
        rsu, fsu = g.get(("riffle", "startup")), g.get(("flink", "startup"))
        if rs and fs and rsu and fsu:
            ru, fu = stat(rsu), stat(fsu)
            r_rate = (rs["events"] - ru["events"]) / max(rs["cpu"] - ru["cpu"], 1e-3)
            f_rate = (fs["events"] - fu["events"]) / max(fs["cpu"] - fu["cpu"], 1e-3)
            cells.append(f"{r_rate / f_rate:.2f}x (start-up {ru['cpu']:.2f} / {fu['cpu']:.2f} s)")
        else:
            cells.append("-")
        cells.append(f"{rs['wall']:.2f} / {fs['wall']:.2f}" if rs and fs else "-")
        cells.append(f"{fs['net']:.2f}" if fs and fs["net"] == fs["net"] else "-")
        cells.append(f"{rs['rss']:.0f} / {fs['rss']:.0f}" if rs and fs else "-")
        lines.append(cells)

    print(f"results: {path}")
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for c in lines:
            print("| " + " | ".join(c) + " |")
    else:
        widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h)
                  for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for c in lines:
            print("  ".join(x.ljust(w) for x, w in zip(c, widths)))
    if ratios:
        geo = statistics.geometric_mean(ratios)
        print(f"\nRiffle/Flink events per CPU-s (whole process): {min(ratios):.2f}x-"
              f"{max(ratios):.2f}x over {len(ratios)} queries, geometric mean {geo:.2f}x")


if __name__ == "__main__":
    main()
