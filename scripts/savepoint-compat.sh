#!/usr/bin/env bash
# A savepoint taken by one riffle binary, restored by another (a new version of the job's
# engine): the seed's windowed demo on generated clicks is stopped part-way with a savepoint by
# OLD, then finished from that savepoint by NEW and, separately, by OLD. Both finishes must
# commit the same output, and OLD's part plus NEW's finish must hold every click of a run never
# stopped (counted in a window or late).
#
#   scripts/savepoint-compat.sh OLD_RIFFLE NEW_RIFFLE [heap|rocksdb]
set -euo pipefail
old=${1:?usage: savepoint-compat.sh OLD_RIFFLE NEW_RIFFLE [heap|rocksdb]}
new=${2:?usage: savepoint-compat.sh OLD_RIFFLE NEW_RIFFLE [heap|rocksdb]}
backend=${3:-heap}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
job=(demo --count 300000 --seed 5 --users 3000 --window-secs 60 --out-of-orderness-secs 5
     --lateness-secs 0 -p 1 --state-backend "$backend")

"$new" "${job[@]}" --output "$work/full" --no-web > "$work/full.log" 2>&1

"$old" "${job[@]}" --rate 40000 --output "$work/first" --checkpoint-interval-ms 300 \
  --checkpoint-dir "$work/chk" --savepoint-dir "$work/sp" --web-address 127.0.0.1:0 \
  > "$work/first.log" 2>&1 &
pid=$!
address=
for _ in $(seq 200); do
  address=$(grep -o "http://127.0.0.1:[0-9]*" "$work/first.log" 2>/dev/null | head -1 | sed 's|http://||') || true
  [ -n "$address" ] && break
  sleep 0.05
done
[ -n "$address" ] || { cat "$work/first.log"; echo "OLD did not start" >&2; exit 1; }
# Part-way: once a third of the clicks were read.
for _ in $(seq 400); do
  grep -q "read [4-9][0-9]\.[0-9]K\|read [1-9][0-9][0-9]\.[0-9]K" "$work/first.log" && break
  sleep 0.05
done
"$old" stop --address "$address" --savepoint "$work/sp" > "$work/stop.log" 2>&1
wait "$pid"
savepoint=$(ls -d "$work"/sp/savepoint-* | head -1)
echo "savepoint of OLD: $savepoint"

for which in new old; do
  bin=$new; [ "$which" = old ] && bin=$old
  "$bin" "${job[@]}" --output "$work/$which" --no-web --restore "$savepoint" \
    --checkpoint-dir "$work/chk-$which" > "$work/$which.log" 2>&1
done

lines() { cat "$1"/"$2"/* 2>/dev/null | sort; }
status=0
for kind in agg-clicks late-clicks; do
  if cmp -s <(lines "$work/new" "$kind") <(lines "$work/old" "$kind"); then
    echo "$kind: NEW and OLD restore the same ($(lines "$work/new" "$kind" | wc -l) lines)"
  else
    echo "$kind: NEW and OLD differ after the restore"; status=1
  fi
done
python3 - "$work" <<'EOF' || status=1
import glob, json, sys
work = sys.argv[1]
def clicks(run):
    counted = sum(json.loads(l)["count"] for f in glob.glob(f"{work}/{run}/agg-clicks/*") for l in open(f))
    late = sum(1 for f in glob.glob(f"{work}/{run}/late-clicks/*") for _ in open(f))
    return counted + late
both, full = clicks("first") + clicks("new"), clicks("full")
print(f"clicks: OLD's part + NEW's finish {both}, a run never stopped {full}")
sys.exit(0 if both == full else 1)
EOF
exit $status
