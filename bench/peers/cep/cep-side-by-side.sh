#!/usr/bin/env bash
# Riffle's `demo cep` vs the same job on Apache Flink 2.3.0's CEP library (FlinkCEP, local
# MiniCluster, flink/), side by side on the same generated courier events (JSON lines): event
# time with 60 s out-of-orderness, keyed by order, a "late delivery" pattern (placed ->
# picked_up -> delivered within the promised minutes; its timeouts are the alerts) and a
# "courier silent" pattern (a ping not followed by a ping or the delivery within the silence
# minutes), alerts as JSON lines.
# For each parallelism, RUNS rounds; each round runs every system once (riffle, riffle-rocksdb,
# flink-hashmap, flink-rocksdb), alternating the order from round to round. Every measured run is
# wrapped in `flock $LOCK` (never overlaps other measured work) and `/usr/bin/time` (wall,
# user+sys CPU of the whole process, peak RSS). Round 1's alerts are checked equal (the multisets
# of alert lines, check_outputs.py) before anything is reported; the script stops if they differ.
#
# Usage (from the project root, or anywhere): bench/peers/cep/cep-side-by-side.sh [--orders N]
#          [--ping-secs S] [--seed S] [--runs R] [--ps "1 2"] [--no-rocksdb] [--oracle]
#          [--promised-minutes M] [--silence-minutes M] [--timeout-secs T] [--tag T]
#   --orders N     orders generated (default 1000000); --ping-secs S: seconds between a courier's
#                  pings (default 300: about 8 events an order); --seed (default 42)
#   --runs R       rounds (default 3); --ps "1 2": parallelisms (default "1")
#   --no-rocksdb   heap / hashmap state only (by default also Riffle's RocksDB backend, if the
#                  binary has it, and Flink's rocksdb backend)
#   --oracle       also work the expected alerts out from the input in Python (check_outputs.py
#                  --input: slow, ~1 min per million orders) and check both engines against them
#   --promised-minutes M (default 60), --silence-minutes M (default 10): passed to both engines
#   --timeout-secs T  a run still going after T seconds is stopped and recorded as a timeout
#                  (its CPU a lower bound), and that system is not run again at that P
#                  (default 1800; 0: none): FlinkCEP on RocksDB slows down badly (README.md)
#   --tag T        name of the results (default o<N>-ping<S>-s<seed>)
# Env: RIFFLE (default $PWD/target/release/riffle: cargo build --release -p riffle-cli
# [--features rocksdb]), CACHE (default ${XDG_CACHE_HOME:-~/.cache}/riffle-peers/cep), LOCK
# (/tmp/riffle-perf.lock), JAVA, JVM_OPTS ("-Xmx2g -XX:+UseG1GC"), FLINK_ARGS (more CepJob
# arguments, e.g. "--set pipeline.auto-watermark-interval=1s"; default none: Flink's defaults).
# Results: $CACHE/results-<tag>.tsv (one row per run) and a table on stdout (summarize.py); logs
# (each run's output and /usr/bin/time line, checks.txt) in $CACHE/logs-<tag>/.
set -euo pipefail
{ # the whole script is read before it runs: editing the file cannot change a run going on

HERE=$(cd "$(dirname "$0")" && pwd)
RIFFLE=${RIFFLE:-$PWD/target/release/riffle}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/riffle-peers/cep}
LOCK=${LOCK:-/tmp/riffle-perf.lock}
JAVA=${JAVA:-java}
JVM_OPTS=${JVM_OPTS:-"-Xmx2g -XX:+UseG1GC"}
ORDERS=1000000 PING_SECS=300 SEED=42 RUNS=3 PS="1" ROCKSDB=1 ORACLE=0 TAG=""
PROMISED=60 SILENCE=10 TIMEOUT=1800
FLINK_ARGS=${FLINK_ARGS:-}
OUT_OF_ORDERNESS_SECS=60 # the job's bound; the generated events are at most 20 s out of order
while [ $# -gt 0 ]; do
  case "$1" in
    --orders) ORDERS=$2; shift ;;
    --ping-secs) PING_SECS=$2; shift ;;
    --seed) SEED=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --ps) PS=$2; shift ;;
    --no-rocksdb) ROCKSDB=0 ;;
    --oracle) ORACLE=1 ;;
    --promised-minutes) PROMISED=$2; shift ;;
    --silence-minutes) SILENCE=$2; shift ;;
    --tag) TAG=$2; shift ;;
    --timeout-secs) TIMEOUT=$2; shift ;;
    -h|--help) sed -n '2,38p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$TAG" ] || TAG="o$ORDERS-ping$PING_SECS-s$SEED"
[ "$PROMISED" = 60 ] && [ "$SILENCE" = 10 ] || TAG="$TAG-pm$PROMISED-sm$SILENCE"

