#!/usr/bin/env python3
"""Writes the SQL script of one Nexmark query for Riffle or Flink.

script = ddl_files.sql (the `datagen` table over the input file, beside this file)
       + the nexmark project's ddl_views.sql (person, auction, bid over `datagen`)
       + qN.sql (its sink table and INSERT INTO)
from SQL_DIR (riffle's copies: crates/riffle-nexmark/sql/). Changes made to the texts:
  * `${NEXMARK_TABLE}` -> datagen, `${NEXMARK_INPUT}` -> the input file;
  * every `dateTime` identifier back-quoted (Flink 2.3 reads DATETIME as a keyword), in the
    scripts of both engines (the same text for both);
  * Flink only: q14's `CREATE FUNCTION count_char AS '...'` names riffle.peers.nexmarksql.CountChar
    (Riffle's script keeps the nexmark project's class name: riffle sql registers count_char);
  * --sink json:DIR / debezium-json:DIR (the output check): the sink table's
    'connector' = 'blackhole' becomes a filesystem sink into DIR with that format.

Usage: nexmark_sql_script.py --query qN --sql-dir DIR --input FILE --engine riffle|flink
                             [--sink blackhole|json:DIR|debezium-json:DIR] --out SCRIPT.sql
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FLINK_COUNT_CHAR = "riffle.peers.nexmarksql.CountChar"


def backquote_datetime(text):
    # `dateTime` as a whole identifier, not already quoted (bid_dateTime etc. stay as they are)
    return re.sub(r"(?<![`\w])dateTime(?![`\w])", "`dateTime`", text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--query", required=True)
    ap.add_argument("--sql-dir", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--engine", choices=["riffle", "flink"], required=True)
    ap.add_argument("--sink", default="blackhole")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    def read(path):
        with open(path, encoding="utf-8") as f:
            return f.read().rstrip() + "\n"

    parts = [read(os.path.join(HERE, "ddl_files.sql")),
             read(os.path.join(a.sql_dir, "ddl_views.sql")),
             read(os.path.join(a.sql_dir, f"{a.query}.sql"))]
    text = "\n".join(parts)
    text = text.replace("${NEXMARK_TABLE}", "datagen")
    text = text.replace("${NEXMARK_INPUT}", os.path.abspath(a.input))
    left = re.findall(r"\$\{\w+\}", text)
    if left:
        sys.exit(f"{a.query}: unresolved {sorted(set(left))}")
    text = backquote_datetime(text)
    if a.engine == "flink":
        text = re.sub(r"(CREATE\s+(?:TEMPORARY\s+)?FUNCTION\s+count_char\s+AS\s+)'[^']*'",
                      rf"\1'{FLINK_COUNT_CHAR}'", text, flags=re.I)
    if a.sink != "blackhole":
        fmt, _, out_dir = a.sink.partition(":")
        if fmt not in ("json", "debezium-json") or not out_dir:
            sys.exit(f"bad --sink {a.sink}")
        text, n = re.subn(r"'connector'\s*=\s*'blackhole'",
                          f"'connector' = 'filesystem', 'path' = '{os.path.abspath(out_dir)}', "
                          f"'format' = '{fmt}'", text)
        if n != 1:
            sys.exit(f"{a.query}: expected one blackhole sink table, found {n}")
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
