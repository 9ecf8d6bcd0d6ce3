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

run_gate alignment tiny.json
run_gate multistep tiny.json
run_gate alignment small.json
run_gate multistep small.json
run_gate resume tiny.json
run_gate long-horizon ci.json
