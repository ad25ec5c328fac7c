#!/usr/bin/env bash
# Issue #29's open rows (tg128 at depth 32768 at the larger tiered budget)
# against the tiered prompt pass's rule, one binary, one call: each variant
# (a set of moestream flags: --even-passes, --pass-link-share F,
# --pass-memory-share F, -b N) runs `bench -p 0 -n 128 -d DEPTH` and
# `bench -p PP -n 0` at BUDGET; the chosen pass (bench -v's "prompt passes
# of" line) and the rows go to $OUT/pass_rule.md.
#
#   OUT=dir MS=build-gpu/moestream BUDGET=10.5G \
#     VARIANTS='|--even-passes|--even-passes --pass-link-share 0.3' \
#     tools/pass_rule_device.sh MODEL.gguf
#
# Settings: BUDGET (10.5G), VARIANTS ('|'-separated; an empty one is the
# default rule), DEPTH (32768), PP (8192,32768; empty: no pp runs), REPS (2),
# THREADS (16), LIMIT_S (per bench call, 150).
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: tools/pass_rule_device.sh MODEL.gguf}
OUT=${OUT:-$(pwd)/gpu_out}
MS=${MS:-build-gpu/moestream}
BUDGET=${BUDGET:-10.5G}
VARIANTS=${VARIANTS:-|--even-passes|--even-passes --pass-link-share 0.3}
DEPTH=${DEPTH:-32768}
PP=${PP-8192,32768}
REPS=${REPS:-2}
THREADS=${THREADS:-16}
LIMIT_S=${LIMIT_S:-150}
mkdir -p "$OUT"
md=$OUT/pass_rule.md
tag=$(basename "$MODEL" .gguf)
{
  echo "## $(basename "$MODEL") at --vram $BUDGET: $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1), $(date -u +%F)"
  echo
  echo "| variant | test | t/s | pass chosen | expert slots, hit rate (the call's) |"
  echo "|---|---|---:|---|---|"
} >> "$md"
row() {  # variant-label test-args...
  local label=$1; shift
  local log=$OUT/${tag}_$(echo "$label $*" | tr -c 'a-zA-Z0-9' '_').log
  # shellcheck disable=SC2086
  timeout "$LIMIT_S" "$MS" bench -m "$MODEL" --backend "${BACKEND:-cuda}" --vram "$BUDGET" -t "$THREADS" -r "$REPS" $label "$@" > "$log" 2>&1
  local rc=$?
  local pass cache
  pass=$(grep -m1 -o "prompt passes of [0-9]* tokens" "$log" | grep -o "[0-9]*")
  cache=$(grep -m1 -oE "[0-9]+ expert slots \([0-9.]+% of experts\); hit rate [0-9.]+%" "$log")
  grep -E "^\| [a-z0-9]" "$log" | grep -v "^| model" | while IFS="|" read -r _ _ _ _ test tps _; do
    echo "| ${label:-default} | ${test// /} | ${tps// /} | ${pass:-?} | ${cache:--} |" >> "$md"
  done
  [ $rc -eq 0 ] || echo "| ${label:-default} | $* | rc=$rc | ${pass:-?} | |" >> "$md"
}
IFS='|' read -r -a variants <<< "$VARIANTS"
for v in "${variants[@]}"; do
  row "$v" -p 0 -n 128 -d "$DEPTH"
  [ -n "$PP" ] && row "$v" -p "$PP" -n 0
done
echo >> "$md"
cat "$md"
