#!/usr/bin/env bash
# Multi-GPU run of distributed MuSGD (issue #9 / WP-008): correctness tests, then the sharded
# step timed with torchrun + NCCL over 1, 2, 4, ... up to N GPUs, for the nano detector, ViT-B
# and the 1 B-parameter set, next to the scaling model's predictions.
#
# Usage: OUT=/path/to/evidence scripts/gpu_distributed.sh [N]   (N defaults to all GPUs)
# Writes under $OUT: musgd-distributed-cuda-<N>gpu.json (all timings in one evidence file),
# predictions-<N>gpu.md and tests.log. Needs torch with CUDA and this repo installed
# (pip install -e ".[optim,dev]") or PYTHONPATH=src. On a copy of the checkout without .git, set
# EVIDENCE_GIT_COMMIT=<sha> and EVIDENCE_GIT_DIRTY=true|false as read in the copied checkout.
set -euo pipefail

: "${OUT:?set OUT to the folder that receives the evidence}"
PYTHON="${PYTHON:-python}"
NGPU="${1:-$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')}"
STEPS="${STEPS:-50}"
if [ "$NGPU" -lt 1 ]; then
    echo "gpu_distributed.sh: no CUDA GPU visible; run scripts/bench_distributed.py on CPU instead" >&2
    exit 2
fi

# NVLink multicast (NVLS) stays off, as the shared multi-GPU hosts require.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="${PYTHONPATH:-}:src"
mkdir -p "$OUT"
RAW="$(mktemp -d)"
trap 'rm -rf "$RAW"' EXIT

# 1. Correctness on CPU/gloo (world sizes 1-3, DDP and FSDP2, checkpoint resume).
"$PYTHON" -m pytest -q tests/musgd/test_distributed.py 2>&1 | tee "$OUT/tests.log"

# 2. The scaling model at this GPU count, to compare against the timings.
"$PYTHON" scripts/bench_distributed.py --predict "$NGPU" | tee "$OUT/predictions-${NGPU}gpu.md"

# 3. Timings: every power of two up to NGPU, plus NGPU itself.
worlds=()
w=1
while [ "$w" -le "$NGPU" ]; do worlds+=("$w"); w=$((w * 2)); done
[ "${worlds[-1]}" -ne "$NGPU" ] && worlds+=("$NGPU")
for set in nano vit-b 1b; do
    for world in "${worlds[@]}"; do
        "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$world" \
            scripts/bench_distributed.py --set "$set" --steps "$STEPS" \
            --out "$RAW/$set-$world.json"
    done
done

# 4. One evidence file: the first run's header, every run's results.
"$PYTHON" - "$RAW" "$OUT/musgd-distributed-cuda-${NGPU}gpu.json" <<'PY'
import json, sys
from pathlib import Path

raw, out = Path(sys.argv[1]), Path(sys.argv[2])
docs = [json.loads(p.read_text()) for p in sorted(raw.glob("*.json"))]
merged = dict(docs[0])
merged["results"] = {"runs": [d["results"] for d in docs]}
merged["commands"] = [d["command"] for d in docs]
out.write_text(json.dumps(merged, indent=2) + "\n")
print(f"wrote {out} ({len(docs)} runs)")
PY
