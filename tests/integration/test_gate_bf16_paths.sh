# The `bf16` profile's alignment and multistep gates (TOLERANCE against PyTorch under CPU bf16
# autocast) on the two bf16 paths that CPUs unlike this one take, on Llama (llama-tiny at
# test_gate_bf16's batch and learning rate, B=8 and lr 1e-3):
#   FORGE_BF16_AMX=0     bf16 dot products (VDPBF16PS) and oneDNN's bf16 GEMMs, no AMX tiles:
#                        a CPU with avx512_bf16 and without AMX (Zen 4);
#   FORGE_BF16_NATIVE=0  bf16-rounded operands in fp32 GEMMs, fp32 attention: a CPU without
#                        bf16 dot products.
# They round and sum in other orders than the AMX kernels test_gate_bf16 runs on a CPU with
# AMX, so they are gated on their own, end to end. The report must name the path that ran and
# commands.sh must replay its switch. A CPU without bf16 dot products (avx512_bf16) has no
# first path: there FORGE_BF16_AMX=0 leaves `bf16` on the rounded operands, the report must say
# so, and the test ends Skipped, not Passed, as the unit tests of those kernels do on such a CPU.
source "$(dirname "$0")/lib.sh"
prepare_corpus
gate_path() {
  local name=$1 switch=$2 arithmetic=$3 cfg="llama-$1.json" gate out
  # One config file per path: verify_gate names its output folder after the config.
  make_config "$cfg" "$SRC/configs/llama-tiny.json" data.train='"data/train.bin"' \
    data.val='"data/val.bin"' train.batch_size=8 train.lr=1e-3 train.min_lr=1e-4
  for gate in alignment multistep; do
    (export "$switch" && verify_gate "$gate" bf16 "$cfg" TOLERANCE)
    out=$(gate_out "$gate" bf16 "$cfg")
    grep -qE "$arithmetic" "$out/report.md" ||
      fail "$gate ($name) on llama-tiny: report.md does not name the path: '$arithmetic'"
    grep -q "$switch .*/forge train " "$out/commands.sh" ||
      fail "$gate ($name) on llama-tiny: commands.sh does not replay $switch"
  done
}
has_bf16_dots=$(bf16_dots)
if [ "$has_bf16_dots" = 1 ]; then
  amx_off_path="bf16 dot products in oneDNN's bf16 GEMMs, bf16 \(VDPBF16PS\) attention"
else
  amx_off_path='bf16-rounded operands in fp32 GEMMs, fp32 attention \(oneDNN finds no bf16 dot products on this CPU\)'
fi
gate_path amx-off FORGE_BF16_AMX=0 "$amx_off_path"
gate_path rounded FORGE_BF16_NATIVE=0 \
  'bf16-rounded operands in fp32 GEMMs, fp32 attention \(FORGE_BF16_NATIVE=0\)'
[ "$has_bf16_dots" = 1 ] ||
  skip "this CPU has no avx512_bf16: the VDPBF16PS path was not gated (the gates above passed)"
