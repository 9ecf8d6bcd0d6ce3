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

# Resumed again from step 10 (as after a crash past that checkpoint), the run drops the records
# of the steps after it before going on: metrics.jsonl keeps one record per step, the same ones.
"$FORGE" train --config cfg.json --out-dir split --resume split/checkpoints/step_000010 --quiet
"$PY" - <<'PYEOF'
import json, sys
def records(path):
    return [json.loads(line) for line in open(path)]
a, b = records("straight/metrics.jsonl"), records("split/metrics.jsonl")
steps = [r["step"] for r in b if "loss" in r]
assert steps == list(range(1, 21)), f"FAIL: steps in metrics.jsonl after a second resume: {steps}"
assert [r["loss"] for r in a if "loss" in r] == [r["loss"] for r in b if "loss" in r], "FAIL: losses differ"
print("ok: a second resume from step 10 leaves steps 1..20 once each, the same losses")
PYEOF

# Nothing left to train: refused in one line, the checkpoint untouched.
expect_error "resume at the end" "--resume: split is at step 20, and the run ends at step 20" \
  "$FORGE" train --config cfg.json --out-dir split --resume split

# A run trained with --numerics bf16 resumes in bf16 without being told (the config says
# nothing of numerics, so it would otherwise be `fast`), bit for bit.
"$FORGE" train --config cfg.json --out-dir bf16_straight --numerics bf16 --steps 8 --quiet
"$FORGE" train --config cfg.json --out-dir bf16_split --numerics bf16 --steps 8 --stop-after 4 --quiet
"$FORGE" train --config cfg.json --out-dir bf16_split --steps 8 \
  --resume bf16_split/checkpoints/step_000004 --quiet
grep -q '"numerics": "bf16"' bf16_split/checkpoints/step_000008/state.json ||
  fail "the resumed run did not keep the checkpoint's numerics"
for f in model.safetensors optimizer.safetensors; do
  cmp bf16_straight/checkpoints/step_000008/$f bf16_split/checkpoints/step_000008/$f ||
    fail "$f differs between the straight bf16 run and the one resumed without --numerics"
done
echo "ok: resumed without --numerics, the bf16 run went on in bf16, bit for bit"

# --resume without --out-dir goes on in the checkpoint's own run folder, not in the config's
# out_dir, which here names another, finished run: that run is left as it was.
make_config other.json cfg.json out_dir='"finished"'
"$FORGE" train --config other.json --steps 8 --quiet
before=$(cat finished/checkpoints/latest; md5sum finished/metrics.jsonl)
"$FORGE" train --config other.json --out-dir own --steps 8 --stop-after 4 --quiet
"$FORGE" train --config other.json --steps 8 --resume own --quiet
[ "$(cat own/checkpoints/latest)" = own/checkpoints/step_000008 ] ||
  fail "the resumed run did not go on in its own folder: $(cat own/checkpoints/latest)"
[ "$(cat finished/checkpoints/latest; md5sum finished/metrics.jsonl)" = "$before" ] ||
  fail "resuming without --out-dir wrote into the config's out_dir, another run's folder"
echo "ok: resumed without --out-dir, the run went on in its checkpoint's folder"

# A resume that trains with other settings than its checkpoint's run says so (it was silent);
# one with the same settings says nothing. --quiet drops the per-step lines only: the first
# line and the closing summary stay.
"$FORGE" train --config cfg.json --out-dir noted --steps 8 --stop-after 4 --quiet >/dev/null
make_config lower.json cfg.json train.lr=1e-4 train.min_lr=1e-5
"$FORGE" train --config lower.json --resume noted/checkpoints/step_000004 --steps 8 --quiet >changed.out
grep -q "^note: resuming with settings other than the checkpoint's run: train.lr 0.0001 (was " changed.out ||
  { cat changed.out >&2; fail "a resume with another lr gave no note"; }
"$FORGE" train --config cfg.json --resume noted/checkpoints/step_000004 --steps 8 --quiet >same.out
! grep -q "^note:" same.out || { cat same.out >&2; fail "a resume with the same settings gave a note"; }
grep -q "^forge train: " same.out && grep -q "^done: 8 steps" same.out ||
  { cat same.out >&2; fail "--quiet dropped the first line or the summary"; }
! grep -qE "^step +[0-9]+/" same.out || { cat same.out >&2; fail "--quiet printed per-step lines"; }
echo "ok: a resume with another lr is noted, one with the same settings is not; --quiet keeps the summary"
