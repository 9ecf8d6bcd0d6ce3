# The alignment gate for llama, `fast` profile: one step side by side with the PyTorch
# reference (reference/forge_ref/llama.py under the .venv's torch), level 2 (every module's
# output and gradient, every parameter's gradient and updated value), each tensor within
# TOLERANCE. Both sides start from the reference's initial state and read the same shard.
source "$(dirname "$0")/lib.sh"
VPY="$SRC/.venv/bin/python"
[ -x "$VPY" ] || fail "$VPY is missing: the reference side of this gate needs the .venv"
export PYTHONPATH="$SRC/reference" OMP_NUM_THREADS=2
prepare_corpus
make_config cfg.json "$SRC/configs/llama-tiny.json" train.steps=1 \
  train.eval_interval=0 train.eval_batches=0 model.padded_vocab_size=272 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'

"$VPY" -m forge_ref.train --config cfg.json --init-out init.safetensors
"$FORGE" train --config cfg.json --init init.safetensors --dump eng --dump-level 2 --quiet
"$VPY" -m forge_ref.train --config cfg.json --init init.safetensors --dump ref --dump-level 2 --threads 2
"$VPY" -m forge_ref.compare eng ref --gate alignment --profile fast --required TOLERANCE --md report.md \
  || { sed -n 1,12p report.md >&2; fail "llama alignment gate (fast) below TOLERANCE"; }
# The dump must hold what the gate is about: every llama module, and every parameter.
"$VPY" - <<'PYEOF'
import json, sys
from forge_ref import llama
from forge_ref.safetensors_io import load_numpy
t = load_numpy("eng/step_000001.safetensors")
names = set((t[0] if isinstance(t, tuple) else t).keys())
want = {"act." + n for n in llama.activation_names(2)} | {"actgrad." + n for n in llama.activation_names(2)}
want |= {"grad.lm_head.weight", "param.model.layers.1.mlp.down_proj.weight", "loss", "grad_norm"}
missing = sorted(want - names)
if missing:
    sys.exit(f"FAIL: the engine's dump lacks {missing[:5]} ({len(missing)} in all)")
print(f"ok: {len(names)} tensors compared, every llama module present")
PYEOF
