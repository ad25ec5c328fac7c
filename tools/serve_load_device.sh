#!/usr/bin/env bash
# Issue #31's serving rows on the GPU machine: `moestream serve --backend cuda
# --parallel N` and llama.cpp's llama-server (-np N --cont-batching) on the
# SAME file in the same call, driven by tools/serve_load.py (streaming chat
# clients; TTFT p50/p99, failed requests, aggregate decode tok/s) at CLIENTS
# concurrent clients, at --vram full and each of BUDGETS. A markdown table
# goes to $OUT/serve_rows.md.
#
#   OUT=dir [SRC_TAR=.src-x.tar] tools/serve_load_device.sh      (carry .deps and .llama)
#
# Resumable over several calls on one warm machine (each call stops after
# DEADLINE seconds; what is done is kept under WORK with markers), so it
# fits in 2 calls of 10 minutes:
#   call 1: build moestream (sm_90) on half the cores while llama-server
#           builds on the other half (detached: it goes on past the call),
#           and gen the Qwen3-30B-A3B-shape Q4_K file
#   call 2: the load runs (the llama.cpp build is waited for if unfinished)
# STEPS=build picks the build only; STEPS=load the runs only.
#
# llama-server runs -ngl 99 -fa on -np N --cont-batching -c N*CTX, at a
# budget with --n-cpu-moe K, K the fewest CPU layers whose VRAM use fits it
# (tools/quant_types_rows.py ncmoe, as tools/issue_rows_device.sh picks it),
# counting its KV cache and compute buffers as OVERHEAD_GIB. moestream runs
# --parallel N --ctx CTX (per slot) --vram full|BUDGET. Both get THREADS CPU
# threads. Peak device memory of each server run is sampled (nvidia-smi).
#
# Settings: CLIENTS (1,4,8,16), PARALLEL (16: slots of both servers, >= the
# most clients), CTX (1024 tokens per slot), REQUESTS (2 per client),
# MAX_TOKENS (128), BUDGETS (8G), OVERHEAD_GIB (2.0: f16 K/V of 16 x 1024
# tokens is 1.5 GiB, plus buffers), THREADS (nproc), DEADLINE (560 s),
# MS=path (a moestream already built: skips its build), LLAMA_BUILD (dir),
# LLAMA_FIRST_CORE (nproc/2: llama-server builds on the cores from there up),
# MODEL=file.gguf (another model: skips the gen).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
WORK=${WORK:-/tmp/serve_load}
STEPS=${STEPS:-build,load}
DEADLINE=${DEADLINE:-560}
CLIENTS=${CLIENTS:-1,4,8,16}
PARALLEL=${PARALLEL:-16}
CTX=${CTX:-1024}
REQUESTS=${REQUESTS:-2}
MAX_TOKENS=${MAX_TOKENS:-128}
BUDGETS=${BUDGETS:-8G}
OVERHEAD_GIB=${OVERHEAD_GIB:-2.0}
NCPU=$(nproc)
HALF=$((NCPU / 2))
LLAMA_FIRST_CORE=${LLAMA_FIRST_CORE:-$HALF}  # llama-server builds on cores LLAMA_FIRST_CORE..nproc-1
THREADS=${THREADS:-$NCPU}
MS=${MS:-$ROOT/build-serve/moestream}
LLAMA_BUILD=${LLAMA_BUILD:-/tmp/llama-server-build}
LS=$LLAMA_BUILD/bin/llama-server
MS_PORT=18080
LLAMA_PORT=18081
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
[ -f tools/device_env.sh ] && source tools/device_env.sh
pack() {
  cp "$WORK/log.txt" "$OUT/" 2> /dev/null
  [ -f "$WORK/serve_rows.md" ] && cp "$WORK/serve_rows.md" "$OUT/"
  tar czf "$OUT/serve_logs.tgz" -C "$WORK" --exclude='*.gguf' --exclude='*.part' . 2> /dev/null
}
say() { echo "[serve $(($(date +%s) - START))s] $*" | tee -a "$WORK/log.txt"; pack; }
left() { echo $((DEADLINE - ($(date +%s) - START))); }
tl() { local l; l=$(left); [ "$l" -lt 5 ] && l=5; echo "$l"; }  # a timeout from what is left (never 0: no limit)
want() { [[ ",$STEPS," == *",$1,"* ]]; }
fail_tail() { tail -n "${2:-5}" "$1" 2> /dev/null | tr '\n' ' ' | cut -c1-600; }

