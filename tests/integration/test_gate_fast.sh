# EQUIVALENCE.md's gates of the `fast` profile, engine against the PyTorch reference:
# alignment and multistep on tiny (TOLERANCE), resume (BITWISE), long-horizon on
# configs/ci.json (CONVERGENT), dp (mpirun -np 2: BITWISE vs one process, TOLERANCE vs
# the reference), perf on configs/ci.json (SURPASS: convergent, as good, faster in the same
# run). A gate that cannot run fails here; nothing is skipped.
source "$(dirname "$0")/lib.sh"
prepare_corpus
data=(data.train='"data/train.bin"' data.val='"data/val.bin"')
make_config tiny.json "$SRC/configs/tiny.json" "${data[@]}"
make_config ci.json "$SRC/configs/ci.json" "${data[@]}"

# A missing reference is a failure with one line, never a skip.
expect_error "verify without the reference interpreter" "reference interpreter .*not found" \
  "$FORGE" verify --gate alignment --profile fast --config tiny.json --source-dir "$SRC" \
  --python "$WORK/no-such-python" --out v-missing
# -S hides site-packages, so this interpreter runs but has no torch.
printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' >"$WORK/python-without-torch"
chmod +x "$WORK/python-without-torch"
expect_error "verify with a reference interpreter that lacks torch" "cannot import torch" \
  "$FORGE" verify --gate alignment --profile fast --config tiny.json --source-dir "$SRC" \
  --python "$WORK/python-without-torch" --out v-notorch

# run_gate GATE CONFIG RUNGS [FILES...]: the gate passes, its last line names one of RUNGS
# (a regex), and it leaves its reports (and FILES) in its --out folder.
run_gate() {
  local gate=$1 cfg=$2 rungs=$3
  shift 3
  local t0=$SECONDS rc
  set +e
  "$FORGE" verify --gate "$gate" --profile fast --config "$cfg" --source-dir "$SRC" \
    --out "v-$gate" >"$gate.out" 2>"$gate.err"
  rc=$?
  set -e
  local last
  last=$(tail -n 1 "$gate.out")
  if [ $rc -ne 0 ]; then
    cat "$gate.out" "$gate.err" >&2
    fail "$gate: forge verify exited with $rc"
  fi
  [[ "$last" =~ ^gate\ $gate\ profile\ fast:\ ($rungs)$ ]] ||
    { cat "$gate.out" >&2; fail "$gate: last line '$last', expected 'gate $gate profile fast: $rungs'"; }
  for f in report.md report.json "$@"; do
    [ -s "v-$gate/$f" ] || fail "$gate: v-$gate/$f was not written"
  done
  grep -q "^- run time" "v-$gate/report.md" || fail "$gate: report.md lacks the run section"
  echo "ok: $last ($((SECONDS - t0)) s); $(grep -m1 '^worst tensor' "$gate.out")"
  grep -m1 '^- convergence' "v-$gate/report.md" || true
  grep -m1 '^- speed' "v-$gate/report.md" || true
}

run_gate alignment tiny.json 'TOLERANCE|BITWISE'
run_gate multistep tiny.json 'TOLERANCE|BITWISE' loss.png
run_gate resume tiny.json 'BITWISE'
run_gate long-horizon ci.json 'CONVERGENT|TOLERANCE|BITWISE' loss.png
run_gate dp tiny.json 'TOLERANCE|BITWISE'
run_gate perf ci.json 'SURPASS' loss.png
