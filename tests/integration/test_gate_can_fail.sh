# The gates can fail: forge_testbugs (CMakeLists.txt) is the engine with deliberate bugs
# behind FORGE_TEST_BUG (src/forge/core/test_bugs.h). With a bug switched on, the alignment
# gate must fail and name the first tensor that diverges; with none, it must pass, so that
# the failures are the bugs' doing and not the build's.
source "$(dirname "$0")/lib.sh"
BUGS="$(dirname "$FORGE")/forge_testbugs"
[ -x "$BUGS" ] || fail "$BUGS not found: build the forge_testbugs target (CMakeLists.txt)"
prepare_corpus
make_config tiny.json "$SRC/configs/tiny.json" data.train='"data/train.bin"' data.val='"data/val.bin"'

# verify_with_bug BUG EXPECTED_RC LAST_LINE_REGEX [FIRST_FAILURE_REGEX]
verify_with_bug() {
  local bug=$1 want_rc=$2 want_last=$3 want_first=${4:-}
  local t0=$SECONDS rc
  set +e
  FORGE_TEST_BUG=$bug "$BUGS" verify --gate alignment --profile fast --config tiny.json \
    --source-dir "$SRC" --out "v-${bug:-none}" >"out-${bug:-none}.txt" 2>"err-${bug:-none}.txt"
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
# output is the first to differ.
verify_with_bug attn-scale 1 '^gate alignment profile fast: NONE$' \
  '^- first failing tensor: step 1 `act\.h\.0\.attn\.sdpa`'
# AdamW without bias correction: loss and gradients of step 1 match, the updated parameters
# are the first to differ.
verify_with_bug adamw-no-bias-correction 1 '^gate alignment profile fast: NONE$' \
  '^- first failing tensor: step 1 `param\.transformer\.'
verify_with_bug "" 0 '^gate alignment profile fast: (TOLERANCE|BITWISE)$'