say "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2> /dev/null | head -1); $NCPU cores;" \
  "steps $STEPS; clients $CLIENTS; parallel $PARALLEL; ctx $CTX per slot; budgets full,$BUDGETS"

# ---- build: llama-server detached (it goes on across calls while the
# machine stays warm; llama_build.rc says when it has ended), moestream here.
wait_llama() {
  [ -x "$LS" ] && return 0
  while [ ! -f "$WORK/llama_build.rc" ] && [ "$(left)" -gt 60 ]; do sleep 5; done
  [ "$(cat "$WORK/llama_build.rc" 2> /dev/null)" = 0 ] && [ -x "$LS" ]
}
if want build || want load; then
  if [ ! -x "$LS" ] && [ ! -f "$WORK/llama_build.started" ]; then
    if [ ! -f .llama/llama-src.tar.xz ]; then
      say "no .llama/llama-src.tar.xz (carry .llama, made by tools/make_llama_src.sh): llama-server rows will be missing"
    else
      touch "$WORK/llama_build.started"
      # No web UI (its assets would be downloaded or built with npm); server only.
      setsid nohup bash -c "mkdir -p /tmp/llama-server-src && tar xJf .llama/llama-src.tar.xz -C /tmp/llama-server-src &&
        cmake -S /tmp/llama-server-src -B '$LLAMA_BUILD' -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
          -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
          -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF > '$WORK/llama_cfg.log' 2>&1 &&
        taskset -c $LLAMA_FIRST_CORE-$((NCPU - 1)) cmake --build '$LLAMA_BUILD' --target llama-server -j$((NCPU - LLAMA_FIRST_CORE)) \
          > '$WORK/llama_build.log' 2>&1; echo \$? > '$WORK/llama_build.rc'" \
        > "$WORK/llama_step.log" 2>&1 < /dev/null &
      say "llama-server build started (detached, cores $LLAMA_FIRST_CORE-$((NCPU - 1)))"
    fi
  fi
  if [ ! -x "$MS" ]; then
    SRC=.
    if [ -n "${SRC_TAR:-}" ]; then rm -rf /tmp/ms-serve-src && mkdir -p /tmp/ms-serve-src && tar xf "$SRC_TAR" -C /tmp/ms-serve-src && SRC=/tmp/ms-serve-src; fi
    cmake -S "$SRC" -B build-serve -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_BENCH=OFF \
      > "$WORK/ms_cfg.log" 2>&1 || { rm -rf build-serve; cmake -S "$SRC" -B build-serve -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_BENCH=OFF > "$WORK/ms_cfg.log" 2>&1; }
    timeout "$(tl)" taskset -c "0-$((HALF - 1))" cmake --build build-serve --target moestream -j"$HALF" > "$WORK/ms_build.log" 2>&1
    say "moestream build rc=$? ($("$MS" --version 2> /dev/null | head -1)) $(grep -E ' error' "$WORK/ms_build.log" | head -3 | tr '\n' ' ')"
  fi
  if [ -z "${MODEL:-}" ] && [ -x "$MS" ] && [ ! -f "$WORK/q30.gguf" ] && [ "$(left)" -gt 60 ]; then
    timeout "$(tl)" taskset -c "0-$((HALF - 1))" "$MS" gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k \
      -t "$HALF" -q -o "$WORK/q30.gguf.part" > "$WORK/gen_q30.log" 2>&1 && mv "$WORK/q30.gguf.part" "$WORK/q30.gguf"
    say "gen q30: $(du -h "$WORK/q30.gguf" 2> /dev/null | cut -f1) $(fail_tail "$WORK/gen_q30.log" 2)"
  fi
  say "llama-server build: $([ -x "$LS" ] && echo ready || echo "not yet (rc $(cat "$WORK/llama_build.rc" 2> /dev/null || echo running); $(fail_tail "$WORK/llama_build.log" 2))")"
