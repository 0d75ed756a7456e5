#!/usr/bin/env bash
# The long run of the fuzz-style property tests (docs/architecture.md, "Hostile input and
# fuzzing"): the same tests CI runs with a few hundred cases, here with many more.
#   scripts/fuzz.sh            20 000 cases per test
#   scripts/fuzz.sh 100000     as many as you say
# A failure prints the minimal input; proptest saves it under crates/riffle/proptest-regressions/,
# so the next normal test run replays it. Commit that file with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-20000}
[[ "$cases" =~ ^[0-9]+$ && "$cases" -gt 0 ]] || { echo "fuzz.sh: the number of cases must be a positive integer, got '$cases'" >&2; exit 2; }
export RIFFLE_FUZZ_CASES=$cases
export PROPTEST_MAX_SHRINK_ITERS=${PROPTEST_MAX_SHRINK_ITERS:-100000}
targets=(
  operators::decode::tests            # the click JSON decoder
  source::file::tests                 # the file source's line splitter and reader
  checkpoint::manifest::tests         # the checkpoint manifest reader
  checkpoint::restore::tests          # restore of damaged checkpoint files
  window::tests                       # window assignment at the edges of i64
  record::tests                       # event time
)
for target in "${targets[@]}"; do
  echo "== $target ($cases cases per property)"
  cargo test --release -p riffle --lib "$target"
done
