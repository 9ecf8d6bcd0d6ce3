#!/usr/bin/env bash
# `make train`: train the default scenario on the default corpus, then report the
# validation loss, the checkpoint and a generated sample.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/small.json}
FORGE=build/forge

$FORGE train --config "$CONFIG" --overwrite  # make train trains afresh, replacing an earlier run
OUT=$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1])).get("out_dir","runs/default"))' "$CONFIG")
CKPT=$(cat "$OUT/checkpoints/latest")
echo
echo "== validation =="
$FORGE eval --checkpoint "$CKPT"
echo "checkpoint: $CKPT"
echo
echo "== sample (temperature 0.8, top-k 40) =="
$FORGE sample --checkpoint "$CKPT" --prompt "The " --tokens 300 --temperature 0.8 --top-k 40 --seed 7
echo
