# The `bf16` profile's long-run gates against the PyTorch 2.13 reference (EQUIVALENCE.md):
# long-horizon CONVERGENT (against fp32 PyTorch) and perf SURPASS (against PyTorch under CPU
# bf16 autocast, same run), on configs/ci-bf16.json: ci.json at B=8 and lr 1e-3. At ci.json's
# B=4, lr 3e-3 the loss curve is chaotic: any bf16-sized perturbation moves it by 0.01% to 7%
# depending on the seed (the bf16 engine against the fp32 engine, six seeds measured),
# so there the gate would test the seed, not the arithmetic. The alignment and multistep
# gates of bf16 stay in tests/pending (zero-initialised biases flip sign at step 1).
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/ci-bf16.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"'

for gate in long-horizon perf; do
  want=CONVERGENT
  [ "$gate" = perf ] && want=SURPASS
  set +e
  "$FORGE" verify --gate "$gate" --profile bf16 --config cfg.json --source-dir "$SRC" \
    --out "v-$gate" >"$gate.out" 2>"$gate.err"
  rc=$?
  set -e
  last=$(tail -n 1 "$gate.out")
  [ $rc -eq 0 ] || { cat "$gate.out" "$gate.err" >&2; fail "bf16 $gate gate exited with $rc"; }
  [ "$last" = "gate $gate profile bf16: $want" ] || { cat "$gate.out" >&2; fail "last line '$last'"; }
  grep -m1 '^- convergence' "v-$gate/report.md"
  grep -m1 '^- speed' "v-$gate/report.md" || true
  echo "ok: $last"
done
