#!/usr/bin/env bash
# Decode tok/s of a 4-bit GPTQ copy of the random TinyLlama-shaped 1B checkpoint against
# its BF16 original, `tessera run` at batch 1, alternating A/B runs (this machine's memory
# bandwidth is shared and noisy):
#   benchmarks/int4/int4_decode.sh WORK [REPEATS] [TOKENS] [THREADS]
# WORK/tl-bf16  written by `tessera gen-checkpoint` (hidden 2048, 22 layers, intermediate
#               5632, 32 heads / 4 KV heads, vocab 512, seed 1)
# WORK/tl-gptq  tests/worker/int4_checkpoint.py --method gptq --group-size 128 of it
# Result: benchmarks/results/int4_decode_llama1b.json
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:?usage: int4_decode.sh WORK [REPEATS] [TOKENS] [THREADS]}
repeats=${2:-3}; tokens=${3:-64}; threads=${4:-2}
bin=build/bin/tessera
if [ ! -f "$work/tl-bf16/model.safetensors" ]; then
  "$bin" gen-checkpoint --preset llama-1b --vocab 512 --layers 22 --intermediate 5632 \
    --kv-heads 4 --dtype bf16 --seed 1 --out "$work/tl-bf16"
fi
if [ ! -f "$work/tl-gptq/model.safetensors" ]; then
  python3 tests/worker/int4_checkpoint.py --src "$work/tl-bf16" --out "$work/tl-gptq" \
    --method gptq --group-size 128
fi
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_before=$(cat /proc/loadavg)
runs=()
for i in $(seq "$repeats"); do
  for side in bf16 gptq; do
    out=$("$bin" run --model "$work/tl-$side" --prompt "Once upon a time" --max-tokens "$tokens" \
      --temperature 0 --ignore-eos --threads "$threads" --json --quiet)
    runs+=("$side $out")
  done
done
load_after=$(cat /proc/loadavg)
runs_file=$(mktemp)
printf '%s\n' "${runs[@]}" > "$runs_file"
python3 - "$runs_file" "$started" "$load_before" "$load_after" "$repeats" "$tokens" "$threads" \
  "$work" <<'PY'
import json, os, statistics, subprocess, sys
runs_file, started, load_before, load_after, repeats, tokens, threads, work = sys.argv[1:]
runs = {"bf16": [], "gptq": []}
for line in open(runs_file):
    side, text = line.split(" ", 1)
    runs[side].append(json.loads(text)["timings"]["decode_tokens_per_second"])
def git(*a):
    return subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = open("/proc/cpuinfo").read()
def size(p):
    return os.path.getsize(os.path.join(work, p, "model.safetensors"))
result = {
    "figure": "decode tok/s, batch 1: INT4 GPTQ (group 128) vs BF16, random TinyLlama-shaped 1B",
    "conditions": {
        "date_utc": started,
        "machine": {"cpu_model": cpu, "logical_cores": os.cpu_count(),
                    "avx512f": " avx512f" in flags, "memory_bytes":
                    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")},
        "git": {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))},
        "load_average_before": load_before, "load_average_after": load_after,
        "threads": int(threads), "max_tokens": int(tokens), "repeats": int(repeats),
        "order": "alternating bf16, gptq", "shared_machine": "2 cores shared with other users",
    },
    "model": {"hidden": 2048, "layers": 22, "intermediate": 5632, "heads": 32, "kv_heads": 4,
              "vocab": 512, "bf16_file_bytes": size("tl-bf16"), "gptq_file_bytes": size("tl-gptq"),
              "gptq": "int4_checkpoint.py RTN asymmetric, group 128; embeddings stay BF16"},
    "decode_tokens_per_second": {
        side: {"runs": v, "median": statistics.median(v)} for side, v in runs.items()},
}
result["speedup_median"] = (result["decode_tokens_per_second"]["gptq"]["median"] /
                            result["decode_tokens_per_second"]["bf16"]["median"])
with open("benchmarks/results/int4_decode_llama1b.json", "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
print(json.dumps(result["decode_tokens_per_second"]), "speedup", round(result["speedup_median"], 3))
PY
rm -f "$runs_file"
