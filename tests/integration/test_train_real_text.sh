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
