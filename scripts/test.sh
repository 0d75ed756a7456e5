#!/usr/bin/env bash
# The whole test suite, as CI runs it on a fresh clone: installs and starts what the tests need
# (RocksDB's system library, an S3-compatible server for the checkpoint tests, a Kafka broker, PostgreSQL, a schema registry,
# Chromium with playwright-core and the Prometheus text parser for the operations tests), then runs every test of the workspace.
# A dependency that cannot be installed or started fails the run; no test skips itself.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "test.sh: cargo is required (https://rustup.rs)" >&2; exit 1; }

# Formatting first: it needs nothing installed and fails in a second.
cargo fmt --all --check

# A clean build of every test binary needs about 5 GB under target/ (incremental compilation,
# which a fresh clone never reuses, would add almost 3 GB more: it is off here). A CI run once
# died in the linker with a bus error on a full disk: say so plainly before building.
export CARGO_INCREMENTAL=0
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
free_kb="$(df -Pk "$target_dir" | awk 'NR == 2 { print $4 }')"
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((8 * 1024 * 1024)) ]; then
    echo "test.sh: only $((free_kb / 1024)) MB free under $target_dir; the build needs about 5 GB (a linker dying with a bus error means the disk filled up)" >&2
fi

# System libraries (RocksDB, libclang for its bindings, OpenSSL and zlib for librdkafka) and
# Chromium for the web UI test.
./scripts/install-deps.sh
# The Prometheus client's OpenMetrics parser and playwright-core, for the operations tests.
eval "$(./scripts/test-tools.sh)"

# The tests' temporary files (checkpoint directories of the group tests, RocksDB stores, members'
# logs) go under one directory of this run, deleted at the end of a passing run and kept, with a
# line saying where, after a failing one. PostgreSQL's cluster is made for the run and deleted.
log="$(mktemp -t riffle-test-XXXXXX.log)"
run_tmp="$(mktemp -d -t riffle-test-tmp-XXXXXX)"
status=1
finish() {
    ./scripts/s3-server.sh stop; ./scripts/kafka.sh stop; ./scripts/postgres.sh remove; ./scripts/schema-registry.sh stop
    if [ "$status" -eq 0 ]; then
        rm -rf "$run_tmp"
    else
        echo "test.sh: the tests' temporary files are kept in $run_tmp" >&2
    fi
}
# S3-compatible storage for checkpoint tests (s3s-fs, installed into .tools/ on first use) and a
# Kafka broker for the connector tests (Apache Kafka from Maven Central, into .tools/).
./scripts/s3-server.sh start
trap finish EXIT
eval "$(./scripts/s3-server.sh env)"
./scripts/kafka.sh start
eval "$(./scripts/kafka.sh env)"
# A PostgreSQL server (Debian's, in a data directory of its own) for the Postgres connector.
./scripts/postgres.sh start
eval "$(./scripts/postgres.sh env)"
# A schema registry with Confluent's API (Apicurio Registry from Maven Central) for Avro.
./scripts/schema-registry.sh start
eval "$(./scripts/schema-registry.sh env)"

# From here on (the servers run with the system's), temporary files go to the run's directory.
export TMPDIR="$run_tmp"

# Lints, warnings included (missing docs on public items among them), on every target.
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

# Every test binary runs even when one fails (--no-fail-fast); the end says what failed.
status=0
cargo test --workspace --all-features --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
./scripts/test-summary.sh "$log" "$status"
exit "$status"
