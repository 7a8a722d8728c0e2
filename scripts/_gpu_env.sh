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
# tree came from (the full 40-hex name, `git rev-parse HEAD`), and that .git is hidden, so the
# evidence records the named commit.
commit=()
if [ -n "${GATE_COMMIT:-}" ]; then
  if ! [[ "$GATE_COMMIT" =~ ^[0-9a-f]{40}$ ]]; then
    echo "GATE_COMMIT must be a full commit name (40 hex digits, git rev-parse HEAD), not '$GATE_COMMIT'" >&2
    exit 2
  fi
  commit=(--commit "$GATE_COMMIT")
  export GIT_DIR="$PWD/.gate-no-git"
fi
