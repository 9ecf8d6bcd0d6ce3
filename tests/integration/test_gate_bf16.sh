# The `bf16` profile's long-run gates against the PyTorch 2.13 reference (EQUIVALENCE.md):
# long-horizon CONVERGENT (against fp32 PyTorch) and perf SURPASS (against PyTorch under CPU
# bf16 autocast, same run), on configs/ci-bf16.json: ci.json at B=8 and lr 1e-3. At ci.json's
# B=4, lr 3e-3 the loss curve is chaotic: any bf16-sized perturbation moves it by 0.01% to 7%
# depending on the seed (the bf16 engine against the fp32 engine, six seeds measured),
# so there the gate would test the seed, not the arithmetic. The alignment and multistep
# gates of bf16 on GPT-2 stay in tests/pending (zero-initialised biases flip sign at step 1);
# Llama has no biases, and llama-tiny's alignment and multistep reach TOLERANCE here.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/ci-bf16.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"'

# The Llama long run at ci-bf16's batch and learning rate, for the same reason.
make_config llama.json "$SRC/configs/llama-tiny.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"' train.batch_size=8 train.lr=1e-3 train.min_lr=1e-4

# bf16_gate GATE CONFIG RUNG
bf16_gate() {
  local gate=$1 cfg=$2 want=$3 out="v-$1-${2%.json}"
  set +e
  "$FORGE" verify --gate "$gate" --profile bf16 --config "$cfg" --source-dir "$SRC" \
    --out "$out" >"$out.out" 2>"$out.err"
  local rc=$?
  set -e
  local last
  last=$(tail -n 1 "$out.out")
  [ $rc -eq 0 ] || { cat "$out.out" "$out.err" >&2; fail "bf16 $gate gate on $cfg exited with $rc"; }
  [ "$last" = "gate $gate profile bf16: $want" ] ||
    { cat "$out.out" >&2; fail "$cfg: last line '$last', expected '$want'"; }
  grep -m1 '^- convergence' "$out/report.md" || true
  grep -m1 '^- speed' "$out/report.md" || true
  echo "ok: $cfg: $last"
}

bf16_gate long-horizon cfg.json CONVERGENT
bf16_gate perf cfg.json SURPASS
bf16_gate alignment llama.json TOLERANCE
bf16_gate multistep llama.json TOLERANCE
bf16_gate perf llama.json SURPASS
