# The `torch-cpu` profile's gates against Debian's PyTorch 1.13.1 (/usr/bin/python3):
# alignment and multistep on tiny and small, long-horizon on configs/ci.json and resume,
# every one BITWISE (issue 4). ATEN_CPU_CAPABILITY and the thread counts are pinned by
# forge verify on both sides.
source "$(dirname "$0")/lib.sh"
prepare_corpus
data=(data.train='"data/train.bin"' data.val='"data/val.bin"')
make_config tiny.json "$SRC/configs/tiny.json" "${data[@]}"
make_config small.json "$SRC/configs/small.json" "${data[@]}"
make_config ci.json "$SRC/configs/ci.json" "${data[@]}"

verify_gate alignment torch-cpu tiny.json BITWISE
verify_gate multistep torch-cpu tiny.json BITWISE
verify_gate alignment torch-cpu small.json BITWISE
verify_gate multistep torch-cpu small.json BITWISE
verify_gate resume torch-cpu tiny.json BITWISE
verify_gate long-horizon torch-cpu ci.json BITWISE
