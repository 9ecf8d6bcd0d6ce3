# The multistep gate for llama, `fast` profile: 8 optimizer steps side by side with the
# PyTorch reference, level 1 at every step (loss, grad norm, every gradient and updated
# parameter) and level 2 (every module) at steps 1 and 8, each tensor within TOLERANCE.
source "$(dirname "$0")/lib.sh"
VPY="$SRC/.venv/bin/python"
[ -x "$VPY" ] || fail "$VPY is missing: the reference side of this gate needs the .venv"
export PYTHONPATH="$SRC/reference" OMP_NUM_THREADS=2
prepare_corpus
make_config cfg.json "$SRC/configs/llama-tiny.json" train.steps=8 \
  train.eval_interval=0 train.eval_batches=0 model.padded_vocab_size=272 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'

"$VPY" -m forge_ref.train --config cfg.json --init-out init.safetensors
"$FORGE" train --config cfg.json --init init.safetensors --dump eng --dump-level 2 \
  --dump-act-steps 1,8 --quiet
"$VPY" -m forge_ref.train --config cfg.json --init init.safetensors --dump ref --dump-level 2 \
  --dump-act-steps 1,8 --threads 2 > /dev/null
"$VPY" -m forge_ref.compare eng ref --gate multistep --profile fast --required TOLERANCE --md report.md \
  || { sed -n 1,12p report.md >&2; fail "llama multistep gate (fast) below TOLERANCE"; }
