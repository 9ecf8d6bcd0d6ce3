# Training on the real corpus lowers the validation loss well below ln(256) = 5.545.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/tiny.json" train.steps=200 train.eval_interval=0 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'
"$FORGE" train --config cfg.json --quiet
"$FORGE" eval --checkpoint run/checkpoints/step_000200 --json > eval.json
"$PY" - <<'PYEOF'
import json, math
first = json.loads(open("run/metrics.jsonl").readline())["loss"]
val = json.load(open("eval.json"))["val_loss"]
print(f"first training loss {first:.4f}, validation loss after 200 steps {val:.4f}, ln(256) = {math.log(256):.4f}")
assert first > 5.0, "an untrained model should start near ln(256)"
assert val < 3.3, f"validation loss {val} is not well below ln(256)"
PYEOF
"$FORGE" sample --checkpoint run/checkpoints/step_000200 --prompt "The " --tokens 40 --seed 1 > sample.txt 2>/dev/null
[ "$(wc -c < sample.txt)" -ge 44 ] || fail "sample printed fewer bytes than prompt + 40 tokens"
echo "ok: sample: $(head -c 80 sample.txt | tr '\n' ' ')"
