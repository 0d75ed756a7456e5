#!/usr/bin/env bash
# The long kill -9 suite (docs/operations.md, "The kill -9 suite"): the real `riffle` binary is
# killed with SIGKILL at random moments and restored with `--restore latest` until its job
# finishes; the committed output must equal a run never killed. CI runs 2 seeds per case.
# usage: scripts/kill-suite.sh [SEEDS (25)] [CLICKS (60000)] [extra cargo test args...]
# With RocksDB state too: scripts/kill-suite.sh 25 60000 --features rocksdb
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-25}
clicks=${2:-60000}
shift $(( $# > 2 ? 2 : $# ))
RIFFLE_KILL_SEEDS=$seeds RIFFLE_KILL_CLICKS=$clicks \
  cargo test -p riffle-cli --test scenarios "$@" kill_suite -- --nocapture --test-threads 1
