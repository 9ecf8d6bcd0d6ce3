# The `torch-cpu` profile's gates for the Llama family against Debian's PyTorch 1.13.1
# (/usr/bin/python3, reference/forge_ref/llama.py): alignment, multistep, resume and
# long-horizon (200 steps with validation) on llama-tiny, every one BITWISE; and multistep at
# B=1 with one kv head, where matmul hands bmm views (repeat_kv itself a view) instead of
# copies. forge verify pins ATEN_CPU_CAPABILITY and the thread counts on both sides.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config llama-tiny.json "$SRC/configs/llama-tiny.json" \
  data.train='"data/train.bin"' data.val='"data/val.bin"'

verify_gate alignment torch-cpu llama-tiny.json BITWISE
verify_gate multistep torch-cpu llama-tiny.json BITWISE
verify_gate resume torch-cpu llama-tiny.json BITWISE
verify_gate long-horizon torch-cpu llama-tiny.json BITWISE
make_config llama-b1.json "$SRC/configs/llama-tiny.json" \
  data.train='"data/train.bin"' data.val='"data/val.bin"' train.batch_size=1 model.n_kv_head=1
verify_gate multistep torch-cpu llama-b1.json BITWISE
