# `forge export --hf` for llama: transformers' LlamaForCausalLM loads the folder (offline) and
# computes the engine's logits and validation loss at TOLERANCE; and the reverse: a model
# transformers initialised and saved is evaluated by the engine with the same results.
# Both folders also work as checkpoints of `forge eval` / `forge sample` without --config.
# Engine logits come from a level-2 dump of one training step (act.logits is the forward
# of the first micro-batch, before any update).
source "$(dirname "$0")/lib.sh"
VPY="$SRC/.venv/bin/python"
[ -x "$VPY" ] || fail "$VPY is missing: the transformers side of this test needs the .venv"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$SRC/reference"
prepare_corpus
make_config cfg.json "$SRC/configs/llama-tiny.json" train.steps=30 train.eval_interval=0 \
  train.eval_batches=4 model.padded_vocab_size=272 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'

# engine -> transformers
"$FORGE" train --config cfg.json --quiet
CKPT=run/checkpoints/step_000030
"$FORGE" export --checkpoint $CKPT --hf hf_out
"$FORGE" eval --checkpoint $CKPT --json > eval_engine.json
"$FORGE" train --config cfg.json --init $CKPT/model.safetensors --steps 1 --dump dump_out \
  --dump-level 2 --out-dir run_dump_out --quiet

# eval and sample of the exported folder need no --config: the model comes from its
# config.json (micro-batches of 1 x the context, so the checkpoint side uses a batch of 1
# too). Same micro-batches: the same loss bit for bit; same seed: the same text.
make_config cfg_b1.json cfg.json train.batch_size=1
"$FORGE" eval --checkpoint hf_out --data data/val.bin --batches 16 --json > eval_hf_folder.json
"$FORGE" eval --checkpoint $CKPT --config cfg_b1.json --batches 16 --json > eval_ckpt_b1.json
"$PY" - <<'PYEOF'
import json
folder, ckpt = json.load(open("eval_hf_folder.json")), json.load(open("eval_ckpt_b1.json"))
own = json.load(open("eval_engine.json"))  # 4 x 64 tokens x 4 batches: the same tokens
assert folder["batches"] == ckpt["batches"] == 16, (folder, ckpt)
assert folder["val_loss"] == ckpt["val_loss"], f"HF folder {folder['val_loss']!r} != checkpoint {ckpt['val_loss']!r}"
assert abs(folder["val_loss"] - own["val_loss"]) <= 1e-6 * own["val_loss"], (folder, own)
print(f"ok: eval of the exported folder without --config: {folder['val_loss']!r}, the checkpoint's exactly")
PYEOF
"$FORGE" sample --checkpoint hf_out --prompt "The " --tokens 40 --seed 1 > sample_hf.txt 2>/dev/null
"$FORGE" sample --checkpoint $CKPT --prompt "The " --tokens 40 --seed 1 > sample_ckpt.txt 2>/dev/null
[ "$(wc -c < sample_hf.txt)" -ge 44 ] || fail "sample of the exported folder printed fewer bytes than prompt + 40 tokens"
cmp -s sample_hf.txt sample_ckpt.txt || fail "sample of the exported folder differs from the checkpoint's"
echo "ok: sample of the exported folder without --config equals the checkpoint's: $(head -c 60 sample_hf.txt | tr '\n' ' ')"

# transformers -> engine
"$VPY" - <<'PYEOF'
import json, torch
from transformers import LlamaConfig, LlamaForCausalLM
from forge_ref import config, llama
cfg = config.load_config("cfg.json")
torch.manual_seed(123)
fields = {k: v for k, v in llama.hf_config(cfg.model).items() if k not in ("architectures", "torch_dtype")}
hf = LlamaForCausalLM(LlamaConfig(**fields))
hf.save_pretrained("hf_in", safe_serialization=True)
PYEOF
"$FORGE" eval --checkpoint hf_in/model.safetensors --config cfg.json --json > eval_hf_in.json
# the folder transformers saved (its own config.json), without --config
"$FORGE" eval --checkpoint hf_in/model.safetensors --config cfg_b1.json --batches 16 --json > eval_hf_in_b1.json
"$FORGE" eval --checkpoint hf_in --data data/val.bin --batches 16 --json > eval_hf_in_folder.json
"$PY" -c 'import json, sys; a, b = (json.load(open(f))["val_loss"] for f in sys.argv[1:]); assert a == b, (a, b)' \
  eval_hf_in_b1.json eval_hf_in_folder.json || fail "eval of transformers' folder without --config differs"
echo "ok: eval of the folder transformers saved, without --config, equals eval with --config"
"$FORGE" train --config cfg.json --init hf_in/model.safetensors --steps 1 --dump dump_in \
  --dump-level 2 --out-dir run_dump_in --quiet

