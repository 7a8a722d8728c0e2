#!/usr/bin/env bash
# WP-010's GPU measurement: MuSGD's default eager step against the installed Ultralytics MuSGD on
# the YOLO26 parameter sets, in one process, and the torch.compile CUDA test. On CUDA it also
# times what WP-009 and WP-011 compare: both replay flags, the default step captured whole, this
# package's Ultralytics flavour with both flags, and the peer captured whole.
# Runs from source (PYTHONPATH=src); writes logs and evidence JSON under $OUT (default ./out).
#   scripts/gpu_yolo26.sh            on a GPU: the compile test, then the benchmark
#   DEVICE=cpu scripts/gpu_yolo26.sh quick   a CPU smoke run of the same commands
# Pass GATE_COMMIT=<full sha of the tree, written literally> where the tree's .git is stale (see gpu_gate.sh).
# Expected on an H200: compile test about 1-2 min, benchmark about 2-3 min (three sets, up to
# nine variants, seven rounds of 40 steps).
set -uo pipefail
source "$(dirname "$0")/_gpu_env.sh"  # root, $OUT, PYTHONPATH, $PY; GATE_COMMIT -> commit=()
DEVICE=${DEVICE:-cuda}
limit=${STAGE_LIMIT_S:-280}
sizing=(--rounds 7 --steps 280 --warmup 10)
[ "${1:-}" = quick ] && sizing=(--rounds 1 --steps 2 --warmup 1)
variants="bucketed eager,torch-NS eager,both,torch-NS both,bucketed eager graphed,tensor-hyperparameters graphed,musgd.ultralytics both"
[ "$DEVICE" = cuda ] || variants="bucketed eager,musgd.ultralytics eager"
# The peer joins when its module imports here (it is optional, never installed by this project);
# on a machine without it, carried wheels in .whl/ (docs/ultralytics.md) go to /tmp/ul-site.
if ! $PY -c "import ultralytics.optim.muon" >/dev/null 2>&1 && ls .whl/ultralytics-*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ul-site .whl/ultralytics-*.whl .whl/ultralytics_thop-*.whl .whl/polars-*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/ul-site"
fi
if $PY -c "import ultralytics.optim.muon" >/dev/null 2>&1; then
  variants="$variants,ultralytics MuSGD"
  [ "$DEVICE" = cuda ] && variants="$variants,ultralytics MuSGD graphed"
else
  echo "ultralytics MuSGD is not importable here: timing MuSGD alone" | tee -a "$OUT/yolo26.log"
fi
rc=0
# COMPILE_TEST=0 skips the compile test where the CUDA tests of the same call already ran it.
if [ "$DEVICE" = cuda ] && [ "${COMPILE_TEST:-1}" != 0 ]; then
  timeout "$limit" $PY -m pytest -q -p no:cacheprovider -m cuda tests/cuda/test_compile_cuda.py \
    2>&1 | tee "$OUT/compile_cuda_tests.log" | tail -n 20
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
timeout "$limit" $PY -m musgd.bench optimizer --device "$DEVICE" --sets yolo26n,yolo26s,yolo26m \
  --variants "$variants" "${sizing[@]}" "${commit[@]}" --out "$OUT/optimizer-step-yolo26-$DEVICE.json" \
  2>&1 | tee -a "$OUT/yolo26.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# The target: default eager at least 1.3x faster than the peer, per round, on every set.
$PY scripts/yolo26_verdict.py "$OUT/optimizer-step-yolo26-$DEVICE.json" 2>&1 | tee -a "$OUT/yolo26.log"
echo "gpu_yolo26 rc=$rc" | tee -a "$OUT/yolo26.log"
exit $rc
