#!/usr/bin/env bash
# YOLO26n in the real Ultralytics trainer on a GPU machine (no network): eager-vs-replay
# bit-identity over 200 optimizer steps with the warm-up active, then stock MuSGD against ours
# at batch 4 and 16 (640 px, synthetic YOLO-format data generated offline). Writes
# $OUT/ultralytics-identity.json, $OUT/ultralytics-train.json and $OUT/ultralytics.log.
#   GATE_COMMIT=$(git rev-parse HEAD) scripts/gpu_ultralytics.sh [--parts identity,train]
# On a CPU, as a check that it runs: DEVICE=cpu scripts/gpu_ultralytics.sh --quick
# Needs the wheels of ultralytics 8.4.190, ultralytics-thop and polars in .whl/ (carry .whl)
# where the machine lacks ultralytics; they go to /tmp/ul-site, nothing else is installed.
set -uo pipefail
source "$(dirname "$0")/_gpu_env.sh"  # root, $OUT, PYTHONPATH, $PY; GATE_COMMIT -> commit=()
if ! $PY -c "import ultralytics" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ul-site .whl/ultralytics-*.whl .whl/ultralytics_thop-*.whl .whl/polars-*.whl \
    || { echo "ultralytics wheels missing: carry .whl (see docs/ultralytics.md)" >&2; exit 3; }
  export PYTHONPATH="$PYTHONPATH:/tmp/ul-site"
fi
timeout "${LIMIT_S:-420}" $PY scripts/ultralytics_gpu.py --device "${DEVICE:-cuda}" --out "$OUT" "${commit[@]}" "$@" \
  > "$OUT/ultralytics.log" 2>&1
rc=$?
grep -a -E "^(identity|batch|wrote)" "$OUT/ultralytics.log"
tail -n 5 "$OUT/ultralytics.log"
echo "gpu_ultralytics rc=$rc" | tee -a "$OUT/ultralytics.log"
exit $rc