[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
command -v flock >/dev/null || { echo "needs flock (util-linux)" >&2; exit 1; }
[ -x "$RIFFLE" ] || { echo "no riffle binary at $RIFFLE (cargo build --release -p riffle-cli [--features rocksdb], or set RIFFLE)" >&2; exit 1; }
mkdir -p "$CACHE"

# --- input (generated once per orders / ping interval / seed) --------------------------------
PM=""; [ "$PROMISED" = 60 ] || PM="-pm$PROMISED" # the generator makes one delivery in twelve late for it
INPUT="$CACHE/courier-events-o$ORDERS-ping$PING_SECS-s$SEED$PM.jsonl"
if [ ! -s "$INPUT" ]; then
  echo "generating $INPUT ..." >&2
  rm -f "$INPUT.tmp"
  flock "$LOCK" "$RIFFLE" generate courier-events --orders "$ORDERS" --ping-secs "$PING_SECS" \
    --promised-minutes "$PROMISED" --seed "$SEED" --output "$INPUT.tmp" >"$INPUT.log" 2>&1 ||
    { cat "$INPUT.log" >&2; exit 1; }
  mv "$INPUT.tmp" "$INPUT"
  rm -f "$INPUT.log"
fi
EVENTS=$(grep -c . "$INPUT")

# --- Flink job (built once in the cache; runs do not go through Maven) ----------------------
BUILD="$CACHE/flink-build"
JAR="$BUILD/target/flink-cep-couriers-0.1.0.jar"
if [ ! -s "$JAR" ] || [ ! -s "$BUILD/target/classpath.txt" ] ||
   [ -n "$(find "$HERE/flink/src" "$HERE/flink/pom.xml" -newer "$JAR" 2>/dev/null)" ]; then
  echo "building the Flink job in $BUILD ..." >&2
  mkdir -p "$BUILD" && rm -rf "$BUILD/src" && cp -r "$HERE/flink/src" "$HERE/flink/pom.xml" "$BUILD/"
  (cd "$BUILD" && { mvn -q -o package 2>/dev/null || mvn -q package; })
fi
CP="$JAR:$(cat "$BUILD/target/classpath.txt")"

WORK=$(mktemp -d "$CACHE/work.XXXXXX") # outputs, state directories, the JVM's temp files
trap 'rm -rf "$WORK"' EXIT

# --- does this riffle have RocksDB? ----------------------------------------------------------
RIFFLE_ROCKSDB=0
if [ "$ROCKSDB" = 1 ]; then
  printf '{"order_id":1,"courier_id":1,"kind":"placed","event_time":1768491900000}\n' >"$WORK/probe.jsonl"
  if "$RIFFLE" demo cep --input "$WORK/probe.jsonl" --output "$WORK/probe" --no-web -p 1 \
       --state-backend rocksdb --state-dir "$WORK/probe.state" >/dev/null 2>&1; then
    RIFFLE_ROCKSDB=1
  else
    echo "note: $RIFFLE has no RocksDB state backend (cargo build --release -p riffle-cli --features rocksdb): Riffle runs on heap state only" >&2
  fi
  rm -rf "$WORK/probe" "$WORK/probe.state" "$WORK/probe.jsonl"
fi
SYSTEMS="riffle flink-hashmap"
[ "$RIFFLE_ROCKSDB" = 1 ] && SYSTEMS="$SYSTEMS riffle-rocksdb"
[ "$ROCKSDB" = 1 ] && SYSTEMS="$SYSTEMS flink-rocksdb"

RESULTS="$CACHE/results-$TAG.tsv"
LOGS="$CACHE/logs-$TAG"
mkdir -p "$LOGS"
printf 'p\tsystem\trun\tstatus\tevents\talerts\twall_s\tuser_s\tsys_s\trss_kb\tjvm_start_ms\tfirst_record_ms\tlast_close_ms\tend_ms\tnet_runtime_ms\tfirst_cpu_ns\tlast_close_cpu_ns\tend_cpu_ns\tgc_ms\n' >"$RESULTS"

command_for() { # p system outdir -> CMD
  local p=$1 system=$2 out=$3
  case "$system" in
    riffle|riffle-rocksdb)
      CMD=("$RIFFLE" demo cep --input "$INPUT" --output "$out" --no-web -p "$p"
           --promised-minutes "$PROMISED" --silence-minutes "$SILENCE"
           --out-of-orderness-secs "$OUT_OF_ORDERNESS_SECS")
      if [ "$system" = riffle-rocksdb ]; then
        CMD+=(--state-backend rocksdb --state-dir "$out.state")
      fi ;;
    flink-*)
      # shellcheck disable=SC2206
      CMD=("$JAVA" $JVM_OPTS -Dorg.slf4j.simpleLogger.defaultLogLevel=error
           -Djava.io.tmpdir="$out.tmp" -cp "$CP" riffle.peers.cep.CepJob
           --input "$INPUT" --output "$out" -p "$p" --state-backend "${system#flink-}"
           --promised-minutes "$PROMISED" --silence-minutes "$SILENCE"
           --out-of-orderness-secs "$OUT_OF_ORDERNESS_SECS" $FLINK_ARGS) ;;
  esac
}

