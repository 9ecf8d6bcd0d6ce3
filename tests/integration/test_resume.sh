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
# Only the settings' note counts: a busy machine can earn the run another one (the peak read
# again when a step passes 100% MFU against a start-up reading taken while the cores were held).
! grep -q "^note: resuming with settings" same.out ||
  { cat same.out >&2; fail "a resume with the same settings gave a note of other settings"; }
grep -q "^forge train: " same.out && grep -q "^done: 8 steps" same.out ||
  { cat same.out >&2; fail "--quiet dropped the first line or the summary"; }
! grep -qE "^step +[0-9]+/" same.out || { cat same.out >&2; fail "--quiet printed per-step lines"; }
echo "ok: a resume with another lr is noted, one with the same settings is not; --quiet keeps the summary"

# A shard prepared again at the same path (here: the same tokens in reverse order, so the same
# size and header) is other data under the same setting: the resume says so.
cp data/train.bin redone.bin
make_config redone.json cfg.json data.train='"redone.bin"'
"$FORGE" train --config redone.json --out-dir redone --steps 8 --stop-after 4 --quiet >/dev/null
"$PY" - <<'PYEOF'
data = open("redone.bin", "rb").read()
body = data[64:]
pairs = [body[i:i + 2] for i in range(0, len(body), 2)]
open("redone.bin", "wb").write(data[:64] + b"".join(reversed(pairs)))
PYEOF
"$FORGE" train --config redone.json --resume redone/checkpoints/step_000004 --steps 8 --quiet >redone.out
grep -q "^note: resuming with a setting other than the checkpoint's run: data.train's contents (its tokens' fingerprint [0-9a-f]\{16\}, was [0-9a-f]\{16\})" redone.out ||
  { cat redone.out >&2; fail "a resume on a shard rewritten at the same path gave no note"; }
echo "ok: a resume on a shard rewritten in place with other tokens is noted"

# SIGINT / SIGTERM: the step in progress finishes, a checkpoint of it is written, the run ends
# with the shell's status for the signal, and --resume goes on bit for bit. While it runs, a
# second writer of its folder (here one asked to replace it) is refused in one line.
make_config long.json cfg.json train.steps=4000 train.checkpoint_interval=0 train.eval_interval=0
stop_midway() {  # NAME SIGNAL STATUS
  local name=$1 sig=$2 status=$3
  "$FORGE" train --config long.json --out-dir "$name" >"$name.out" 2>&1 &
  local job=$! waited=0
  until [ -f "$name/metrics.jsonl" ] && [ "$(grep -c '"loss"' "$name/metrics.jsonl")" -ge 30 ]; do
    sleep 0.1
    waited=$((waited + 1))
    [ $waited -lt 600 ] || { kill -9 $job; fail "$name: no progress in 60 s"; }
  done
  if [ "$name" = int ]; then
    expect_error "a second writer of a run folder" "int: another forge train \(pid $job\) is writing this run folder" \
      "$FORGE" train --config long.json --out-dir int --overwrite
  fi
  kill -"$sig" $job
  set +e
  wait $job
  local rc=$?
  set -e
  [ $rc -eq "$status" ] || { cat "$name.out" >&2; fail "$name: exit $rc after SIG$sig, expected $status"; }
  grep -qE "^stopped by .* after step [0-9]+: checkpoint $name/checkpoints/step_[0-9]+; continue with --resume $name" "$name.out" ||
    { cat "$name.out" >&2; fail "$name: no line saying where the run stopped"; }
}
stop_midway int INT 130
stop_midway term TERM 143
at=$(sed 's|.*step_0*||' int/checkpoints/latest)
[ "$(grep -c '"loss"' int/metrics.jsonl)" -eq "$at" ] || fail "metrics.jsonl does not end at the checkpoint's step $at"
"$FORGE" train --config long.json --resume int --stop-after $((at + 5)) --quiet >/dev/null
"$FORGE" train --config long.json --out-dir uninterrupted --stop-after $((at + 5)) --quiet >/dev/null
for f in model.safetensors optimizer.safetensors; do
  cmp "int/checkpoints/step_$(printf %06d $((at + 5)))/$f" \
    "uninterrupted/checkpoints/step_$(printf %06d $((at + 5)))/$f" ||
    fail "$f: the run stopped by SIGINT at step $at and resumed differs from an uninterrupted one"
done
echo "ok: SIGINT and SIGTERM stop after a step with a checkpoint (exit 130, 143); resumed, bit for bit"

