# The alignment gate for llama, `fast` profile: one step side by side with the PyTorch
# reference (reference/forge_ref/llama.py under the .venv's torch), level 2 (every module's
# output and gradient, every parameter's gradient and updated value), each tensor within
# TOLERANCE. Both sides start from the reference's initial state and read the same shard
# (llama_gate in lib.sh, shared with the multistep gate).
source "$(dirname "$0")/lib.sh"
llama_gate alignment 1
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
