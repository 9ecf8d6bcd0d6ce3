# llama end to end on real text: training lowers the validation loss well below ln(256) and
# eval and sample work on the checkpoint (train_real_text in lib.sh, shared with gpt2); a
# run resumed from a checkpoint equals the straight run bit for bit (the resume gate).
source "$(dirname "$0")/lib.sh"
prepare_corpus
train_real_text llama-tiny "$SRC/configs/llama-tiny.json"

make_config cfg20.json cfg.json train.steps=20 train.log_interval=5
"$FORGE" train --config cfg20.json --out-dir straight --quiet
"$FORGE" train --config cfg20.json --out-dir split --stop-after 10 --quiet
"$FORGE" train --config cfg20.json --out-dir split --resume split/checkpoints/step_000010 --quiet
for f in model.safetensors optimizer.safetensors; do
  cmp straight/checkpoints/step_000020/$f split/checkpoints/step_000020/$f ||
    fail "$f differs between the straight and the resumed llama run"
  echo "ok: resumed llama run: $f identical"
done
