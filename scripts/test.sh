#!/usr/bin/env bash
# The whole test suite, as CI runs it on a fresh clone: installs and starts what the tests need
# (RocksDB's system library, an S3-compatible server for the checkpoint tests), then runs every test of the workspace.
# A dependency that cannot be installed or started fails the run; no test skips itself.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "test.sh: cargo is required (https://rustup.rs)" >&2; exit 1; }

# System libraries (RocksDB, libclang for its bindings).
./scripts/install-deps.sh

# S3-compatible storage for checkpoint tests (s3s-fs, installed into .tools/ on first use).
./scripts/s3-server.sh start
trap './scripts/s3-server.sh stop' EXIT
eval "$(./scripts/s3-server.sh env)"

cargo test --workspace --all-features --locked "$@"
