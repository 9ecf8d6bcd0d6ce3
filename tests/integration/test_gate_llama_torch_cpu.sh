# The `torch-cpu` profile's gates for the Llama family against Debian's PyTorch 1.13.1
# (/usr/bin/python3, reference/forge_ref/llama.py): alignment, multistep, resume and
# long-horizon (200 steps with validation) on llama-tiny, every one BITWISE. forge verify pins
# ATEN_CPU_CAPABILITY and the thread counts on both sides.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config llama-tiny.json "$SRC/configs/llama-tiny.json" \
  data.train='"data/train.bin"' data.val='"data/val.bin"'

run_gate() {
  local gate=$1 cfg=$2 t0=$SECONDS rc last
  set +e
  "$FORGE" verify --gate "$gate" --profile torch-cpu --config "$cfg" --source-dir "$SRC" \
    --out "v-$gate-${cfg%.json}" >"$gate.out" 2>"$gate.err"
  rc=$?
  set -e
  last=$(tail -n 1 "$gate.out")
  if [ $rc -ne 0 ] || [ "$last" != "gate $gate profile torch-cpu: BITWISE" ]; then
    cat "$gate.out" "$gate.err" >&2
    fail "$gate on $cfg: exit $rc, last line '$last', expected BITWISE"
  fi
  echo "ok: $last on $cfg ($((SECONDS - t0)) s)"
}

run_gate alignment llama-tiny.json
run_gate multistep llama-tiny.json
run_gate resume llama-tiny.json
run_gate long-horizon llama-tiny.json
