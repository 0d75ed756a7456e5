#!/usr/bin/env python3
"""Summarizes cep-side-by-side.sh's results TSV: medians over the rounds, with the min-max spread.

Per parallelism x system (riffle, riffle-rocksdb, flink-hashmap, flink-rocksdb): events (input
lines), alerts written, wall seconds, CPU seconds (user + sys of the whole process, all
threads), events per CPU-second, peak RSS; for Flink also the job alone from its FLINK_TIMING
line (first record parsed to the close of the last pattern operator: no JVM / MiniCluster
start-up, deployment, sink commit or shutdown) as events per CPU-second over that interval
(process CPU, JIT and GC threads included) and the start-up (JVM start to the first record).
Then the ratio of Riffle's events per CPU-second to Flink's (= Flink CPU / Riffle CPU: above 1,
Riffle used less CPU for the same events), for the same state backend and parallelism: riffle /
flink-hashmap (heap state both) and riffle-rocksdb / flink-rocksdb.
Runs stopped by the harness's --timeout-secs (status `timeout`) count only when a system has no
finished run: then its CPU is a lower bound (shown as ">=") and its events per CPU-second and the
ratio are bounds ("<", ">").

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


def spread(xs, f):
    """median (min-max) when there are several values."""
    if len(xs) > 1:
        return f"{f(med(xs))} ({f(min(xs))}-{f(max(xs))})"
    return f(med(xs))


def main():
    path = sys.argv[1]
    markdown = "--markdown" in sys.argv[2:]
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    groups = collections.OrderedDict()
    for r in rows:
        groups.setdefault((int(r["p"]), r["system"]), []).append(r)

    head = ["p", "system", "runs", "events", "alerts", "wall s", "CPU s", "events/CPU-s",
            "RSS MB", "job-only events/CPU-s", "start-up s"]
    table = []
    stats = {}
    for (p, s), all_rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        done = [r for r in all_rs if r.get("status", "ok") == "ok"]
        bound = not done  # every run timed out: the figures are bounds
        rs = done or all_rs
        ev = [int(r["events"]) for r in rs]
        alerts = sorted({r["alerts"] for r in rs})
        wall = [float(r["wall_s"]) for r in rs]
        cpu = [float(r["user_s"]) + float(r["sys_s"]) for r in rs]
        rss = [int(r["rss_kb"]) / 1024 for r in rs]
        per_cpu = [e / c for e, c in zip(ev, cpu)]
        job_cpu, startup = [], []
        for r, e in zip(rs, ev):
            if r.get("first_record_ms") and r.get("last_close_ms") and int(r["first_record_ms"]) > 0:
                csecs = (int(r["last_close_cpu_ns"]) - int(r["first_cpu_ns"])) / 1e9
                if csecs > 0:
                    job_cpu.append(e / csecs)
                startup.append((int(r["first_record_ms"]) - int(r["jvm_start_ms"])) / 1e3)
        stats[(p, s)] = dict(per_cpu=med(per_cpu), cpu=med(cpu), job_cpu=med(job_cpu),
                             bound=bound)
        runs = str(len(done)) + (f" +{len(all_rs) - len(done)} timeout" if len(done) < len(all_rs)
                                 else "")
        if bound:
            job_cpu = []
            alerts = ["(timeout)"]
        table.append([
            str(p), s, runs, str(ev[0]), "/".join(alerts),
            (">" if bound else "") + spread(wall, lambda x: f"{x:.2f}"),
            (">=" if bound else "") + spread(cpu, lambda x: f"{x:.2f}"),
            ("<" if bound else "") + spread(per_cpu, rate), f"{med(rss):.0f}",
            spread(job_cpu, rate) if job_cpu else "-",
            spread(startup, lambda x: f"{x:.1f}") if startup else "-",
        ])

    print(f"results: {path}")
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for c in table:
            print("| " + " | ".join(c) + " |")
    else:
        widths = [max(len(h), *(len(c[i]) for c in table)) if table else len(h)
                  for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for c in table:
            print("  ".join(x.ljust(w) for x, w in zip(c, widths)))

    print()
    print("Riffle / Flink, events per CPU-second (medians; whole process both sides, and against "
          "Flink's job-only figure):")
    pairs = [("riffle", "flink-hashmap", "heap / hashmap"),
             ("riffle-rocksdb", "flink-rocksdb", "rocksdb / rocksdb")]
    for p in sorted({p for p, _ in stats}):
        for rs, fs, label in pairs:
            r, f = stats.get((p, rs)), stats.get((p, fs))
            if not r or not f:
                continue
            if r["bound"]:
                print(f"p={p}  {rs} / {fs} ({label}): - ({rs} timed out)")
                continue
            gt = ">" if f["bound"] else ""
            line = (f"p={p}  {rs} / {fs} ({label}): {gt}x{r['per_cpu'] / f['per_cpu']:.2f}"
                    f"  (CPU s {r['cpu']:.2f} vs {gt and '>='}{f['cpu']:.2f})")
            if f["job_cpu"] == f["job_cpu"]:
                line += f"   | vs Flink job-only: x{r['per_cpu'] / f['job_cpu']:.2f}"
            print(line)
        if (p, "flink-rocksdb") in stats and (p, "riffle-rocksdb") not in stats and (p, "riffle") in stats:
            r, f = stats[(p, "riffle")], stats[(p, "flink-rocksdb")]
            if not r["bound"]:
                print(f"p={p}  riffle / flink-rocksdb (heap / rocksdb: different backends; this "
                      f"riffle has no RocksDB): {'>' if f['bound'] else ''}"
                      f"x{r['per_cpu'] / f['per_cpu']:.2f}")


if __name__ == "__main__":
    main()
