"""Parses a Prometheus exposition (stdin) with the official Prometheus Python client's parsers
and prints its samples as JSON lines: {"family", "type", "name", "labels", "value"}.

    promparse.py openmetrics   # the strict OpenMetrics parser (what Prometheus negotiates)
    promparse.py classic       # the text format 0.0.4 parser

Exits non-zero, with the parser's message, when the text does not parse."""
import json
import sys

if sys.argv[1:] == ["openmetrics"]:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
elif sys.argv[1:] == ["classic"]:
    from prometheus_client.parser import text_string_to_metric_families
else:
    sys.exit("usage: promparse.py openmetrics|classic")

for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        print(json.dumps({
            "family": family.name,
            "type": family.type,
            "name": sample.name,
            "labels": sample.labels,
            "value": sample.value,
        }))
