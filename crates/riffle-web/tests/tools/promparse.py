"""Parses an OpenMetrics exposition (stdin) with the official Prometheus Python client's strict
parser and prints its samples as JSON lines: {"family", "type", "name", "labels", "value"}.
Exits non-zero, with the parser's message, when the text does not parse."""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        print(json.dumps({
            "family": family.name,
            "type": family.type,
            "name": sample.name,
            "labels": sample.labels,
            "value": sample.value,
        }))
