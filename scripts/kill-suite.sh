#!/usr/bin/env bash
# The kill -9 suite (docs/operations.md, "The kill -9 suite"): the real `riffle` binary is killed
# with SIGKILL at the crash points of each seed's plan and restored with `--restore latest`; the
# committed output must equal a run never killed. CI runs 2 seeds per file case (1 for Kafka and
# the process group).
#
# usage: scripts/kill-suite.sh [SEEDS (25)] [CLICKS (60000)] [extra cargo test args...]
#          the file cases, SEEDS seeds each (RocksDB too: ... 25 60000 --features rocksdb; the
#          Kafka and group cases on heap state too: --all-features, with a broker running)
#        scripts/kill-suite.sh --long [SINGLE (1000)] [GROUP (100)] [--hours H (3)] [--out FILE]
#          every case, unattended: SINGLE crash points shared by the six single-process cases
#          (files: -p 1, -p 2, a directory at -p 2, RocksDB; Kafka: heap, RocksDB) and GROUP by
#          the two process-group cases (heap, RocksDB), compared with a run never killed (a
#          batch computation for groups). No case starts a new seed after its share of the
#          time: what is left of the H hours over the cases left. Writes the per-case table
#          (crash points, lost, duplicated, wrong, time) to stdout and to FILE (default
#          target/kill-suite/long-<UTC time>.md), the cases' logs beside it; exits 1 if any
#          case lost, duplicated or changed a line (its seed and how to rerun it are in the
#          table's file and the case's log).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" != "--long" ]]; then
  seeds=${1:-25}
  clicks=${2:-60000}
  shift $(( $# > 2 ? 2 : $# ))
  RIFFLE_KILL_SEEDS=$seeds RIFFLE_KILL_CLICKS=$clicks \
    exec cargo test -p riffle-cli --test scenarios "$@" kill_suite -- --nocapture --test-threads 1
fi

shift
single=1000
group=100
hours=3
out=""
positional=0
while (( $# )); do
  case "$1" in
    --hours) hours=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *)
      case $positional in
        0) single=$1 ;;
        1) group=$1 ;;
        *) echo "kill-suite: unexpected argument $1" >&2; exit 2 ;;
      esac
      positional=$((positional + 1)); shift ;;
  esac
done

stamp=$(date -u +%Y-%m-%dT%H%MZ)
out=${out:-target/kill-suite/long-$stamp.md}
logs=${out%.md}-logs
mkdir -p "$(dirname "$out")" "$logs"
logs=$(cd "$logs" && pwd)
report=$logs/report.txt
: > "$report"

# The broker the Kafka cases need (scripts/kafka.sh finds one already running).
./scripts/kafka.sh start >&2
eval "$(./scripts/kafka.sh env)"

# Each case: its test, its kind (single or group).
cases=(
  "kill_suite::files::kill_9_anywhere_one_file_parallelism_1 single"
  "kill_suite::files::kill_9_anywhere_one_file_parallelism_2 single"
  "kill_suite::files::kill_9_anywhere_a_directory_parallelism_2 single"
  "kill_suite::files::kill_9_anywhere_a_directory_parallelism_2_rocksdb single"
  "kill_suite::kafka::kill_9_anywhere_between_kafka_topics single"
  "kill_suite::kafka::kill_9_anywhere_between_kafka_topics_rocksdb single"
  "kill_suite::group::kill_9_members_of_a_process_group group"
  "kill_suite::group::kill_9_members_of_a_process_group_on_rocksdb group"
)
single_cases=6
group_cases=2
per_single=$(( (single + single_cases - 1) / single_cases ))
per_group=$(( (group + group_cases - 1) / group_cases ))

# Built once, and copied: a build in the same tree during the run (another engineer's) changes
# neither the suite nor the binary it kills. RIFFLE_KILL_HARNESS (the `scenarios` test binary)
# and RIFFLE_KILL_BINARY (`riffle`, built with every feature) run binaries built elsewhere, e.g.
# from a clean checkout of a release (RIFFLE_KILL_COMMIT names it in the table).
if [[ -n ${RIFFLE_KILL_HARNESS:-} ]]; then
  harness=$RIFFLE_KILL_HARNESS
  bin=${RIFFLE_KILL_BINARY:?RIFFLE_KILL_HARNESS needs RIFFLE_KILL_BINARY}
  built=${RIFFLE_KILL_COMMIT:-"(binaries given)"}
  dirty=""
