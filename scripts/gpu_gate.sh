#!/usr/bin/env bash
# The GPU gate: CUDA tests and the optimizer benchmarks in one call on a GPU machine.
# Runs from source (PYTHONPATH=src); writes logs and evidence JSON under $OUT (default ./out).
#   scripts/gpu_gate.sh [tests] [optimizer] [train] [profile] [triton] [tiles] [ultralytics] [floor]
#                       [targets] [host] [quick]
#   (none: the first three)
# Each stage has its own time limit (STAGE_LIMIT_S, default 240 s) so that one slow stage cannot
# take the others' results with it. Measured on an H200 (2026-11-29, 8b82f26): the CUDA tests
# take about 125 s, the optimizer benchmark on all three sets in five rounds about 150 s, the
# profile about 40 s, and the training benchmark (five pairs of four arms, 30 steps) about 115 s.
# All four fit one 600 s call with STAGE_LIMIT_S=215 (342 and 420 s in all at a077695 and
# f130040, 103 CUDA tests). Since then the CUDA tests grew: 133 took 163 s at f59d417
# (2026-12-01), and 200 s cut them short. At e58e4c6 (2026-12-04) 184 CUDA tests outgrew 230 s
# (177 done); the tests stage's own limit is TESTS_LIMIT_S, default 300 s: run it alone in one
# call and the benchmarks in a second, or TESTS_SHARDS=N to run N pytest processes side by side.
# targets: WP-024's floor target (TARGET_MODELS, default yolo26s.yaml,yolo26m.yaml; TARGET_BATCHES,
# default 4; TARGET_ROUNDS, default 2): the floors of the trained 4-class models, stock against
# ours-network-loss with the guard in the trainer, and `musgd.bench floor-ratio` over them.
# host: where a host-bound iteration goes (HOST_MODEL, default yolo26n.yaml; HOST_BATCHES,
# default 4; HOST_ARMS, default stock,ours-network-loss, with HOST_OPTIONS, default --ours-guard): the
# kernels part's busy share and the host part's cProfile tables, under $OUT/host.
# Pass GATE_COMMIT=<full sha of the tree, written literally>.
set -uo pipefail
source "$(dirname "$0")/_gpu_env.sh"  # root, $OUT, PYTHONPATH, $PY; GATE_COMMIT -> commit=()
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(tests optimizer train)
quick=""
for s in "${stages[@]}"; do [ "$s" = quick ] && quick="--quick"; done
if ! [[ "${TESTS_SHARDS:-1}" =~ ^[1-9][0-9]*$ ]]; then
  echo "TESTS_SHARDS must be a whole number of processes, 1 or more, not '${TESTS_SHARDS}'" >&2
  exit 2
