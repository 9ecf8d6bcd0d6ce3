# The perf gate for llama, `fast` profile (EQUIVALENCE.md): llama-tiny trained 200 steps on
# real text by the engine and by the PyTorch reference in one `forge verify` run; SURPASS
# needs the loss curves CONVERGENT, the engine's final validation loss no more than 0.5%
# above the reference's, and the engine's median step faster than the reference's.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/llama-tiny.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"' out_dir='"run"'

verify_gate perf fast cfg.json SURPASS loss.png
