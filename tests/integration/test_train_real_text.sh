# Training gpt2 on the real corpus lowers the validation loss well below ln(256) = 5.545;
# eval and sample work on the checkpoint (train_real_text in lib.sh, shared with llama).
source "$(dirname "$0")/lib.sh"
prepare_corpus
train_real_text tiny "$SRC/configs/tiny.json"

# Validation reads its batches with the training stream's rule (docs/formats.md), as the
# reference does: past the shard's end it wraps to the start. On a shard of exactly two
# batches (B=4, T=64: 2 x 256 tokens + 1, headerless uint16), six batches are the two read
# three times: the same mean, and the count reported is the one asked for.
"$PY" - <<'PYEOF'
shard = open("data/val.bin", "rb").read()
assert shard[:7] == b"FRGTOKS" and shard[12] == 2, "expected a forge shard of uint16 tokens"
open("two_batches.bin", "wb").write(shard[64:64 + 2 * (2 * 256 + 1)])  # the 64-byte header off
PYEOF
"$FORGE" eval --checkpoint run/checkpoints/step_000200 --data two_batches.bin --batches 2 --json > two.json
"$FORGE" eval --checkpoint run/checkpoints/step_000200 --data two_batches.bin --batches 6 --json > six.json
"$PY" - <<'PYEOF'
import json
two, six = json.load(open("two.json")), json.load(open("six.json"))
assert six["batches"] == 6, six
assert abs(two["val_loss"] - six["val_loss"]) < 1e-6, (two, six)
print(f"ok: 6 batches of a 2-batch shard: val loss {six['val_loss']:.6f} = 2 batches' {two['val_loss']:.6f}")
PYEOF

# A start-up reading of the fp32 peak taken while the cores were busy (here made a thousandth
# of the machine's): the first step's MFU passes 100%, the peak is read once more and said so,
# and the steps after it and the summary divide by the new reading.
BUGS="$(dirname "$FORGE")/forge_testbugs"
[ -x "$BUGS" ] || fail "$BUGS not found: build the forge_testbugs target (CMakeLists.txt)"
make_config busy.json "$SRC/configs/tiny.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"' train.eval_interval=0 train.log_interval=1
FORGE_TEST_BUG=busy-start-up-peak "$BUGS" train --config busy.json --steps 4 --out-dir busy >busy.out
grep -q "^note: step 1's MFU passed 100% against the start-up peak reading" busy.out ||
  { cat busy.out >&2; fail "a start-up peak reading far too low gave no note"; }
[ "$(grep -c "MFU passed 100%" busy.out)" -eq 1 ] || { cat busy.out >&2; fail "the peak was read again more than once"; }
! grep -qE "^step +[234]/4 .*MFU [0-9]{3,}\.[0-9]%" busy.out ||
  { cat busy.out >&2; fail "steps after the new reading still print an MFU above 100%"; }
grep -qE "^done: 4 steps, .*MFU [0-9]{1,2}\.[0-9]%" busy.out && ! grep -q "^note: MFU above 100%" busy.out ||
  { cat busy.out >&2; fail "the summary's MFU is not against the new reading"; }
echo "ok: a busy start-up peak reading is read again at the first step past 100%, and said so"
