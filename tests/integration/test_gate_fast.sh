# EQUIVALENCE.md's gates of the `fast` profile, engine against the PyTorch reference:
# alignment and multistep on tiny (TOLERANCE), resume (BITWISE), long-horizon on
# configs/ci-long.json (CONVERGENT), dp (mpirun -np 2: BITWISE vs one process, TOLERANCE vs
# the reference; with --calibrate, PyTorch 1.13 held to the same bounds beside it), perf on
# configs/ci-long.json (SURPASS: convergent, as good, faster in the same run). A gate that
# cannot run fails here; nothing is skipped.
# The long runs are not on ci.json (B=4, lr 3e-3): it is chaotic at round-off level. Measured
# there, fp32 changes of an ulp or so (the AVX2 instead of the AVX-512 kernels; a GELU through
# the logistic function, tried and reverted) put forge's final validation loss anywhere from
# 0.34% below to 0.59% above the reference's, the width of SURPASS's 0.5% bound; on
# ci-long.json (B=8, lr 1e-3) the same runs end within 1e-8 of it.
source "$(dirname "$0")/lib.sh"
prepare_corpus
data=(data.train='"data/train.bin"' data.val='"data/val.bin"')
make_config tiny.json "$SRC/configs/tiny.json" "${data[@]}"
make_config ci-long.json "$SRC/configs/ci-long.json" "${data[@]}"

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

verify_gate alignment fast tiny.json 'TOLERANCE|BITWISE'
verify_gate multistep fast tiny.json 'TOLERANCE|BITWISE' loss.png
verify_gate resume fast tiny.json 'BITWISE'
verify_gate long-horizon fast ci-long.json 'CONVERGENT|TOLERANCE|BITWISE' loss.png
# With --calibrate, a second PyTorch (Debian's 1.13) also trains on the dp gate's global batch
# and is held to the same bounds: what the engine's failures would share with PyTorch itself.
VERIFY_ARGS=--calibrate verify_gate dp fast tiny.json 'TOLERANCE|BITWISE' calibration.md calibration.json
grep -q '^## Calibration: PyTorch against itself' v-dp-fast-tiny/report.md ||
  fail "dp --calibrate: report.md lacks the calibration section"
"$PY" -c 'import json, sys; c = json.load(open(sys.argv[1]))["calibration"]; assert c["verdict"] in ("BITWISE", "TOLERANCE", "NONE") and "1.13" in c["second_pytorch"], c' \
  v-dp-fast-tiny/report.json || fail "dp --calibrate: report.json's calibration summary"
echo "ok: dp --calibrate: PyTorch 1.13 against the reference: $("$PY" -c 'import json, sys; c = json.load(open(sys.argv[1]))["calibration"]; print(c["verdict"], c["failing"], "failing tensor(s)")' v-dp-fast-tiny/report.json)"
verify_gate perf fast ci-long.json 'SURPASS' loss.png
