# The `fast` and `bf16` multistep gates on llama-tiny at B=1 with one kv head: a single
# (sequence, kv head) pair, which the attention kernels share out differently (backward: tasks
# over key tiles for dk, dv and over query tiles for dq, fp32 and bf16; bf16 forward: one task
# per query head) so that a thread does not sit idle. Same bounds as the gates on llama-tiny
# itself.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config llama-b1.json "$SRC/configs/llama-tiny.json" \
  data.train='"data/train.bin"' data.val='"data/val.bin"' train.batch_size=1 model.n_kv_head=1

verify_gate multistep fast llama-b1.json 'TOLERANCE|BITWISE'
verify_gate multistep bf16 llama-b1.json TOLERANCE