# Resumed from an earlier checkpoint than the one `latest` names, the run is at that step from
# the start: killed before its next checkpoint, `latest` names the checkpoint it went on from
# (it named the later one, whose steps the cut-back metrics.jsonl no longer held).
"$FORGE" train --config long.json --resume "int/checkpoints/step_$(printf %06d "$at")" >killed.out 2>&1 &
job=$!
waited=0
until [ "$(grep -c '"loss"' int/metrics.jsonl)" -ge $((at + 20)) ]; do
  sleep 0.1
  waited=$((waited + 1))
  [ $waited -lt 600 ] || { kill -9 $job; fail "the resumed run made no progress in 60 s"; }
done
kill -9 $job
wait $job || true
[ "$(cat int/checkpoints/latest)" = "int/checkpoints/step_$(printf %06d "$at")" ] ||
  fail "after a resume from step $at, killed, latest names $(cat int/checkpoints/latest)"
echo "ok: a resume from an earlier checkpoint makes it the latest from the start"

# A new run (not a resume) into a folder that holds an earlier run is refused, and with
# --overwrite replaces it: its checkpoints are the new run's alone.
expect_error "a new run over an earlier one" \
  "straight: holds an earlier run \(checkpoint step_000020 and metrics\.jsonl\); continue it with --resume straight, train into another --out-dir, or replace it with --overwrite" \
  "$FORGE" train --config cfg.json --out-dir straight
make_config short.json cfg.json train.steps=10
"$FORGE" train --config short.json --out-dir straight --overwrite --quiet >overwrite.out
grep -q "^note: replaced the earlier run in straight (checkpoint step_000020 and metrics.jsonl)" overwrite.out ||
  { cat overwrite.out >&2; fail "--overwrite did not say what it replaced"; }
[ "$(ls straight/checkpoints)" = "$(printf 'latest\nstep_000010')" ] ||
  fail "--overwrite left the earlier run's checkpoints: $(ls straight/checkpoints | tr '\n' ' ')"
[ "$(grep -c '"loss"' straight/metrics.jsonl)" -eq 10 ] || fail "--overwrite kept earlier metrics"
echo "ok: a new run over an earlier one is refused, and --overwrite replaces it"

# --overwrite removes only what a run wrote: a folder of the user's own in checkpoints/ (named
# step_..., not a checkpoint) stays. A resume into another run's folder (--out-dir) is refused.
mkdir -p straight/checkpoints/step_notes && echo keep >straight/checkpoints/step_notes/todo.txt
"$FORGE" train --config short.json --out-dir straight --overwrite --quiet >/dev/null
[ "$(cat straight/checkpoints/step_notes/todo.txt)" = keep ] || fail "--overwrite removed a user's folder"
expect_error "a resume into another run's folder" \
  "straight: holds another run \(checkpoint step_000010 and metrics\.jsonl\); resume split/checkpoints/step_000010 in its own run folder" \
  "$FORGE" train --config cfg.json --resume split/checkpoints/step_000010 --out-dir straight
echo "ok: --overwrite keeps a user's folder; a resume into another run's folder is refused"

# A signal during start-up ends the run before its first step, in a line, with the signal's
# status, and leaves no metrics.jsonl (the folder does not read as an earlier run's):
# forge_testbugs (CMakeLists.txt) pauses 3 s in its start-up, its handlers in place.
BUGS="$(dirname "$FORGE")/forge_testbugs"
[ -x "$BUGS" ] || fail "$BUGS not found: build the forge_testbugs target (CMakeLists.txt)"
FORGE_TEST_BUG=pause-at-start-up "$BUGS" train --config long.json --out-dir early >early.out 2>&1 &
job=$!
sleep 1
kill -INT $job
set +e
wait $job
rc=$?
set -e
[ $rc -eq 130 ] || { cat early.out >&2; fail "a signal at start-up: exit $rc, expected 130"; }
grep -q "^stopped by Interrupt before the first step: nothing trained" early.out ||
  { cat early.out >&2; fail "a signal at start-up: no line saying nothing was trained"; }
[ ! -e early/metrics.jsonl ] || fail "a run stopped before its first step left metrics.jsonl"
"$FORGE" train --config short.json --out-dir early --quiet >/dev/null ||
  fail "a new run into the folder of one stopped at start-up was refused"
echo "ok: a signal at start-up ends the run before its first step (exit 130), nothing left in the way"
