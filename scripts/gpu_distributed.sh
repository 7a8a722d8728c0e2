#!/usr/bin/env bash
# Multi-GPU run of distributed MuSGD (issues #9 and #17, WP-008 and WP-012): the distributed
# tests (gloo on CPU, and the NCCL checkpoint test on two GPUs), then the step of every arm timed
# with torchrun + NCCL for the nano detector, ViT-B and the 1 B-parameter set, next to the
# scaling model's predictions for this GPU count.
#
# Usage: OUT=/path/to/evidence [GATE_COMMIT=<full sha, written literally>] scripts/gpu_distributed.sh N
#   N (default: every visible GPU) is the largest world size timed. Worlds timed: 1 and N for
#   N <= 2; N alone above 2 (the world-1 baseline is in the N=2 run); WORLDS="1 2 4" overrides.
#   SETS (default "nano vit-b 1b") and STEPS (default 20 timed steps per arm) trim the run;
#   TESTS=1/0 forces or skips the tests (default: run them for N <= 2 only, the N=4 run being
#   the scaling one). On a machine without GPUs, torchrun runs the benchmark over gloo on the
#   CPU (a dry run: OUT=/tmp/d SETS=nano STEPS=2 scripts/gpu_distributed.sh 2).
# Writes exactly two files under $OUT: musgd-distributed-cuda-<N>gpu.json (every world's and
# arm's timings and bit checks, wpgate-evidence/1) and distributed-<N>gpu.log (tests,
# predictions, one line per timed run). Runs unattended: every stage has a time limit
# (STAGE_LIMIT_S, default 200 s) and a failed stage is logged, not fatal.
# Expected on H200s (an estimate from the 1-GPU calibration and torchrun start-up, not
# measured): N=2 about 4 min (tests about 1.5 min, then 2 worlds x 3 sets of about 20-45 s
# each), N=4 about 2 min (1 world x 3 sets); both together about 6 min.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the evidence}"
# The repository root, $OUT made, PYTHONPATH, $PY; GATE_COMMIT (40 hex digits) -> commit=(), and
# the lent machine's stale .git hidden so the evidence records the named commit.
source "$(dirname "$0")/_gpu_env.sh"
NGPU="${1:-$("$PY" -c 'import torch; print(torch.cuda.device_count())')}"
STEPS="${STEPS:-20}"
read -r -a sets <<< "${SETS:-nano vit-b 1b}"
LIMIT="${STAGE_LIMIT_S:-200}"
if [ "$NGPU" -lt 1 ]; then
    echo "gpu_distributed.sh: no CUDA GPU visible; pass N (e.g. 2) for a dry run over gloo" >&2
    exit 2
fi
if [ -n "${WORLDS:-}" ]; then
    read -r -a worlds <<< "$WORLDS"
elif [ "$NGPU" -le 2 ]; then
    worlds=(1 "$NGPU"); [ "$NGPU" -eq 1 ] && worlds=(1)
else
    worlds=("$NGPU")
fi

# NVLink multicast (NVLS) stays off, as the shared multi-GPU hosts require.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LOG="$OUT/distributed-${NGPU}gpu.log"
RAW="$(mktemp -d)"
trap 'rm -rf "$RAW"' EXIT
rc=0
{
    echo "== $(date -u +%FT%TZ) ${GATE_COMMIT:-no GATE_COMMIT} N=$NGPU worlds=${worlds[*]} steps=$STEPS"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
} > "$LOG" 2>&1

# 1. Correctness: gloo on CPU (world sizes 1-3, DDP and FSDP2, checkpoint across world sizes)
#    and, with two GPUs, the same checkpoint over NCCL.
start=$(date +%s)
TESTS="${TESTS:-$([ "$NGPU" -le 2 ] && echo 1 || echo 0)}"
cuda_tests=()
if [ "$NGPU" -ge 2 ]; then cuda_tests=(tests/cuda/test_distributed_resume_cuda.py); fi
if [ "$TESTS" = 1 ]; then
    timeout "$LIMIT" "$PY" -m pytest -q -p no:cacheprovider tests/musgd/test_distributed.py \
        tests/musgd/test_distributed_resume.py "${cuda_tests[@]}" >> "$LOG" 2>&1 || rc=1
    echo "== tests: $(( $(date +%s) - start )) s (rc so far $rc)" >> "$LOG"
fi

# 2. The scaling model at 2, 4 and 8 GPUs (and N), to put beside the timings.
for w in $(printf '%s\n' 2 4 8 "$NGPU" | sort -nu); do
    echo "== predictions at $w GPUs" >> "$LOG"
    "$PY" -m musgd.bench distributed --predict "$w" \
        --calibration "${CALIBRATION:-docs/evidence/musgd-distributed-cuda-h200-1gpu-20261129.json}" \
        >> "$LOG" 2>&1 || rc=1
done

# 3. Timings: every arm of every set at each world size.
for set in "${sets[@]}"; do
    for world in "${worlds[@]}"; do
        start=$(date +%s)
        timeout "$LIMIT" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$world" \
            -m musgd.bench distributed --set "$set" --steps "$STEPS" "${commit[@]}" \
            --out "$RAW/$set-$world.json" >> "$LOG" 2>&1 || rc=1
        echo "== $set at world $world: $(( $(date +%s) - start )) s (rc so far $rc)" >> "$LOG"
    done
done

# 4. One evidence file: the first run's header, every run's results.
"$PY" - "$RAW" "$OUT/musgd-distributed-cuda-${NGPU}gpu.json" >> "$LOG" 2>&1 <<'PY' || rc=1
import json, sys
from pathlib import Path

raw, out = Path(sys.argv[1]), Path(sys.argv[2])
docs = [json.loads(p.read_text()) for p in sorted(raw.glob("*.json"))]
if not docs:
    sys.exit("no benchmark run wrote its evidence; see the log above")
merged = dict(docs[0])
merged["results"] = {"runs": [d["results"] for d in docs]}
merged["commands"] = [d["command"] for d in docs]
out.write_text(json.dumps(merged, indent=2) + "\n")
print(f"wrote {out} ({len(docs)} runs)")
PY
echo "== done rc=$rc" >> "$LOG"
tail -n 40 "$LOG"
exit "$rc"
