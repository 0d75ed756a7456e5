#!/usr/bin/env python3
"""Checks that Riffle's `demo cep` and the FlinkCEP job wrote the same alerts.

  check_outputs.py RIFFLE_OUT FLINK_OUT [--names riffle flink-hashmap] [--input IN.jsonl]
                   [--promised-minutes 60] [--silence-minutes 10] [--out-of-orderness-secs 60]
  check_outputs.py --oracle-only IN.jsonl [...]       (prints the expected alerts, one a line)

The alerts are the lines of the part files directly in <OUT>/alerts/ (hidden files, such as
Flink's in-progress parts, are left out); the two multisets of lines must be equal byte for byte
(same JSON, same field order). On a difference the lines only one side wrote are printed, with
the count per alert kind. Late events (<OUT>/late-events/) are counted and reported, not checked.

--input: also works the alerts out from the events themselves, independently of both engines,
with the job's definition: per order, the events in event-time order (ties: in input order);
  late delivery: for each placed event, the first picked_up after it and then the first
    delivered after that; no alert when the delivery comes less than the promised minutes after
    the placement; otherwise (a later event at or past placed + promised, or the end of the
    input, came first) `late_delivery` (with the picked_up event's courier and time) or
    `not_picked_up` (no picked_up yet: the placement's), due at placed + promised;
  courier silent: for each ping, the next ping or delivered event after it; an alert
    `courier_silent` due at ping + silence when there is none or it comes at or past that time.
Events behind the tightest possible watermark (max event time so far - out-of-orderness - 1 ms)
are counted; when there are any, the oracle is not exact (both engines put such events aside
only if their periodic watermark had moved that far) and it says so.
Exit 0 when everything checked agrees; the last line says OK or FAIL.
"""
import argparse
import collections
import json
import os
import sys

MINUTE = 60_000


def files(d):
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if not f.startswith(".") and os.path.isfile(os.path.join(d, f)))


def lines(d):
    out = collections.Counter()
    for p in files(d):
        with open(p, "rb") as f:
            for line in f:
                line = line.rstrip(b"\r\n")
                if line.strip():
                    out[line.decode()] += 1
    return out


def clock(ts):
    """Riffle's clock_time: the UTC time of day of epoch ms ts, HH:MM:SS."""
    if ts >= 2**63 - 1:
        return "end"
    if ts <= 0:
        return "-"
    s = (ts // 1000) % 86400
    return f"{s // 3600:02}:{s // 60 % 60:02}:{s % 60:02}"


def alert_line(kind, order, courier, since, at):
    return json.dumps({"alert": kind, "order_id": order, "courier_id": courier,
                       "since": clock(since), "at": clock(at)}, separators=(",", ":"))


def oracle(path, promised_ms, silence_ms, bound_ms):
    """(expected alert lines as a Counter, events read, events behind the tightest watermark)."""
    by_order = collections.defaultdict(list)
    n = 0
    behind = 0
    max_ts = None
    with open(path) as f:
        for raw in f:
            if not raw.strip():
                continue
            e = json.loads(raw)
            ts = e["event_time"]
            if max_ts is not None and ts <= max_ts - bound_ms - 1:
                behind += 1
            max_ts = ts if max_ts is None else max(max_ts, ts)
            by_order[e["order_id"]].append((ts, n, e["kind"], e["courier_id"]))
            n += 1
    want = collections.Counter()
    for order, evs in by_order.items():
        evs.sort()
        for i, (ts, _, kind, courier) in enumerate(evs):
            if kind == "placed":
                picked = None
                done = False
                for (t2, _, k2, c2) in evs[i + 1:]:
                    if t2 - ts >= promised_ms:
                        break
                    if picked is None and k2 == "picked_up":
                        picked = (t2, c2)
                    elif picked is not None and k2 == "delivered":
                        done = True
                        break
                if not done:
                    if picked is not None:
                        want[alert_line("late_delivery", order, picked[1], picked[0],
                                        ts + promised_ms)] += 1
                    else:
                        want[alert_line("not_picked_up", order, courier, ts,
                                        ts + promised_ms)] += 1
            elif kind == "ping":
                silent = True
                for (t2, _, k2, _) in evs[i + 1:]:
                    if t2 - ts >= silence_ms:
                        break
                    if k2 in ("ping", "delivered"):
                        silent = False
                        break
                if silent:
                    want[alert_line("courier_silent", order, courier, ts, ts + silence_ms)] += 1
    return want, n, behind


def kinds(c):
    k = collections.Counter()
    for line, m in c.items():
        k[json.loads(line)["alert"]] += m
    return dict(sorted(k.items()))


def show_diff(name_a, a, name_b, b, limit=10):
    only_a, only_b = a - b, b - a
    for name, only in ((name_a, only_a), (name_b, only_b)):
        if only:
            print(f"  only {name}: {sum(only.values())} {kinds(only)}")
            for line in sorted(only)[:limit]:
                print(f"    {line}" + (f"  x{only[line]}" if only[line] > 1 else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("riffle", nargs="?")
    ap.add_argument("flink", nargs="?")
    ap.add_argument("--names", nargs=2, default=["riffle", "flink"], metavar=("A", "B"),
                    help="the two outputs' names in messages")
    ap.add_argument("--input")
    ap.add_argument("--oracle-only", metavar="IN")
    ap.add_argument("--promised-minutes", type=int, default=60)
    ap.add_argument("--silence-minutes", type=int, default=10)
    ap.add_argument("--out-of-orderness-secs", type=float, default=60)
    a = ap.parse_args()
    promised, silence = a.promised_minutes * MINUTE, a.silence_minutes * MINUTE
    bound = round(a.out_of_orderness_secs * 1000)
    if a.oracle_only:
        want, _, _ = oracle(a.oracle_only, promised, silence, bound)
        for line in sorted(want.elements()):
            print(line)
        return
    if not a.riffle or not a.flink:
        ap.error("RIFFLE_OUT and FLINK_OUT are needed")
    ok = True
    na, nb = a.names
    r = lines(os.path.join(a.riffle, "alerts"))
    f = lines(os.path.join(a.flink, "alerts"))
    same = r == f
    print(f"alerts: {na} {sum(r.values())} {kinds(r)}, {nb} {sum(f.values())} {kinds(f)}; "
          f"identical line multisets: {same}")
    if not same:
        ok = False
        show_diff(na, r, nb, f)
    rl = sum(lines(os.path.join(a.riffle, "late-events")).values())
    fl = sum(lines(os.path.join(a.flink, "late-events")).values())
    print(f"late events (not checked): {na} {rl}, {nb} {fl}")
    if a.input:
        want, n, behind = oracle(a.input, promised, silence, bound)
        exact = behind == 0
        print(f"oracle from input: {n} events, {sum(want.values())} alerts {kinds(want)}; "
              f"{na} matches: {r == want}; {nb} matches: {f == want}"
              + ("" if exact else f"  (NOT EXACT: {behind} events behind the watermark)"))
        if r != want:
            show_diff("oracle", want, na, r)
        if f != want:
            show_diff("oracle", want, nb, f)
        if exact:
            ok = ok and r == want and f == want
    print("OK" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
