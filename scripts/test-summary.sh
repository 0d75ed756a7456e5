#!/usr/bin/env bash
# The end of a test run, from its log (`cargo test` output): how many tests passed, failed and
# were ignored over every test binary, and, when some failed, which tests and which binaries
# (with the command that reruns each). usage: scripts/test-summary.sh LOG
set -euo pipefail
log=${1:?usage: scripts/test-summary.sh LOG}
awk '
    /^test result: / {
        for (i = 1; i <= NF; i++) {
            if ($(i + 1) ~ /^passed;?$/) passed += $i
            if ($(i + 1) ~ /^failed;?$/) failed += $i
            if ($(i + 1) ~ /^ignored;?$/) ignored += $i
        }
        binaries++
    }
    / \.\.\. FAILED$/ { sub(/^test /, ""); sub(/ \.\.\. FAILED$/, ""); tests[++n] = $0 }
    /^error: test failed, to rerun pass / { sub(/^error: test failed, to rerun pass /, ""); gsub(/`/, ""); reruns[++m] = $0 }
    END {
        printf "\n== test summary: %d passed, %d failed, %d ignored in %d test binaries ==\n", passed, failed, ignored, binaries
        for (i = 1; i <= n; i++) printf "FAILED: %s\n", tests[i]
        for (i = 1; i <= m; i++) printf "rerun: cargo test %s\n", reruns[i]
        if (n == 0 && m == 0) print "every test passed"
    }
' "$log"