fi
want load || { say "call ends (build only)"; exit 0; }
MODEL=${MODEL:-$WORK/q30.gguf}
[ -x "$MS" ] && [ -f "$MODEL" ] || { say "no moestream or no $MODEL: call again (the build step was cut short)"; exit 1; }

# llama.cpp's --n-cpu-moe per budget, from the file's layout.
if [ ! -s "$WORK/ncmoe.txt" ]; then
  "$MS" inspect --json "$MODEL" > "$WORK/inspect.json" 2> "$WORK/inspect.err"
  python3 tools/quant_types_rows.py ncmoe "$WORK/inspect.json" "$BUDGETS" "$OVERHEAD_GIB" > "$WORK/ncmoe.txt" \
    2> "$WORK/ncmoe_arith.txt" || say "ncmoe arithmetic failed: $(fail_tail "$WORK/ncmoe_arith.txt")"
fi
IFS=, read -r -a BUDGET_LIST <<< "$BUDGETS"
IFS=, read -r -a NCMOE_LIST <<< "$(cat "$WORK/ncmoe.txt" 2> /dev/null)"
say "llama.cpp --n-cpu-moe for $BUDGETS: ${NCMOE_LIST[*]:-?} ($(fail_tail "$WORK/ncmoe_arith.txt" 3))"

# Waits for a server's /health (200), at most $2 seconds; 1 when the process died.
wait_health() {  # port seconds pid
  local t=0
  while [ "$t" -lt "$2" ]; do
    kill -0 "$3" 2> /dev/null || return 1
    python3 -c "import http.client,sys; c=http.client.HTTPConnection('127.0.0.1',$1,timeout=3); c.request('GET','/health'); sys.exit(0 if c.getresponse().status==200 else 1)" 2> /dev/null && return 0
    sleep 1; t=$((t + 1))
  done
  return 1
}
stop_server() {  # pid
  kill -TERM "$1" 2> /dev/null
  for _ in $(seq 1 20); do kill -0 "$1" 2> /dev/null || return 0; sleep 0.5; done
  kill -KILL "$1" 2> /dev/null; wait "$1" 2> /dev/null
}