measure() { # p system run
  local p=$1 system=$2 run=$3
  local out="$WORK/out-p$p-$system"
  local log="$LOGS/p$p-$system-r$run.log"
  rm -rf "$out" "$out.state" "$out.tmp"
  mkdir -p "$out.tmp"
  command_for "$p" "$system" "$out"
  echo "run $run: p=$p $system" >&2
  printf '%q ' "${CMD[@]}" >"$log.cmd"
  local rc=0 status=ok
  # `timeout` (0: none) inside `time`: the CPU of a stopped run is still counted
  flock "$LOCK" /usr/bin/time -f '%e %U %S %M' -o "$log.time" \
    timeout --kill-after=30 "$TIMEOUT" "${CMD[@]}" >"$log" 2>&1 || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    status=timeout
    echo "TIMEOUT: p=$p $system stopped after $TIMEOUT s (recorded as a timeout; its output is not checked)" >&2
    TIMED_OUT="$TIMED_OUT p$p-$system-r$run"
  elif [ "$rc" != 0 ]; then
    echo "FAILED (exit $rc): p=$p $system; command in $log.cmd, output in $log:" >&2
    grep -v '^\s*at ' "$log" | tail -5 >&2
    exit 1
  fi
  rm -rf "$out.state" "$out.tmp"
  local wall user sys rss alerts
  read -r wall user sys rss < <(tail -1 "$log.time") # after a "Command exited with ..." line
  alerts=$(find "$out/alerts" -maxdepth 1 -type f ! -name '.*' -exec cat {} + 2>/dev/null | grep -c . || true)
  local t jvm="" first="" close="" end="" net="" fcpu="" ccpu="" ecpu="" gc=""
  t=$(grep '^FLINK_TIMING' "$log" || true)
  if [ -n "$t" ]; then
    kv() { sed -n "s/.* $1=\([0-9-]*\).*/\1/p" <<<"$t"; }
    jvm=$(kv jvm_start_ms) first=$(kv first_record_ms) close=$(kv last_close_ms)
    end=$(kv end_ms) net=$(kv net_runtime_ms) fcpu=$(kv first_record_cpu_ns)
    ccpu=$(kv last_close_cpu_ns) ecpu=$(kv end_cpu_ns) gc=$(kv gc_ms)
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$p" "$system" "$run" "$status" "$EVENTS" "$alerts" "$wall" "$user" "$sys" "$rss" \
    "$jvm" "$first" "$close" "$end" "$net" "$fcpu" "$ccpu" "$ecpu" "$gc" >>"$RESULTS"
}

check() { # p: compare round 1's alerts of every system with riffle's (heap)
  local p=$1 system args=(--promised-minutes "$PROMISED" --silence-minutes "$SILENCE"
                          --out-of-orderness-secs "$OUT_OF_ORDERNESS_SECS")
  for system in $SYSTEMS; do
    [ "$system" = riffle ] && continue
    if [[ " $TIMED_OUT " == *" p$p-riffle-r1 "* || " $TIMED_OUT " == *" p$p-$system-r1 "* ]]; then
      echo "check p=$p riffle vs $system: not checked (a run timed out)" | tee -a "$LOGS/checks.txt" >&2
      continue
    fi
    local extra=()
    # the oracle once per parallelism (it does not depend on the system)
    if [ "$ORACLE" = 1 ] && [ "$system" = flink-hashmap ]; then extra=(--input "$INPUT"); fi
    echo "check p=$p riffle vs $system:" | tee -a "$LOGS/checks.txt" >&2
    python3 "$HERE/check_outputs.py" "$WORK/out-p$p-riffle" "$WORK/out-p$p-$system" \
      --names riffle "$system" "${args[@]}" "${extra[@]}" | tee -a "$LOGS/checks.txt" >&2 ||
      { echo "OUTPUTS DIFFER: p=$p riffle vs $system (outputs kept in $LOGS/differ-p$p/)" >&2
        mkdir -p "$LOGS/differ-p$p"
        cp -r "$WORK/out-p$p-riffle" "$WORK/out-p$p-$system" "$LOGS/differ-p$p/"
        exit 1; }
  done
}

echo "input: $INPUT ($EVENTS events); riffle: $RIFFLE (rocksdb: $RIFFLE_ROCKSDB); systems: $SYSTEMS; results: $RESULTS" >&2
: >"$LOGS/checks.txt"
TIMED_OUT=""
read -r -a systems <<<"$SYSTEMS"
for p in $PS; do
  for run in $(seq 1 "$RUNS"); do
    order=("${systems[@]}")
    if [ $((run % 2)) = 0 ]; then # alternate the order from round to round
      order=(); for ((i = ${#systems[@]} - 1; i >= 0; i--)); do order+=("${systems[i]}"); done
    fi
    for system in "${order[@]}"; do
      if [[ " $TIMED_OUT " == *" p$p-$system-r"* ]]; then # a bound once is enough
        echo "run $run: p=$p $system skipped (timed out in an earlier round)" >&2
        continue
      fi
      measure "$p" "$system" "$run"
    done
    [ "$run" = 1 ] && check "$p"
  done
done
rm -rf "$WORK"
python3 "$HERE/summarize.py" "$RESULTS"
exit
}
