# Sourced by the GPU scripts (gpu_gate.sh, gpu_distributed.sh, gpu_yolo26.sh, gpu_ultralytics.sh):
# the repository root as working directory, $OUT made, Python from source, and the commit the
# evidence records.
# Anything already on PYTHONPATH (e.g. carried wheels unpacked to /tmp/ul-site) stays on it.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PY:-python3}
# The lent machine's copy of the tree may sit over a stale .git: GATE_COMMIT names the commit the
# tree came from (the full 40-hex name, from `git rev-parse HEAD` where it was committed, written
# literally), and that .git is hidden, so the evidence records the named commit.
commit=()
if [ -n "${GATE_COMMIT:-}" ]; then
  if ! [[ "$GATE_COMMIT" =~ ^[0-9a-f]{40}$ ]]; then
    echo "GATE_COMMIT must be a full commit name (40 hex digits, git rev-parse HEAD), not '$GATE_COMMIT'" >&2
    exit 2
  fi
  # Written as $(git rev-parse HEAD) in a command that runs on the lent machine, it names that
  # machine's stale HEAD, not the tree (it happened: 2026-12-01's first evidence named 98c4ed6).
  if [ "$(git rev-parse HEAD 2>/dev/null)" = "$GATE_COMMIT" ] && ! git diff --quiet HEAD -- 2>/dev/null; then
    echo "GATE_COMMIT $GATE_COMMIT is this machine's git HEAD, but the tree differs from it: the .git" \
      "here is stale. Write the full name of the commit the tree came from (run git rev-parse HEAD" \
      "where the tree was committed) literally." >&2
    exit 2
  fi
  commit=(--commit "$GATE_COMMIT")
  export GIT_DIR="$PWD/.gate-no-git"
fi

# need_ultralytics: import ultralytics, else install the carried wheels of ultralytics 8.4.190,
# ultralytics-thop and polars (.whl/, carry it) to /tmp/ul-site with nothing else; exit 3 without.
need_ultralytics() {
  $PY -c "import ultralytics" 2>/dev/null && return 0
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ul-site .whl/ultralytics-*.whl .whl/ultralytics_thop-*.whl .whl/polars-*.whl \
    || { echo "ultralytics wheels missing: carry .whl (see docs/ultralytics.md)" >&2; exit 3; }
  export PYTHONPATH="$PYTHONPATH:/tmp/ul-site"
}
