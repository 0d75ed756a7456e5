#!/bin/bash
# Two riffle binaries in turns on the side-by-side harness's input (../shared/peers): the seed's
# ETL and windowed count at p = 1 and 2, ROUNDS rounds, CPU-s (user + sys) of each run and events
# per CPU-s. For a before/after comparison in one run on a shared machine.
#
#   scripts/ab-riffle.sh OLD_RIFFLE NEW_RIFFLE [ROUNDS]
set -euo pipefail
old=${1:?usage: ab-riffle.sh OLD_RIFFLE NEW_RIFFLE [ROUNDS]}
new=${2:?usage: ab-riffle.sh OLD_RIFFLE NEW_RIFFLE [ROUNDS]}
rounds=${3:-3}
input=${INPUT:-${XDG_CACHE_HOME:-$HOME/.cache}/riffle-peers/clicks-e5000000-u100000-d3000-s11.jsonl}
[ -f "$input" ] || { echo "no input $input: run ../shared/peers/side-by-side.sh once" >&2; exit 2; }
events=$(wc -l < "$input")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq "$rounds"); do
  for which in old new; do
    bin=$old; [ "$which" = new ] && bin=$new
    for workload in etl window; do
      for p in 1 2; do
        out=$work/out
        if [ "$workload" = etl ]; then
          cmd=("$bin" demo etl --input "$input" --output "$out" --no-web -p "$p")
        else
          cmd=("$bin" demo --input "$input" --output "$out" --no-web --window-secs 60
               --out-of-orderness-secs 5 --lateness-secs 0 -p "$p")
        fi
        /usr/bin/time -o "$work/time" -f "%U %S %e" "${cmd[@]}" >/dev/null 2>&1
        read -r user sys wall < "$work/time"
        awk -v r="$round" -v w="$which" -v l="$workload" -v p="$p" -v u="$user" -v s="$sys" \
            -v e="$wall" -v n="$events" \
            'BEGIN { printf "%s %s %s p=%s cpu=%.2f wall=%s events/cpu-s=%.0fK\n", r, w, l, p, u + s, e, n / (u + s) / 1000 }'
        rm -rf "$out"
      done
    done
  done
done
