#!/usr/bin/env python3
"""Compares the rows two engines wrote for one query (nexmark-sql-side-by-side.sh --check-only).

Each directory holds the committed part files of a `filesystem` sink (files whose names start
with `.` or `_`, in-progress or hidden, are skipped):
  --format json           one row per line: the two multisets of rows must be equal;
  --format debezium-json  a changelog ({"before":..,"after":..,"op":"c"|"u"|"r"|"d"}): each is
                          applied as a multiset (`after` added, `before` taken away; a row taken
                          away that is not there is an error) and the final multisets compared.
Values are normalised before comparing: a timestamp text ("2026-01-15 00:00:00",
"2026-01-15 00:00:00.4", "2026-01-15T00:00:00.400Z") to epoch milliseconds; numbers by value
(DECIMAL 63.560 == 63.56, an integral float == the integer); object keys unordered.

Usage: check_outputs.py --format json|debezium-json DIR_A DIR_B [--names A B] [--show 5]
                        [--b-upsert-key COL,..]
Prints one line `equal: N rows` or `DIFFER: ...` with examples; exit status 0 if equal, 1 if not.
"""
import argparse
import calendar
import collections
import decimal
import json
import os
import re
import sys

TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?Z?$")


def norm(v):
    if isinstance(v, dict):
        return ("{}", tuple(sorted((k, norm(x)) for k, x in v.items())))
    if isinstance(v, list):
        return ("[]", tuple(norm(x) for x in v))
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, decimal.Decimal)):
        d = decimal.Decimal(v)
        return ("n", d.normalize() if d != 0 else decimal.Decimal(0))
    if isinstance(v, str):
        m = TS.match(v)
        if m:
            y, mo, d, h, mi, s, frac = m.groups()
            ms = int(((frac or "") + "000")[:3])
            secs = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s or 0)))
            return ("ts", secs * 1000 + ms)
        return v
    return v


def files(d):
    out = []
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if not x.startswith((".", "_"))]
        out += [os.path.join(root, n) for n in sorted(names) if not n.startswith((".", "_"))]
    return sorted(out)


def read_rows(d, fmt, upsert_key=None):
    """The final multiset of rows in directory d, and a list of problems.

    upsert_key (debezium-json): the changelog is read as upserts on these columns: an `after`
    row replaces the row of its key, a `before` row deletes its key's row."""
    rows = collections.Counter()
    by_key = {}
    problems = []
    if not os.path.isdir(d):  # a sink that got no row creates no directory (Flink)
        return rows, []
    for path in files(d):
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                obj = json.loads(line, parse_float=decimal.Decimal)
                if fmt == "json":
                    rows[norm(obj)] += 1
                    continue
                op = obj.get("op")
                before, after = obj.get("before"), obj.get("after")
                if upsert_key:
                    for row, put in ((before, False), (after, True)):
                        if row is None:
                            continue
                        key = tuple(norm(row.get(k)) for k in upsert_key)
                        old = by_key.pop(key, None)
                        if old is not None:
                            rows[old] -= 1
                            if rows[old] == 0:
                                del rows[old]
                        if put:
                            by_key[key] = norm(row)
                            rows[by_key[key]] += 1
                    continue
                if before is not None:
                    k = norm(before)
                    if rows[k] <= 0:
                        problems.append(f"{path}:{i}: op {op!r} takes back a row not there: {before}")
                    else:
                        rows[k] -= 1
                        if rows[k] == 0:
                            del rows[k]
                if after is not None:
                    rows[norm(after)] += 1
    return rows, problems


def show(row):
    def plain(v):
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "{}":
            return {k: plain(x) for k, x in v[1]}
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "[]":
            return [plain(x) for x in v[1]]
        if isinstance(v, tuple) and len(v) == 2 and v[0] in ("n", "ts"):
            return format(v[1], "f") if v[0] == "n" else f"ts:{v[1]}"
        return v
    return json.dumps(plain(row), ensure_ascii=False)[:300]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--format", choices=["json", "debezium-json"], required=True)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", nargs=2, default=["riffle", "flink"])
    ap.add_argument("--show", type=int, default=5)
    ap.add_argument("--b-upsert-key", default="",
                    help="comma-separated columns: read B's debezium-json changelog as upserts "
                         "on them (for a changelog without its retractions)")
    args = ap.parse_args()
    ukey = [c for c in args.b_upsert_key.split(",") if c]
    ra, pa = read_rows(args.a, args.format)
    rb, pb = read_rows(args.b, args.format, ukey or None)
    na, nb = args.names
    how = f" ({nb}'s changelog read as upserts on {','.join(ukey)})" if ukey else ""
    if ra == rb and not pa and not pb:
        print(f"equal: {sum(ra.values())} rows ({len(ra)} distinct){how}")
        return 0
    only_a = ra - rb
    only_b = rb - ra
    print(f"DIFFER: {na} {sum(ra.values())} rows, {nb} {sum(rb.values())} rows; "
          f"only in {na}: {sum(only_a.values())}, only in {nb}: {sum(only_b.values())}"
          + (f"; changelog problems: {na} {len(pa)}, {nb} {len(pb)}" if pa or pb else "") + how)
    for name, probs in ((na, pa), (nb, pb)):
        for p in probs[: args.show]:
            print(f"  {name}: {p}")
    for name, only in ((na, only_a), (nb, only_b)):
        for row, n in list(only.items())[: args.show]:
            print(f"  only in {name} (x{n}): {show(row)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
