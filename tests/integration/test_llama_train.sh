# llama end to end on real text: training lowers the validation loss well below ln(256);
# a run resumed from a checkpoint equals the straight run bit for bit (the resume gate);
# eval and sample work on the checkpoint.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/llama-tiny.json" train.steps=200 train.eval_interval=0 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'
"$FORGE" train --config cfg.json --quiet
"$FORGE" eval --checkpoint run/checkpoints/step_000200 --json > eval.json
"$PY" - <<'PYEOF'
import json, math
first = json.loads(open("run/metrics.jsonl").readline())["loss"]
val = json.load(open("eval.json"))["val_loss"]
print(f"llama-tiny: first loss {first:.4f}, validation loss after 200 steps {val:.4f}, ln(256) = {math.log(256):.4f}")
assert first > 5.0, "an untrained model should start near ln(256)"
assert val < 3.3, f"validation loss {val} is not well below ln(256)"
PYEOF
"$FORGE" sample --checkpoint run/checkpoints/step_000200 --prompt "The " --tokens 40 --seed 1 > sample.txt 2>/dev/null
[ "$(wc -c < sample.txt)" -ge 44 ] || fail "sample printed fewer bytes than prompt + 40 tokens"
echo "ok: sample: $(head -c 80 sample.txt | tr '\n' ' ')"

make_config cfg20.json cfg.json train.steps=20 train.log_interval=5
"$FORGE" train --config cfg20.json --out-dir straight --quiet
"$FORGE" train --config cfg20.json --out-dir split --stop-after 10 --quiet
"$FORGE" train --config cfg20.json --out-dir split --resume split/checkpoints/step_000010 --quiet
for f in model.safetensors optimizer.safetensors; do
  cmp straight/checkpoints/step_000020/$f split/checkpoints/step_000020/$f ||
    fail "$f differs between the straight and the resumed llama run"
  echo "ok: resumed llama run: $f identical"
done
