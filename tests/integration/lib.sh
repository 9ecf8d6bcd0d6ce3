# Shared helpers of the integration tests. Usage: source lib.sh FORGE SRC
set -euo pipefail
FORGE=$(realpath "$1")
SRC=$(realpath "$2")
WORK=$(mktemp -d /tmp/forge-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
PY=${PYTHON:-python3}

fail() { echo "FAIL: $*" >&2; exit 1; }
# For what the CPU lacks, never for a missing reference (that fails): the test reports Skipped.
skip() { echo "SKIP: $*"; exit 77; }

# Prints 1 where oneDNN will find bf16 dot products (the CPU has avx512_bf16 and no
# DNNL_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA caps oneDNN below them), else 0: forge's bf16 profile
# takes its VDPBF16PS path exactly then.
bf16_dots() {
  grep -qw avx512_bf16 /proc/cpuinfo || { echo 0; return; }
  local cap=${ONEDNN_MAX_CPU_ISA:-${DNNL_MAX_CPU_ISA:-}}
  case ${cap,,} in
    "" | all | default | avx512_core_bf16 | avx512_core_fp16 | avx512_core_amx* | avx10_*) echo 1 ;;
    *) echo 0 ;;
  esac
}

# A small real corpus (a few fortune files), tokenized to bytes.
prepare_corpus() {
  local files=(/usr/share/games/fortunes/*)
  local texts=()
  for f in "${files[@]}"; do
    case "$f" in *.dat|*.u8) continue ;; esac
    [ -f "$f" ] && texts+=("$f")
  done
  [ ${#texts[@]} -gt 0 ] || fail "no fortunes corpus under /usr/share/games/fortunes"
  "$FORGE" data prepare --tokenizer bytes --out "$WORK/data" "${texts[@]}" 2>/dev/null
}

# make_config OUT BASE key=value... : copies a config, setting dotted keys (JSON values).
make_config() {
  local out=$1 base=$2
  shift 2
  "$PY" - "$out" "$base" "$@" <<'PYEOF'
import json, sys
out, base, *sets = sys.argv[1:]
cfg = json.load(open(base))
for s in sets:
    key, val = s.split("=", 1)
    node = cfg
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = json.loads(val)
json.dump(cfg, open(out, "w"), indent=1)
PYEOF
}

# expect_error NAME PATTERN CMD...: the command must fail with exactly one stderr line
# matching PATTERN.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  set +e
  "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"
  local rc=$?
  set -e
  [ $rc -ne 0 ] || fail "$name: exit status 0, expected an error"
  local lines
  lines=$(wc -l <"$WORK/err.txt")
  [ "$lines" -eq 1 ] || { cat "$WORK/err.txt" >&2; fail "$name: $lines lines on stderr, expected 1"; }
  grep -qE -- "$pattern" "$WORK/err.txt" || { cat "$WORK/err.txt" >&2; fail "$name: stderr does not match '$pattern'"; }
  echo "ok: $name: $(cat "$WORK/err.txt")"
}

# No temporary or partial files anywhere below a folder.
expect_no_partial_files() {
  local dir=$1
  [ -d "$dir" ] || return 0
  local left
  left=$(find "$dir" -name '*.tmp*' | head -5)
  [ -z "$left" ] || fail "partial files left behind: $left"
}

# train_real_text NAME BASE_CONFIG: trains BASE_CONFIG for 200 steps on the corpus of
# prepare_corpus (into cfg.json, run/); the first loss must be near ln(256) = 5.545 (an
# untrained model) and the validation loss after training well below it (< 3.3); eval and
# sample must work on the last checkpoint.
train_real_text() {
  local name=$1 base=$2
  make_config cfg.json "$base" train.steps=200 train.eval_interval=0 \
    data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'
  "$FORGE" train --config cfg.json --quiet
  "$FORGE" eval --checkpoint run/checkpoints/step_000200 --json > eval.json
  "$PY" - "$name" <<'PYEOF'
import json, math, sys
name = sys.argv[1]
first = json.loads(open("run/metrics.jsonl").readline())["loss"]
val = json.load(open("eval.json"))["val_loss"]
print(f"{name}: first loss {first:.4f}, validation loss after 200 steps {val:.4f}, ln(256) = {math.log(256):.4f}")
assert first > 5.0, "an untrained model should start near ln(256)"
assert val < 3.3, f"validation loss {val} is not well below ln(256)"
PYEOF
  "$FORGE" sample --checkpoint run/checkpoints/step_000200 --prompt "The " --tokens 40 --seed 1 > sample.txt 2>/dev/null
  [ "$(wc -c < sample.txt)" -ge 44 ] || fail "$name: sample printed fewer bytes than prompt + 40 tokens"
  echo "ok: $name: sample: $(head -c 80 sample.txt | tr '\n' ' ')"
}

# llama_gate GATE STEPS [DUMP-ARGS...]: the PyTorch reference (.venv) draws the initial state;
# the engine and the reference train llama-tiny (padded vocabulary, no validation) for STEPS
# steps from it with level-2 dumps in eng/ and ref/ (DUMP-ARGS, e.g. --dump-act-steps 1,8, go
# to both sides); forge_ref.compare must find the `fast` profile at TOLERANCE for GATE
# (report.md). Sets VPY and PYTHONPATH for the checks that follow.
llama_gate() {
  local gate=$1 steps=$2
  shift 2
  VPY="$SRC/.venv/bin/python"
  [ -x "$VPY" ] || fail "$VPY is missing: the reference side of this gate needs the .venv"
  export PYTHONPATH="$SRC/reference" OMP_NUM_THREADS=2
  prepare_corpus
  make_config cfg.json "$SRC/configs/llama-tiny.json" train.steps="$steps" \
    train.eval_interval=0 train.eval_batches=0 model.padded_vocab_size=272 \
    data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'
  "$VPY" -m forge_ref.train --config cfg.json --init-out init.safetensors
  "$FORGE" train --config cfg.json --init init.safetensors --dump eng --dump-level 2 "$@" --quiet
  "$VPY" -m forge_ref.train --config cfg.json --init init.safetensors --dump ref --dump-level 2 \
    "$@" --threads 2 > /dev/null
  "$VPY" -m forge_ref.compare eng ref --gate "$gate" --profile fast --required TOLERANCE --md report.md \
    || { sed -n 1,12p report.md >&2; fail "llama $gate gate (fast) below TOLERANCE"; }
}

# verify_gate GATE PROFILE CONFIG RUNGS [FILES...]: `forge verify` exits 0, its last line
# names one of RUNGS (a regular expression), and its --out folder holds the two reports with
# their run section (and FILES). Prints the verdict, the worst tensor and, for the long runs,
# the convergence and speed lines.
# The folder verify_gate writes a gate's reports to: gate_out GATE PROFILE CONFIG
gate_out() { echo "v-$1-$2-${3%.json}"; }

verify_gate() {
  local gate=$1 profile=$2 cfg=$3 rungs=$4 t0=$SECONDS rc last f
  shift 4
  local out
  out=$(gate_out "$gate" "$profile" "$cfg")
  set +e
  # VERIFY_ARGS: more options for forge verify (word-split), e.g. --calibrate
  "$FORGE" verify --gate "$gate" --profile "$profile" --config "$cfg" --source-dir "$SRC" \
    --out "$out" ${VERIFY_ARGS:-} >"$out.out" 2>"$out.err"
  rc=$?
  set -e
  last=$(tail -n 1 "$out.out")
  if [ $rc -ne 0 ] || ! [[ "$last" =~ ^gate\ $gate\ profile\ $profile:\ ($rungs)$ ]]; then
    cat "$out.out" "$out.err" >&2
    fail "$gate ($profile) on $cfg: exit $rc, last line '$last', expected one of $rungs"
  fi
  for f in report.md report.json "$@"; do
    [ -s "$out/$f" ] || fail "$gate ($profile) on $cfg: $out/$f was not written"
  done
  grep -q "^- run time" "$out/report.md" || fail "$gate ($profile): $out/report.md lacks the run section"
  echo "ok: $last on $cfg ($((SECONDS - t0)) s); $(grep -m1 '^worst tensor' "$out.out")"
  grep -E '^- (convergence|speed)' "$out/report.md" || true
}
