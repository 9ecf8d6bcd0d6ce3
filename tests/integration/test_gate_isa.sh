# The `fast` profile's alignment and multistep gates (TOLERANCE against the PyTorch
# reference) with the narrower kernel sets a machine without AVX-512 would run:
# FORGE_CPU_ISA=avx2 and generic, on GPT-2 (tiny) and Llama (llama-tiny). They sum in other
# orders than the AVX-512 kernels, so they are gated on their own, end to end. The report must
# name the kernel set that ran and commands.sh must replay it. A CPU without AVX2 cannot run
# this gate, and that fails it.
source "$(dirname "$0")/lib.sh"
prepare_corpus
for isa in avx2 generic; do
  for cfg in tiny llama-tiny; do
    # One config file per kernel set: verify_gate names its output folder after the config.
    make_config "$cfg-$isa.json" "$SRC/configs/$cfg.json" data.train='"data/train.bin"' \
      data.val='"data/val.bin"'
    for gate in alignment multistep; do
      FORGE_CPU_ISA=$isa verify_gate "$gate" fast "$cfg-$isa.json" 'TOLERANCE|BITWISE'
      out=$(gate_out "$gate" fast "$cfg-$isa.json")
      grep -q "(numerics fast: $isa kernels, .*FORGE_CPU_ISA=$isa from the environment)" \
        "$out/report.md" || fail "$gate ($isa) on $cfg: report.md does not name the $isa kernels"
      grep -q "FORGE_CPU_ISA=$isa .*/forge train " "$out/commands.sh" ||
        fail "$gate ($isa) on $cfg: commands.sh does not replay FORGE_CPU_ISA=$isa"
    done
  done
done