"$VPY" - <<'PYEOF'
import json, math, sys
import numpy as np
import torch
from transformers import LlamaForCausalLM
from forge_ref import config
from forge_ref.safetensors_io import load_numpy
from forge_ref.shards import Loader, Shard

cfg = config.load_config("cfg.json")
t, V = cfg.train, cfg.model.vocab_size
failures = []

def check(what, ok, detail):
    print(("ok: " if ok else "FAIL: ") + f"{what}: {detail}")
    if not ok:
        failures.append(what)

def engine_logits(dump):
    tensors = load_numpy(f"{dump}/step_000001.safetensors")
    tensors = tensors[0] if isinstance(tensors, tuple) else tensors
    return tensors["act.logits"].astype(np.float64)

def compare(name, hf_dir, dump, eval_json):
    hf = LlamaForCausalLM.from_pretrained(hf_dir, local_files_only=True, attn_implementation="eager")
    hf.eval()
    check(f"{name}: architecture", type(hf).__name__ == "LlamaForCausalLM", type(hf).__name__)
    with torch.no_grad():
        x, _ = Loader(Shard(cfg.data.train), t.batch_size, t.seq_len, V).next()
        want = hf(input_ids=x).logits.double().numpy()
        got = engine_logits(dump)
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        check(f"{name}: logits {list(got.shape)}", got.shape == want.shape and rel <= 1e-5 and np.isfinite(got).all(),
              f"rel_l2 {rel:.3e} (TOLERANCE: <= 1e-5)")
        val = Loader(Shard(cfg.data.val), t.batch_size, t.seq_len, V)
        total = 0.0
        for _ in range(t.eval_batches):
            xv, yv = val.next()
            lv = hf(input_ids=xv).logits[..., :V]
            total += torch.nn.functional.cross_entropy(lv.reshape(-1, V), yv.reshape(-1)).item()
        ref = total / t.eval_batches
        eng = json.load(open(eval_json))["val_loss"]
        check(f"{name}: validation loss", abs(eng - ref) <= 1e-5 * abs(ref),
              f"engine {eng:.7f}, transformers {ref:.7f}, |d|/ref {abs(eng - ref) / ref:.2e}")

hf_cfg = json.load(open("hf_out/config.json"))
check("exported config.json", hf_cfg["model_type"] == "llama" and hf_cfg["num_key_value_heads"] == 2
      and hf_cfg["vocab_size"] == 272 and hf_cfg["tie_word_embeddings"] is False, json.dumps(hf_cfg)[:120])
compare("forge export -> transformers", "hf_out", "dump_out", "eval_engine.json")
compare("transformers save_pretrained -> forge", "hf_in", "dump_in", "eval_hf_in.json")
sys.exit(1 if failures else 0)
PYEOF

# A folder saved in bf16 (as most published Llama checkpoints are) loads, its weights widened to
# fp32 exactly: forge's validation loss equals transformers' on the same weights in fp32.
"$VPY" - <<'PYEOF'
import torch
from transformers import LlamaForCausalLM
LlamaForCausalLM.from_pretrained("hf_in", local_files_only=True).to(torch.bfloat16).save_pretrained(
    "hf_bf16", safe_serialization=True)
PYEOF
"$FORGE" eval --checkpoint hf_bf16 --data data/val.bin --batches 4 --json > eval_hf_bf16.json
"$VPY" - <<'PYEOF' || fail "eval of a bf16 folder differs from transformers' on its weights in fp32"
import json, sys
import torch
from transformers import LlamaForCausalLM
from forge_ref.shards import Loader, Shard
hf = LlamaForCausalLM.from_pretrained("hf_bf16", local_files_only=True, torch_dtype=torch.float32,
                                      attn_implementation="eager").eval()
# forge's vocabulary: the rows before the padding (forge_vocab_size, kept by transformers)
V = json.load(open("hf_bf16/config.json")).get("forge_vocab_size", hf.config.vocab_size)
T = hf.config.max_position_embeddings
val, total = Loader(Shard("data/val.bin"), 1, T, V), 0.0
with torch.no_grad():
    for _ in range(4):
        x, y = val.next()
        logits = hf(input_ids=x).logits[..., :V]
        total += torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).item()
ref, eng = total / 4, json.load(open("eval_hf_bf16.json"))["val_loss"]
print(f"bf16 folder: engine {eng:.7f}, transformers in fp32 {ref:.7f}")
sys.exit(0 if abs(eng - ref) <= 1e-5 * abs(ref) else 1)
PYEOF
echo "ok: a Llama folder saved in bf16 evaluates as transformers does on its weights in fp32"