# One server at one budget over every client count: rows to $WORK/rows_<tag>.md.
run_server() {  # tag label port cmd...
  local tag=$1 label=$2 port=$3; shift 3
  [ -f "$WORK/$tag.done" ] && return 0
  if [ "$(left)" -lt 90 ]; then say "$tag: skipped, $(left) s left in this call (call again)"; return 1; fi
  "$@" > "$WORK/$tag.server.log" 2>&1 &
  local pid=$!
  (while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | head -1; sleep 0.5; done) \
    > "$WORK/$tag.vram.txt" &
  local sampler=$!
  if ! wait_health "$port" "$(($(left) - 60))" "$pid"; then
    say "$tag: the server did not come up: $(fail_tail "$WORK/$tag.server.log" 8)"
    kill "$sampler" 2> /dev/null; stop_server "$pid"; return 1
  fi
  say "$tag: up after $(($(date +%s) - START)) s of the call; $(grep -hE 'ctx [0-9]+ x|slots|n_ctx_seq|n_parallel' "$WORK/$tag.server.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
  rm -f "$WORK/$tag.json"
  timeout "$(tl)" python3 tools/serve_load.py --url "http://127.0.0.1:$port" --label "$label" --no-header \
    --clients "$CLIENTS" --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" --ready-timeout 30 --request-timeout 300 \
    --json-out "$WORK/$tag.json" $([ "$tag" != "${tag#llama}" ] && echo --openai-compat) \
    > "$WORK/rows_$tag.md" 2> "$WORK/$tag.load.err"
  local rc=$?
  kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null
  stop_server "$pid"
  local levels n_rows
  levels=$(echo "$CLIENTS" | tr ',' '\n' | grep -c .)
  n_rows=$(grep -c '^| ' "$WORK/rows_$tag.md" 2> /dev/null)
  echo "$(sort -n "$WORK/$tag.vram.txt" | tail -1)" > "$WORK/$tag.peak_mib"
  say "$tag: rc=$rc, $n_rows of $levels rows, peak VRAM $(cat "$WORK/$tag.peak_mib") MiB; $(fail_tail "$WORK/$tag.load.err" 3)"
  grep '^| ' "$WORK/rows_$tag.md" | tee -a "$WORK/log.txt"
  [ "$rc" = 0 ] && [ "$n_rows" = "$levels" ] && touch "$WORK/$tag.done"
}

for i in -1 $(seq 0 $((${#BUDGET_LIST[@]} - 1))); do
  if [ "$i" = -1 ]; then b=full; k=0; else b=${BUDGET_LIST[$i]}; k=${NCMOE_LIST[$i]:-}; fi
  run_server "ms_$b" "moestream $b" "$MS_PORT" "$MS" serve -m "$MODEL" --backend cuda --parallel "$PARALLEL" \
    --ctx "$CTX" --vram "$b" -t "$THREADS" --host 127.0.0.1 --port "$MS_PORT"
  if [ -z "$k" ]; then say "llama_$b: no --n-cpu-moe for $b (see ncmoe_arith.txt)"; continue; fi
  wait_llama || { say "llama_$b: llama-server not built (rc $(cat "$WORK/llama_build.rc" 2> /dev/null)): $(fail_tail "$WORK/llama_build.log" 3) $(fail_tail "$WORK/llama_cfg.log" 3)"; continue; }
  run_server "llama_$b" "llama-server $b (--n-cpu-moe $k)" "$LLAMA_PORT" "$LS" -m "$MODEL" -ngl 99 -fa on -np "$PARALLEL" \
    --cont-batching -c $((PARALLEL * CTX)) --n-cpu-moe "$k" -fit off -t "$THREADS" --host 127.0.0.1 --port "$LLAMA_PORT"
done

# The table: every row kept so far, the settings and the commands.
{
  echo "## Serving under load: moestream serve vs llama-server, same file, same call ($(date -u +%F))"
  echo
  echo "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2> /dev/null | head -1), $NCPU cores;" \
    "model: $([ "$MODEL" = "$WORK/q30.gguf" ] && echo "moestream gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k" || basename "$MODEL")" \
    "($(du -h "$MODEL" | cut -f1))"
  echo "moestream $("$MS" --version 2> /dev/null | head -1); llama.cpp $(cat .llama/llama-src.version 2> /dev/null)"
  echo "load: tools/serve_load.py --clients $CLIENTS --requests $REQUESTS --max-tokens $MAX_TOKENS (streaming chat," \
    "temperature 0, ignore_eos; every prompt different)"
  echo "servers: moestream serve --backend cuda --parallel $PARALLEL --ctx $CTX --vram full|B -t $THREADS;" \
    "llama-server -ngl 99 -fa on -np $PARALLEL --cont-batching -c $((PARALLEL * CTX)) --n-cpu-moe K -fit off -t $THREADS" \
    "(K for $BUDGETS: ${NCMOE_LIST[*]:-?}, from tools/quant_types_rows.py ncmoe with $OVERHEAD_GIB GiB for KV and buffers)"
  echo "peak VRAM (MiB, device-wide): $(for f in "$WORK"/*.peak_mib; do [ -f "$f" ] && printf '%s %s; ' "$(basename "$f" .peak_mib)" "$(cat "$f")"; done)"
  echo
  echo "| server | clients | requests | failed | TTFT p50 (s) | TTFT p99 (s) | decode tok/s (aggregate) | tok/s (wall) | tok/s per client |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for i in -1 $(seq 0 $((${#BUDGET_LIST[@]} - 1))); do
    if [ "$i" = -1 ]; then b=full; else b=${BUDGET_LIST[$i]}; fi
    for tag in "ms_$b" "llama_$b"; do grep -h '^| ' "$WORK/rows_$tag.md" 2> /dev/null; done
  done
} > "$WORK/serve_rows.md"
say "call ends; done: $(cd "$WORK" && ls ./*.done 2> /dev/null | tr '\n' ' ')"
cat "$WORK/serve_rows.md"