else
  harness=$(cargo test -p riffle-cli --all-features --test scenarios --no-run --message-format=json \
    | grep -o '"executable":"[^"]*/scenarios-[^"]*"' | tail -1 | cut -d'"' -f4)
  bin=$(dirname "$(dirname "$harness")")/riffle
  built=$(git rev-parse --short HEAD)
  dirty=""
  [[ -n $(git status --porcelain --untracked-files=no) ]] && dirty=" (with uncommitted changes)"
fi
[[ -x $harness && -x $bin ]] || { echo "kill-suite: no test harness or riffle binary ($harness, $bin)" >&2; exit 1; }
cp "$harness" "$logs/scenarios"
cp "$bin" "$logs/riffle"
export RIFFLE_KILL_BINARY=$logs/riffle
started=$(date +%s)
deadline=$(awk -v s="$started" -v h="$hours" 'BEGIN { printf "%d", s + h * 3600 }')
echo "kill-suite --long: $single single-process crash points ($per_single a case), $group over groups ($per_group a case), within $hours h (until $(date -u -d "@$deadline" +%H:%M) UTC); logs in $logs" >&2

failed=0
left=${#cases[@]}
for entry in "${cases[@]}"; do
  read -r test kind <<<"$entry"
  now=$(date +%s)
  case_deadline=$(( now + (deadline > now ? (deadline - now) / left : 0) ))
  target=$per_single
  [[ $kind == group ]] && target=$per_group
  name=${test##*::}
  echo "$(date -u +%H:%M:%S) $test: $target crash points, no new seed after $(date -u -d "@$case_deadline" +%H:%M:%S) UTC" >&2
  if ! RIFFLE_KILL_CRASH_POINTS=$target RIFFLE_KILL_DEADLINE=$case_deadline RIFFLE_KILL_REPORT=$report \
    "$logs/scenarios" "$test" --exact --include-ignored --nocapture > "$logs/$name.log" 2>&1; then
    failed=1
    if ! grep -q "KILL-SUITE case=" "$logs/$name.log"; then
      echo "KILL-SUITE test=$test did not finish (see $logs/$name.log)" >> "$report"
    fi
  fi
  left=$((left - 1))
done
ended=$(date +%s)

# The table, from the cases' KILL-SUITE lines.
{
  echo "Kill suite, long run: \`scripts/kill-suite.sh --long $single $group --hours $hours\`, $(date -u -d "@$started" '+%Y-%m-%d %H:%M') to $(date -u -d "@$ended" '+%H:%M') UTC, $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), built from commit $built$dirty"
  echo
  echo "| Case | Crash points | Target | Lost | Duplicated | Wrong | Seeds | Time | Crash points by kind |"
  echo "|---|---|---|---|---|---|---|---|---|"
  awk -v ps="$per_single" -v pg="$per_group" '
    /^KILL-SUITE case=/ {
      delete f
      for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = substr($i, length(kv[1]) + 2) }
      target = (f["case"] ~ /^group/) ? pg : ps
      kinds = f["kinds"]; gsub(",", ", ", kinds)
      printf "| %s | %d | %d | %d | %d | %d | %d | %dm%02ds | %s |\n", f["case"], f["crash_points"], target, f["lost"], f["duplicated"], f["wrong"], f["seeds"], f["seconds"] / 60, f["seconds"] % 60, kinds
      kind = (f["case"] ~ /^group/) ? "group" : "single"
      n[kind] += f["crash_points"]; l[kind] += f["lost"]; d[kind] += f["duplicated"]; w[kind] += f["wrong"]; t[kind] += f["seconds"]
    }
    END {
      for (kind in n) printf "| **all %s** | **%d** | %d | **%d** | **%d** | **%d** | | %dm%02ds | |\n", kind == "single" ? "single-process" : "group", n[kind], kind == "single" ? ps * 6 : pg * 2, l[kind], d[kind], w[kind], t[kind] / 60, t[kind] % 60
    }' "$report"
  echo
  echo "Total time $(( (ended - started) / 60 )) min. Failures (seed, what, how to run it again):"
  grep -A3 '^KILL-SUITE-FAIL\|did not finish' "$report" || echo "none"
} | tee "$out"
echo "kill-suite --long: table in $out" >&2
exit $failed
