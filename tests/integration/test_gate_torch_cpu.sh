# The `torch-cpu` profile's gates against Debian's PyTorch 1.13.1 (/usr/bin/python3):
# alignment and multistep on tiny and small, long-horizon on configs/ci.json and resume,
# every one BITWISE (issue 4). Also multistep on tiny at B=1 and with one head, where torch's
# matmul hands bmm views of qkv instead of copies (other sgemm transposes: other bits from
# OpenBLAS's AVX-512 kernels). ATEN_CPU_CAPABILITY and the thread counts are pinned by
# forge verify on both sides.
source "$(dirname "$0")/lib.sh"
prepare_corpus
data=(data.train='"data/train.bin"' data.val='"data/val.bin"')
make_config tiny.json "$SRC/configs/tiny.json" "${data[@]}"
make_config small.json "$SRC/configs/small.json" "${data[@]}"
make_config ci.json "$SRC/configs/ci.json" "${data[@]}"
make_config tiny-b1.json "$SRC/configs/tiny.json" "${data[@]}" train.batch_size=1
make_config tiny-h1.json "$SRC/configs/tiny.json" "${data[@]}" model.n_head=1 train.batch_size=2

verify_gate alignment torch-cpu tiny.json BITWISE
verify_gate multistep torch-cpu tiny.json BITWISE
verify_gate alignment torch-cpu small.json BITWISE
verify_gate multistep torch-cpu small.json BITWISE
verify_gate resume torch-cpu tiny.json BITWISE
verify_gate long-horizon torch-cpu ci.json BITWISE
verify_gate multistep torch-cpu tiny-b1.json BITWISE
verify_gate multistep torch-cpu tiny-h1.json BITWISE