fi
rc=0
{
  echo "== $(date -u +%FT%TZ) ${GATE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo no-git)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} 2>&1 | tee "$OUT/gate.log"
limit=${STAGE_LIMIT_S:-240}
for s in "${stages[@]}"; do
  case "$s" in
    tests)
      # The tests that compare with the installed Ultralytics skip without it: carried wheels serve.
      if compgen -G ".whl/ultralytics-*.whl" > /dev/null; then need_ultralytics; fi
      shards=${TESTS_SHARDS:-1}
      if [ "$shards" -le 1 ]; then
        timeout "${TESTS_LIMIT_S:-300}" $PY -m pytest -q -p no:cacheprovider -m cuda tests/cuda 2>&1 | tee "$OUT/cuda_tests.log" | tail -n 40
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
      else
        # TESTS_SHARDS=N: N pytest processes side by side on the one GPU, the test files dealt
        # round-robin (a process's CUDA memory counters are its own); their logs end up in one
        # file, cuda_tests.log, each under a "== shard K" line (a device call returns at most 8
        # files: one log per shard crowded out a benchmark's evidence at f62ac4a).
        mapfile -t files < <(ls tests/cuda/test_*.py)
        pids=()
        for ((k = 0; k < shards; k++)); do
          mine=()
          for ((i = k; i < ${#files[@]}; i += shards)); do mine+=("${files[i]}"); done
          timeout "${TESTS_LIMIT_S:-300}" $PY -m pytest -q -p no:cacheprovider -m cuda "${mine[@]}" \
            > "$OUT/cuda_tests.$k.log" 2>&1 &
          pids+=($!)
        done
        : > "$OUT/cuda_tests.log"
        for ((k = 0; k < shards; k++)); do
          wait "${pids[k]}" || rc=1
          echo "-- shard $k"; grep -aE "^(FAILED|ERROR)|Error|passed|failed|skipped in" "$OUT/cuda_tests.$k.log" | tail -n 20
          { echo "== shard $k: ${#files[@]} files dealt round-robin"; cat "$OUT/cuda_tests.$k.log"; } >> "$OUT/cuda_tests.log"
          rm -f "$OUT/cuda_tests.$k.log"
        done
      fi ;;
    optimizer)
      timeout "$limit" $PY -m musgd.bench optimizer --device cuda $quick "${commit[@]}" --out "$OUT/optimizer-step-h200.json" \
        2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    train)
      timeout "$limit" $PY -m musgd.bench train --device cuda $quick "${commit[@]}" --batch-sizes 4,16 --pairs 5 \
        --steps "${TRAIN_STEPS:-30}" --warmup "${TRAIN_WARMUP:-5}" \
        --arms "${TRAIN_ARMS:-bucketed eager,capture_updates,both,tensor-hyperparameters graphed}" \
        --out "$OUT/train-step-h200.json" 2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    profile)
      timeout "$limit" $PY -m musgd.bench profile --device cuda --set nano --branches "${BRANCHES:-1,2,4,8}" "${commit[@]}" --out "$OUT/" \
        2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    triton)
      # WP-009: YOLO26 steps per NS backend, kernels per yolo26n step, NS throughput (~30 s).
      timeout "$limit" $PY -m musgd.bench triton "${commit[@]}" --steps 30 --warmup 5 --ns-steps 5 --out "$OUT/" \
        2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    ultralytics)  # YOLO26n in the Ultralytics trainer; needs the .whl wheels (docs/ultralytics.md)
      OUT="$OUT" LIMIT_S="$limit" bash scripts/gpu_ultralytics.sh ${quick:+--quick} 2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    tiles)  # the Triton table's tile configurations (WP-023): TILE_CONFIGS, by default the fused
      # small matrices (/f) beside the chain alone
      timeout "$limit" $PY -m musgd.bench triton-tiles "${commit[@]}" --out "$OUT/" \
        --configs "${TILE_CONFIGS:-64/64/w4/s3,64/64/w4/s3/f,128/64/w8/s4,128/64/w8/s4/f}" \
        2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    floor)  # the one-graph floor of a YOLO26 iteration (WP-024/025); needs the .whl wheels
      need_ultralytics
      # shellcheck disable=SC2086  # FLOOR_ARGS is a list of options
      timeout "$limit" $PY -m musgd.bench floor --device cuda "${commit[@]}" --out "$OUT/floor-h200.json" \
        ${FLOOR_ARGS:---models yolo26n.yaml,yolo26s.yaml,yolo26m.yaml --batch-sizes 4,16 --layouts nchw,channels_last} \
        2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    targets)  # WP-024's floor target in one call: the trained model's floors, the trainer, the verdict
      need_ultralytics
      models=${TARGET_MODELS:-yolo26s.yaml,yolo26m.yaml}
      batches=${TARGET_BATCHES:-4}
      # --classes 4: the trainer bench's synthetic data (musgd.bench._yolo_data.CLASSES), the
      # model its trainer builds; a step every iteration in both (the bench's nbs is the batch).
      timeout "$limit" $PY -m musgd.bench floor --device cuda "${commit[@]}" --out "$OUT/targets-floor.json" \
        --models "$models" --batch-sizes "$batches" --layouts nchw --classes 4 2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
      files=("$OUT/targets-floor.json")
      IFS=, read -ra names <<< "$models"
      for m in "${names[@]}"; do
        dir="$OUT/targets-${m%.*}"
        # shellcheck disable=SC2086  # TARGET_OPTIONS is a list of options
        OUT="$dir" LIMIT_S="$limit" bash scripts/gpu_ultralytics.sh --model "$m" --parts train \
          --arms "${TARGET_ARMS:-stock,ours-network-loss}" ${TARGET_OPTIONS:---ours-guard} \
          --rounds "${TARGET_ROUNDS:-2}" --batch-sizes "$batches" --lowdata off 2>&1 | tee -a "$OUT/gate.log"
        if [ "${PIPESTATUS[0]}" -eq 0 ]; then
          rm -f "$dir/ultralytics.log"  # its lines are in gate.log; a call returns at most 8 files
        else
          rc=1
        fi
        files+=("$dir/ultralytics-train.json")
      done
      $PY -m musgd.bench floor-ratio "${files[@]}" --out "$OUT/floor-ratio.json" 2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    host)  # where a host-bound iteration goes (WP-024): the kernels' busy share, then cProfile
      dir="$OUT/host"
      # shellcheck disable=SC2086  # HOST_OPTIONS is a list of options
      OUT="$dir" LIMIT_S="$limit" bash scripts/gpu_ultralytics.sh --model "${HOST_MODEL:-yolo26n.yaml}" \
        --parts kernels,host --arms "${HOST_ARMS:-stock,ours-network-loss}" ${HOST_OPTIONS:---ours-guard} \
        --batch-sizes "${HOST_BATCHES:-4}" --lowdata off 2>&1 | tee -a "$OUT/gate.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
      rm -f "$dir/ultralytics.log" ;;
    quick) ;;
    *) echo "unknown stage: $s (use tests, optimizer, train, profile, triton, tiles, ultralytics, floor, targets, host, quick)" >&2; exit 2 ;;
  esac
done
echo "gpu_gate rc=$rc" | tee -a "$OUT/gate.log"
exit $rc
