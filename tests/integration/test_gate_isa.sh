# The `fast` profile's alignment and multistep gates (TOLERANCE against the PyTorch
# reference) with the narrower kernel sets a machine without AVX-512 would run:
# FORGE_CPU_ISA=avx2 and generic, on GPT-2 (tiny) and Llama (llama-tiny). They sum in other
# orders than the AVX-512 kernels, so they are gated on their own, end to end. The report must
# name the kernel set that ran and commands.sh must replay it. A CPU without AVX2 cannot run
# this gate, and that fails it.
source "$(dirname "$0")/lib.sh"
prepare_corpus
for cfg in tiny llama-tiny; do
  make_config "$cfg.json" "$SRC/configs/$cfg.json" data.train='"data/train.bin"' data.val='"data/val.bin"'
done
for isa in avx2 generic; do
  for cfg in tiny llama-tiny; do
    for gate in alignment multistep; do
      out="$WORK/v-$gate-$cfg-$isa"
      t0=$SECONDS
      set +e
      FORGE_CPU_ISA=$isa "$FORGE" verify --gate "$gate" --profile fast --config "$cfg.json" \
        --source-dir "$SRC" --out "$out" >"$out.out" 2>"$out.err"
      rc=$?
      set -e
      last=$(tail -n 1 "$out.out")
      if [ $rc -ne 0 ] || ! [[ "$last" =~ ^gate\ $gate\ profile\ fast:\ (TOLERANCE|BITWISE)$ ]]; then
        cat "$out.out" "$out.err" >&2
        fail "$gate (fast, $isa kernels) on $cfg: exit $rc, last line '$last'"
      fi
      grep -q "(numerics fast: $isa kernels, .*FORGE_CPU_ISA=$isa from the environment)" \
        "$out/report.md" || fail "$gate ($isa) on $cfg: report.md does not name the $isa kernels"
      grep -q "FORGE_CPU_ISA=$isa .*/forge train " "$out/commands.sh" ||
        fail "$gate ($isa) on $cfg: commands.sh does not replay FORGE_CPU_ISA=$isa"
      echo "ok: $last, $isa kernels, on $cfg ($((SECONDS - t0)) s); worst: $(grep -m1 '^worst tensor' "$out.out" | grep -oE 'step [0-9]+ `[^`]+`|rel_l2 [0-9.e+-]+' | tr '\n' ' ')"
    done
  done
done
