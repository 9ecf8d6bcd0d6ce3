# Hugging Face interop: a model forge trained and exported with `forge export --hf` loads in
# transformers' GPT2LMHeadModel.from_pretrained (offline) and gives forge's loss (and logits,
# once `forge eval --dump-logits` exists) at TOLERANCE; and a model made and saved by
# transformers loads in forge with the same result.
source "$(dirname "$0")/lib.sh"
VPY="$SRC/.venv/bin/python"
[ -x "$VPY" ] || fail "$VPY not found: the interop test needs the project's .venv (make setup)"
"$VPY" -c "import transformers, torch" 2>/dev/null || fail "$VPY cannot import transformers and torch"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$SRC/reference" PYTHONDONTWRITEBYTECODE=1
prepare_corpus
make_config tiny.json "$SRC/configs/tiny.json" data.train='"data/train.bin"' data.val='"data/val.bin"' \
  train.eval_interval=0 train.threads=2
TOOL="$SRC/tests/tools/hf_interop.py"

# forge_side HF_DIR NAME: forge evaluates HF_DIR on the validation shard (and dumps its
# logits when it can); then transformers checks the same micro-batches.
forge_side() {
  local dir=$1 name=$2
  local logits_args=() check_args=()
  if "$FORGE" eval --help | grep -q -- '--dump-logits'; then
    logits_args=(--dump-logits "$name.logits.safetensors")
    check_args=(--forge-logits "$name.logits.safetensors")
  else
    echo "note: forge eval has no --dump-logits yet: losses compared, not logits"
  fi
  "$FORGE" eval --checkpoint "$dir" --data data/val.bin --batches 8 --threads 2 --json \
    "${logits_args[@]}" >"$name.eval.json"
  "$VPY" "$TOOL" check "$dir" data/val.bin --forge-eval "$name.eval.json" "${check_args[@]}" ||
    fail "$name: transformers and forge disagree"
}

# forge -> transformers
"$FORGE" train --config tiny.json --steps 5 --out-dir run --quiet
"$FORGE" export --checkpoint run/checkpoints/step_000005 --hf hf-export
for f in config.json model.safetensors; do [ -s "hf-export/$f" ] || fail "export wrote no $f"; done
forge_side hf-export export
echo "ok: forge export --hf loads in transformers with forge's results"
# A byte vocabulary has no end-of-text token: the config names none (not token 255, a byte).
"$VPY" -c "import json, sys; c = json.load(open('hf-export/config.json'))
sys.exit(c['bos_token_id'] is not None or c['eos_token_id'] is not None)" ||
  fail "the export of a byte-level model names a bos/eos token"
expect_error "gpt2 tokenizer on a byte model" \
  "--tokenizer gpt2: its 50257 tokens do not fit field 'model\.vocab_size' \(256\)" \
  "$FORGE" export --checkpoint run/checkpoints/step_000005 --hf hf-gpt2 --tokenizer gpt2
[ ! -e hf-gpt2 ] || fail "a refused export left its folder"
echo "ok: the export names the tokenizer's end-of-text token as bos/eos: none for bytes"

# transformers -> forge
"$VPY" "$TOOL" make-model hf-made
[ -s hf-made/model.safetensors ] || fail "transformers wrote no model.safetensors"
forge_side hf-made made
echo "ok: a model saved by transformers loads in forge with transformers' results"

# transformers' GPT-2 switches that change what its attention computes are refused by name
# (they were ignored: the folder evaluated, to another model's logits).
refuse_field() {  # FIELD VALUE
  rm -rf hf-odd && cp -r hf-export hf-odd
  "$VPY" -c "import json, sys; p = 'hf-odd/config.json'; c = json.load(open(p)); c[sys.argv[1]] = json.loads(sys.argv[2]); json.dump(c, open(p, 'w'))" "$1" "$2"
  expect_error "HF config $1 $2" "hf-odd/config\.json: field '$1': expected" \
    "$FORGE" eval --checkpoint hf-odd --data "$WORK/data/val.bin"
}
refuse_field scale_attn_weights false
refuse_field scale_attn_by_inverse_layer_idx true

# Tensors the model does not have are refused by name (they were ignored); transformers'
# buffers and a tied head equal to the embedding are accepted.
extra_tensors() {  # FOLDER PYTHON-STATEMENTS (on dict t of the export's tensors)
  rm -rf "$1" && cp -r hf-export "$1"
  "$VPY" -c "
from safetensors.numpy import load_file, save_file
import numpy as np
t = load_file('$1/model.safetensors')
$2
save_file(t, '$1/model.safetensors', metadata={'format': 'pt'})"
}
extra_tensors hf-buffers "t['lm_head.weight'] = t['transformer.wte.weight'].copy(); t['transformer.h.0.attn.bias'] = np.ones((1, 1, 4, 4), np.float32)"
"$FORGE" eval --checkpoint hf-buffers --data data/val.bin --batches 1 >/dev/null
echo "ok: a tied head equal to wte and a causal-mask buffer are accepted"
extra_tensors hf-untied "t['lm_head.weight'] = t['transformer.wte.weight'] * 2"
expect_error "an untied head" "hf-untied/model\.safetensors: tensor 'lm_head\.weight' differs from 'transformer\.wte\.weight'" \
  "$FORGE" eval --checkpoint hf-untied --data data/val.bin
extra_tensors hf-extra "t['transformer.h.0.mlp.c_gate.weight'] = np.ones((4, 4), np.float32)"
expect_error "a tensor the model lacks" "hf-extra/model\.safetensors: tensor 'transformer\.h\.0\.mlp\.c_gate\.weight' is not part of this model" \
  "$FORGE" eval --checkpoint hf-extra --data data/val.bin
