#!/usr/bin/env python3
"""Turns `riffle nexmark generate`'s events into the nexmark project's `datagen` rows.

Input: the JSON lines of `riffle nexmark generate --output DIR` in `DIR/events/` (every event in
order, one object per line tagged by its type: {"person": {...}}, {"auction": {...}} or
{"bid": {...}}, times as epoch milliseconds).

Output: one JSON line per event, the columns of the nexmark project's `ddl_gen.sql` table:

    {"event_type": 0|1|2, "person": {...}|null, "auction": {...}|null, "bid": {...}|null}

with the nested fields under their `ddl_gen.sql` names (camelCase: emailAddress, creditCard,
dateTime, itemName, initialBid, ...) in its order, and every TIMESTAMP(3) value (dateTime,
expires) as "yyyy-MM-dd HH:mm:ss.SSS" in UTC: the text Flink's `json` format reads by default
('json.timestamp-format.standard' = 'SQL') and Riffle's JSON reader reads too.

Usage: nexmark_sql_input.py EVENTS_DIR_OR_FILE OUTPUT.jsonl
"""
import json
import os
import sys
import time

# ddl_gen.sql's nested rows: (field, is a timestamp)
FIELDS = {
    "person": [("id", 0), ("name", 0), ("emailAddress", 0), ("creditCard", 0), ("city", 0),
               ("state", 0), ("dateTime", 1), ("extra", 0)],
    "auction": [("id", 0), ("itemName", 0), ("description", 0), ("initialBid", 0),
                ("reserve", 0), ("dateTime", 1), ("expires", 1), ("seller", 0),
                ("category", 0), ("extra", 0)],
    "bid": [("auction", 0), ("bidder", 0), ("price", 0), ("channel", 0), ("url", 0),
            ("dateTime", 1), ("extra", 0)],
}
EVENT_TYPE = {"person": 0, "auction": 1, "bid": 2}

_seconds_cache = {}


def sql_timestamp(ms):
    """Epoch milliseconds -> 'yyyy-MM-dd HH:mm:ss.SSS' (UTC)."""
    if isinstance(ms, str):  # already text
        return ms
    secs, milli = divmod(int(ms), 1000)
    prefix = _seconds_cache.get(secs)
    if prefix is None:
        if len(_seconds_cache) > 100_000:
            _seconds_cache.clear()
        prefix = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(secs))
        _seconds_cache[secs] = prefix
    return f"{prefix}.{milli:03d}"


def convert(obj):
    (kind, event), = obj.items()
    fields = FIELDS[kind]
    row = {name: (sql_timestamp(event[name]) if ts and event.get(name) is not None
                  else event.get(name))
           for name, ts in fields}
    out = {"event_type": EVENT_TYPE[kind], "person": None, "auction": None, "bid": None}
    out[kind] = row
    return out


def input_files(path):
    if os.path.isdir(path):
        return [os.path.join(path, f) for f in sorted(os.listdir(path))
                if not f.startswith(".") and not f.startswith("_")]
    return [path]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    n = 0
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    with open(dst, "w", encoding="utf-8") as out:
        for path in input_files(src):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        continue
                    out.write(dumps(convert(json.loads(line))))
                    out.write("\n")
                    n += 1
    print(f"{n} events -> {dst}", file=sys.stderr)


if __name__ == "__main__":
    main()
