#!/usr/bin/env bash
# Tools the web UI and metrics tests drive, installed into the clone on first use:
# - the official Prometheus Python client (its strict OpenMetrics parser reads /metrics),
#   DuckDB and the `deltalake` package (independent readers of the Parquet files and Delta
#   tables Riffle writes), in a virtualenv at .tools/venv;
# - playwright-core from npm (drives Debian's headless Chromium, which install-deps.sh installs),
#   in crates/riffle-web/tests/tools/node_modules, pinned by its package-lock.json.
# Prints the environment the tests read (eval "$(scripts/test-tools.sh)").
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in python3 node npm; do
    command -v "$tool" >/dev/null || { echo "test-tools.sh: $tool is required" >&2; exit 1; }
done
if ! .tools/venv/bin/python -c 'import prometheus_client, duckdb, deltalake' 2>/dev/null; then
    echo "test-tools.sh: installing prometheus-client, duckdb and deltalake into .tools/venv" >&2
    python3 -m venv .tools/venv
    .tools/venv/bin/pip install --quiet --disable-pip-version-check prometheus-client==0.26.0 \
        duckdb==2.0.1 deltalake==1.6.6 >&2
fi
tools=crates/riffle-web/tests/tools
if [ ! -e "$tools/node_modules/playwright-core/package.json" ]; then
    echo "test-tools.sh: installing playwright-core into $tools" >&2
    (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
echo "export RIFFLE_PYTHON=$PWD/.tools/venv/bin/python"
echo "export RIFFLE_CHROMIUM=/usr/bin/chromium"
