#!/usr/bin/env bash
# The end of a test run, from its log (`cargo test` output): how many tests passed, failed and
# were ignored over every test binary, and, when some failed, which tests and which binaries
# (with the command that reruns each); a build that failed is named, never "every test passed".
# usage: scripts/test-summary.sh LOG [CARGO_EXIT_STATUS]
set -euo pipefail
log=${1:?usage: scripts/test-summary.sh LOG [CARGO_EXIT_STATUS]}
status=${2:-0}
awk -v status="$status" '
    /^test result: / {
        for (i = 1; i <= NF; i++) {
            if ($(i + 1) ~ /^passed;?$/) passed += $i
            if ($(i + 1) ~ /^failed;?$/) failed += $i
            if ($(i + 1) ~ /^ignored;?$/) ignored += $i
        }
        binaries++
    }
    / \.\.\. FAILED$/ { sub(/^test /, ""); sub(/ \.\.\. FAILED$/, ""); tests[++n] = $0 }
    /^error: could not compile / { builds[++b] = $0 }
    /^error: test failed, to rerun pass / { sub(/^error: test failed, to rerun pass /, ""); gsub(/`/, ""); reruns[++m] = $0 }
    END {
        printf "\n== test summary: %d passed, %d failed, %d ignored in %d test binaries ==\n", passed, failed, ignored, binaries
        for (i = 1; i <= n; i++) printf "FAILED: %s\n", tests[i]
        for (i = 1; i <= m; i++) printf "rerun: cargo test %s\n", reruns[i]
        for (i = 1; i <= b; i++) printf "BUILD FAILED: %s\n", builds[i]
        if (n == 0 && m == 0 && b == 0 && status == 0) print "every test passed"
        else if (n == 0 && m == 0 && b == 0) printf "cargo test exited with status %d: see the errors above\n", status
    }
' "$log"
