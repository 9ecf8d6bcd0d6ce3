# The gates can fail: forge_testbugs (CMakeLists.txt) is the engine with deliberate bugs
# behind FORGE_TEST_BUG (src/forge/core/test_bugs.h). With a bug switched on, the alignment
# gate must fail and name the first tensor that diverges; with none, it must pass, so that
# the failures are the bugs' doing and not the build's.
source "$(dirname "$0")/lib.sh"
BUGS="$(dirname "$FORGE")/forge_testbugs"
[ -x "$BUGS" ] || fail "$BUGS not found: build the forge_testbugs target (CMakeLists.txt)"
prepare_corpus
make_config tiny.json "$SRC/configs/tiny.json" data.train='"data/train.bin"' data.val='"data/val.bin"'

# verify_with_bug BUG EXPECTED_RC LAST_LINE_REGEX [FIRST_FAILURE_REGEX [VERIFY_ARGS...]]
verify_with_bug() {
  local bug=$1 want_rc=$2 want_last=$3 want_first=${4:-}
  shift $(($# < 4 ? $# : 4))
  local t0=$SECONDS rc
  set +e
  FORGE_TEST_BUG=$bug "$BUGS" verify --gate alignment --profile fast --config tiny.json \
    --source-dir "$SRC" --out "v-${bug:-none}" "$@" >"out-${bug:-none}.txt" 2>"err-${bug:-none}.txt"
  rc=$?
  set -e
  local last
  last=$(tail -n 1 "out-${bug:-none}.txt")
  if [ $rc -ne "$want_rc" ] || ! [[ "$last" =~ $want_last ]]; then
    cat "out-${bug:-none}.txt" "err-${bug:-none}.txt" >&2
    fail "bug '${bug:-none}': exit status $rc and last line '$last', expected $want_rc and /$want_last/"
  fi
  if [ -n "$want_first" ]; then
    local first
    first=$(grep -m1 '^- first failing tensor:' "out-${bug:-none}.txt" || true)
    [[ "$first" =~ $want_first ]] ||
      fail "bug '$bug': the report names '$first', expected /$want_first/"
    echo "ok: bug $bug: $last ($((SECONDS - t0)) s); ${first#- }"
  else
    echo "ok: no bug: $last ($((SECONDS - t0)) s)"
  fi
}

# Queries scaled by 1.25 inside attention: everything before it matches, the attention
# output is the first to differ. With --calibrate (below) a second PyTorch is also held
# against the reference; the verdict stays the engine's.
verify_with_bug attn-scale 1 '^gate alignment profile fast: NONE$' \
  '^- first failing tensor: step 1 `act\.h\.0\.attn\.sdpa`' --calibrate
# AdamW without bias correction: loss and gradients of step 1 match, the updated parameters
# are the first to differ.
verify_with_bug adamw-no-bias-correction 1 '^gate alignment profile fast: NONE$' \
  '^- first failing tensor: step 1 `param\.transformer\.'
verify_with_bug "" 0 '^gate alignment profile fast: (TOLERANCE|BITWISE)$'

# --calibrate holds a second PyTorch (Debian's 1.13 under fast) against the reference under the
# same gate. With the bug in the engine (the attn-scale run above) the failure is the
# engine's own: PyTorch passes against itself and shares none of the engine's failing tensors.
grep -qE '^A second PyTorch, PyTorch 1\.13[^ ]* in fp32 .*\*\*(TOLERANCE|BITWISE)\*\*, 0 tensor' \
  out-attn-scale.txt || { cat out-attn-scale.txt >&2; fail "--calibrate: PyTorch 1.13 did not pass against 2.13"; }
grep -qE "^Of the engine's [1-9][0-9]* failing tensor\(s\), 0 fail\(s\) in the calibration too" \
  out-attn-scale.txt || { cat out-attn-scale.txt >&2; fail "--calibrate: the shared failures are not counted"; }
"$PY" - v-attn-scale/report.json <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
assert c["verdict"] in ("TOLERANCE", "BITWISE") and c["shared"] == 0 and c["engine_failing"] > 0, c
PYEOF
echo "ok: --calibrate: the bug's failure is the engine's own (PyTorch 1.13 vs 2.13 passes)"
expect_error "--calibrate under torch-cpu" "--calibrate: expected the alignment, multistep or dp gate of fast or bf16" \
  "$FORGE" verify --gate alignment --profile torch-cpu --config tiny.json --source-dir "$SRC" --calibrate
expect_error "--calibrate on the perf gate" "--calibrate: expected" \
  "$FORGE" verify --gate perf --profile fast --config tiny.json --source-dir "$SRC" --calibrate
