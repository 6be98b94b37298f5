#!/usr/bin/env bash
# bench/llama_server_latency.sh — the LLM path against llama.cpp's llama-server on one thread
# (bench/RESULTS.md, "LLM path against llama.cpp's llama-server"):
#   1. the server's own timings for the advisor's request and for llm:URL's request at
#      --llm-top 8..128 (llama_tests "[.llama_bench]", tests/llama/bench_llama_latency.cpp);
#   2. `mlprio-replay run --policy llm:URL --llm-top 32` on a generated trace: calls, tokens and
#      the wall time spent waiting for answers, against the same trace under fcfs.
# Needs scripts/llama-server-build and a release build with llama_tests and mlprio-replay.
#   bench/llama_server_latency.sh [BUILD_DIR] [JOBS]     (defaults build/release, 60)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
N=${2:-60}
CACHE="${MLPRIO_CACHE:-/var/cache/mlprio}/llama"
SERVER=${MLPRIO_LLAMA_SERVER:-$CACHE/build/bin/llama-server}
MODEL=${MLPRIO_LLAMA_MODEL:-$CACHE/tiny-llama.gguf}
[ -x "$SERVER" ] && [ -f "$MODEL" ] || { echo "no llama-server or model: run scripts/llama-server-build" >&2; exit 77; }

echo "mlprio commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core replay tests || echo ' (modified)')"
[ -f "$CACHE/build.stamp" ] && head -1 "$CACHE/build.stamp"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== 1. server timings (one thread, no prompt cache)"
"$B/bin/llama_tests" "[.llama_bench]" | grep -E '^(advisor|llm:URL)'

echo "== 2. mlprio-replay run --policy llm:URL --llm-top 32 ($N jobs, one-thread server)"
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -t 1 -tb 1 -np 1 -c 8192 --no-webui \
  --no-warmup >"$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
"$B/bin/mlprio-replay" generate --jobs "$N" --seed 5 -q -o "$dir/t.swf"
/usr/bin/time -f '%e s wall' "$B/bin/mlprio-replay" run --trace "$dir/t.swf" --policy fcfs --json \
  >"$dir/fcfs.json"
/usr/bin/time -f '%e s wall' "$B/bin/mlprio-replay" run --trace "$dir/t.swf" \
  --policy "llm:http://127.0.0.1:$port" --llm-top 32 --external-timeout 300 --json >"$dir/llm.json"
python3 - "$dir/llm.json" <<'EOF'
import json, sys
run = [r for r in json.load(open(sys.argv[1]))["runs"] if "agent" in r][0]
a = run["agent"]
calls = max(a["calls"], 1)
print("agent:", json.dumps(a))
print("per call: %.0f ms, %.0f prompt tokens, %.1f completion tokens; %.1f completion tokens/s of waiting"
      % (1000 * a["wait_seconds"] / calls, a["tokens_sent"] / calls, a["tokens_received"] / calls,
         a["tokens_received"] / max(a["wait_seconds"], 1e-9)))
EOF
