# Resume is bit for bit: 20 steps straight == 10 steps, checkpoint, a new process, 10 more.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/tiny.json" train.steps=20 train.eval_interval=0 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' train.log_interval=5

"$FORGE" train --config cfg.json --out-dir straight --quiet
"$FORGE" train --config cfg.json --out-dir split --stop-after 10 --quiet
[ -d split/checkpoints/step_000010 ] || fail "no checkpoint at step 10"
"$FORGE" train --config cfg.json --out-dir split --resume split/checkpoints/step_000010 --quiet

"$PY" - <<'PYEOF'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
a, b = losses("straight/metrics.jsonl"), losses("split/metrics.jsonl")
assert sorted(a) == list(range(1, 21)), sorted(a)
assert sorted(b) == list(range(1, 21)), sorted(b)
diff = [s for s in a if a[s] != b[s]]
if diff:
    sys.exit(f"FAIL: losses differ at steps {diff}: {[(a[s], b[s]) for s in diff]}")
print("ok: losses of steps 1..20 identical")
PYEOF
for f in model.safetensors optimizer.safetensors; do
  cmp straight/checkpoints/step_000020/$f split/checkpoints/step_000020/$f ||
    fail "$f differs between the straight and the resumed run"
  echo "ok: $f identical"
done
