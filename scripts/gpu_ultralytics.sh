#!/usr/bin/env bash
# YOLO26n in the real Ultralytics trainer on a GPU machine (no network), 640 px, synthetic
# YOLO-format data generated offline: eager-vs-replay bit-identity over at least 200 optimizer
# steps with the warm-up active (identity), the iteration split into phases with the device
# synchronised at each boundary (phases), and stock MuSGD against ours in paired runs at batch 4
# and 16, unsynchronised (train); with --parts network, the network captured against eager, bit
# for bit (network), and --ours-network times our arm with it; --parts syncs counts each
# iteration's host synchronizations, --parts kernels profiles the device's kernels over a window
# of steady iterations (--parts host the host's functions, cProfile). Writes
# $OUT/ultralytics-{identity,network,phases,syncs,kernels,host,train}.json
# (the train evidence carries the loss and iteration curves) and $OUT/ultralytics.log. --task segment|pose|obb|classify trains that task;
# --arms stock,stock-compile,stock-channels-last,ours,ours-network,ours-network-compiled times
# those arms in rotating rounds (docs/ultralytics.md, "Arms").
#   GATE_COMMIT=<full sha of the tree, written literally> LIMIT_S=540 scripts/gpu_ultralytics.sh [--parts identity,phases,train] [--pairs 3]
# LIMIT_S bounds the whole script: the Python part gets what is left after the install, less a
# margin, as --budget-s, and skips the runs that would not fit (saying so in the log).
# On a CPU, as a check that it runs: DEVICE=cpu scripts/gpu_ultralytics.sh --quick
# Needs the wheels of ultralytics 8.4.190, ultralytics-thop and polars in .whl/ (carry .whl)
# where the machine lacks ultralytics; they go to /tmp/ul-site, nothing else is installed.
set -uo pipefail
source "$(dirname "$0")/_gpu_env.sh"  # root, $OUT, PYTHONPATH, $PY; GATE_COMMIT -> commit=()
need_ultralytics
limit=${LIMIT_S:-540}
left=$((limit - SECONDS))
# 30 s of margin: importing torch and writing the evidence after the last run.
budget=$((left - 30))
if [ "$budget" -lt 60 ]; then
  echo "LIMIT_S=$limit leaves ${left} s after the install: too little to measure" >&2
  exit 3
fi
echo "gpu_ultralytics: ${SECONDS} s spent on setup, budget ${budget} s of LIMIT_S=$limit"
timeout "$left" $PY -m musgd.bench ultralytics --device "${DEVICE:-cuda}" --out "$OUT" \
  --budget-s "$budget" "${commit[@]}" "$@" > "$OUT/ultralytics.log" 2>&1
rc=$?
grep -a -E "^(plan|identity|network|phases|syncs|kernels|host|round|batch|lowdata|budget|wrote)" "$OUT/ultralytics.log"
tail -n 5 "$OUT/ultralytics.log"
echo "gpu_ultralytics rc=$rc" | tee -a "$OUT/ultralytics.log"
exit $rc
