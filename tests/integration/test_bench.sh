# forge bench end to end on a tiny config: both profiles beside PyTorch 2.13 (eager), the JSON
# report with every field issue 5 names, the Markdown table, the per-op breakdown; bad input
# refused in one line before anything runs. No timing is asserted: speed is not a test.
# Usage: bash test_bench.sh FORGE_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"
[ -x "$SRC/.venv/bin/python" ] || fail "the reference interpreter $SRC/.venv/bin/python is missing"
prepare_corpus
make_config ci.json "$SRC/configs/ci.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"' out_dir='"run"'

"$FORGE" bench --config ci.json --profiles fast,bf16 --reference torch --modes eager \
  --steps 5 --warmup 2 --breakdown --json report.json --md report.md >table.md 2>err.txt ||
  { cat err.txt >&2; fail "forge bench failed"; }

BF16_DOTS=$(bf16_dots) "$SRC/.venv/bin/python" - <<'PYEOF' ||
  fail "report.json is not what issue 5 asks for"
import json, sys
r = json.load(open("report.json"))
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)
need(r["peak_fp32_flops"] > 1e9, "peak_fp32_flops measured")
# Two readings (before and after its steps) per engine run, the highest of them counting.
need(len(r["peak_fp32_readings"]) == 4 and max(r["peak_fp32_readings"]) == r["peak_fp32_flops"],
     "peak_fp32_readings: two per engine run, the highest the run's peak")
need(r["flops_per_token"] > 0, "flops_per_token")
need(r["threads"] == 2 and r["steps"] == 5 and r["warmup"] == 2, "the run's settings")
# What each profile ran on must follow from this CPU: bf16 dot products only where oneDNN
# finds them (lib.sh's bf16_dots) and FORGE_BF16_NATIVE does not switch them off.
import os
cpu_bf16 = os.environ["BF16_DOTS"] == "1"
native = cpu_bf16 and os.environ.get("FORGE_BF16_NATIVE") != "0"
need("GEMMs" in r["profiles"]["fast"]["engine_arithmetic"], "fast: engine_arithmetic")
bf16_says = r["profiles"]["bf16"]["engine_arithmetic"]
need(("bf16 dot products in" in bf16_says) == native and
     ("bf16-rounded operands in fp32 GEMMs" in bf16_says) == (not native),
     f"bf16: engine_arithmetic '{bf16_says}' where oneDNN has"
     f"{'' if cpu_bf16 else ' no'} bf16 dot products")
for prof, dtype in (("fast", "fp32"), ("bf16", "bf16")):
    p = r["profiles"][prof]
    sides = [("engine", p["engine"])] + list(p["references"].items())
    need(len(p["references"]) == 1, f"{prof}: one reference (eager)")
    for name, s in sides:
        need(s["tokens_per_s"] > 0, f"{prof} {name}: tokens_per_s")
        need(0 < s["mfu"] < 2, f"{prof} {name}: mfu")
        need(s["peak_rss_bytes"] > 1 << 20, f"{prof} {name}: peak_rss_bytes")
        need(s["step_ms_min"] <= s["step_ms_lower_quartile"] <= s["step_ms_median"] <=
             s["step_ms_upper_quartile"] <= s["step_ms_max"], f"{prof} {name}: step ms")
    ref_name, ref = next(iter(p["references"].items()))
    need("eager" in ref_name and dtype in ref_name, f"{prof}: reference named {ref_name}")
    ratio = p["engine"]["tokens_per_s"] / ref["tokens_per_s"]
    need(abs(p["ratio_to_fastest_reference"] - ratio) < 1e-9 * ratio, f"{prof}: ratio")
    low, high = p["ratio_interquartile_range"]
    need(0 < low <= ratio <= high, f"{prof}: ratio {ratio} inside its quartile range {low}-{high}")
    # The range follows from the quartiles the JSON gives: forge's slower against the other's faster.
    eng = p["engine"]
    need(abs(low - ref["step_ms_lower_quartile"] / eng["step_ms_upper_quartile"]) < 1e-9 * low and
         abs(high - ref["step_ms_upper_quartile"] / eng["step_ms_lower_quartile"]) < 1e-9 * high,
         f"{prof}: ratio range {low}-{high} from the step quartiles")
    # The line under the table must state the range and the verdict that follows from it.
    verdict = ("forge is faster across the quartiles" if low > 1 else
               "forge is slower across the quartiles" if high < 1 else "the quartiles overlap")
    md = open("report.md").read()
    need(f"`{prof}` against the fastest reference ({ref_name}): {ratio:.2f}x; "
         f"{low:.2f}-{high:.2f}x between the steps' quartiles: {verdict}" in md,
         f"{prof}: report.md's ratio line")
    ops = p["engine_op_seconds_per_step"]
    need(all(k in ops for k in ("linear fwd", "linear bwd", "attention fwd", "clip + AdamW")),
         f"{prof}: breakdown ops {sorted(ops)}")
    need(all(v >= 0 for v in ops.values()), f"{prof}: breakdown times")
    # The GEMM operations counted in the step's ops are the model's linear layers' (forward and
    # both backward products): 3 x 2 N (12 C^2 per layer + C Vp, the tied classifier).
    flops = p["engine_op_gemm_flops_per_step"]
    m, t = json.load(open("ci.json"))["model"], json.load(open("ci.json"))["train"]
    N, C, L = t["batch_size"] * t["seq_len"], m["n_embd"], m["n_layer"]
    Vp = m.get("padded_vocab_size") or m["vocab_size"]
    expected = 6 * N * (12 * C * C * L + C * Vp)
    need(set(flops) <= set(ops) and "linear fwd" in flops and "attention fwd" not in flops,
         f"{prof}: the ops with GEMM operations {sorted(flops)}")
    need(abs(sum(flops.values()) - expected) <= 1e-9 * expected,
         f"{prof}: GEMM operations per step {sum(flops.values())}, expected {expected}")
for p in problems:
    print("missing or wrong:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
PYEOF

grep -q '^| fast | forge fast |' report.md || fail "report.md lacks the fast row"
grep -q '^| bf16 | torch-.* eager bf16 |' report.md || fail "report.md lacks the bf16 reference row"
grep -q "Where a \`bf16\` step's time goes" table.md || fail "stdout lacks the bf16 breakdown"
grep -q '^| op | ms | share | GEMM GFLOP/s | of fp32 peak |' table.md ||
  fail "the breakdown lacks the GEMMs' rates"
grep -qE '^\| linear fwd \| [0-9.]+ \| [0-9.]+% \| [0-9]+ \| [0-9]+% \|$' table.md ||
  fail "the breakdown gives no rate for linear fwd"
grep -q "^forge's arithmetic on this machine: \`fast\`: .* GEMMs" report.md ||
  fail "report.md does not say what forge ran on"
echo "ok: $(head -n 1 report.md)"

# With rounds, the breakdown averages the rounds' per-step figures: still one step's GEMM
# operations.
"$FORGE" bench --config ci.json --profiles fast --reference none --steps 5 --warmup 2 --rounds 2 \
  --breakdown --json rounds.json >/dev/null 2>err.txt || { cat err.txt >&2; fail "forge bench failed"; }
"$SRC/.venv/bin/python" - <<'PYEOF' || fail "the breakdown over 2 rounds is not per step"
import json, sys
r, cfg = json.load(open("rounds.json")), json.load(open("ci.json"))
m, t = cfg["model"], cfg["train"]
N, C, L = t["batch_size"] * t["seq_len"], m["n_embd"], m["n_layer"]
Vp = m.get("padded_vocab_size") or m["vocab_size"]
counted = sum(r["profiles"]["fast"]["engine_op_gemm_flops_per_step"].values())
expected = 6 * N * (12 * C * C * L + C * Vp)
sys.exit(0 if abs(counted - expected) <= 1e-9 * expected else f"{counted} != {expected}")
PYEOF

# A machine whose speed changes during the run is named under the table: forge_testbugs
# (CMakeLists.txt) reads the peak after each engine run's steps at half speed.
BUGS="$(dirname "$FORGE")/forge_testbugs"
[ -x "$BUGS" ] || fail "$BUGS not found: build the forge_testbugs target (CMakeLists.txt)"
FORGE_TEST_BUG=slow-peak "$BUGS" bench --config ci.json --profiles fast --reference none \
  --steps 5 --warmup 2 >drift.md 2>err.txt || { cat err.txt >&2; fail "forge bench failed"; }
grep -q "The machine's speed did not hold during this run" drift.md ||
  fail "a run whose peak readings fell by half is not called out"
grep -q "the highest of 2 readings, the lowest" drift.md || fail "the peak readings are not given"

expect_error "unknown profile" "--profiles: 'fats'" "$FORGE" bench --config ci.json --profiles fats
expect_error "no profile" "--profiles: expected comma-separated names, none of them empty, got ','" \
  "$FORGE" bench --config ci.json --profiles ,
expect_error "an empty profile" "--profiles: .*none of them empty, got 'fast,,bf16'" \
  "$FORGE" bench --config ci.json --profiles fast,,bf16
expect_error "unknown mode" "--modes: 'eagre'" "$FORGE" bench --config ci.json --modes eagre
expect_error "unknown mode without a reference" "--modes: 'bogus'" \
  "$FORGE" bench --config ci.json --reference none --modes eager,bogus
expect_error "no mode" "--modes: .*none of them empty, got ''" \
  "$FORGE" bench --config ci.json --modes ''
# Outputs that could not be written at the end are refused before the run, nothing replaced.
echo old > existing.json
expect_error "--md into a missing folder" "--md: cannot write nodir/b\.md: its folder nodir does not exist" \
  "$FORGE" bench --config ci.json --reference none --json existing.json --md nodir/b.md
[ "$(cat existing.json)" = old ] || fail "a refused bench replaced its --json file"
expect_error "--json a folder" "--json: data is a folder" \
  "$FORGE" bench --config ci.json --reference none --json data
expect_error "unknown reference" "--reference: expected torch or none" \
  "$FORGE" bench --config ci.json --reference tensorflow
expect_error "missing config" "nope\.json" "$FORGE" bench --config nope.json

# PyTorch's matmul rates on the config's shapes: a row per layer and dtype, rates above zero.
"$SRC/.venv/bin/python" "$SRC/bench/torch_matmul_rates.py" --config ci.json --repeats 5 \
  >mm.md || fail "torch_matmul_rates.py failed"
rate='[0-9.]+'
shape='[0-9]+ x [0-9]+ x [0-9]+'
row="^\\| (bfloat16|float32) \\| [a-z_]+ \\| $shape \\| $rate \\| $rate \\| $rate \\|\$"
rows=$(grep -cE "$row" mm.md)
[ "$rows" -eq 8 ] || { cat mm.md >&2; fail "torch_matmul_rates.py: $rows layer rows, expected 8"; }
! grep -qE '\| 0\.0( \||$)' mm.md || fail "torch_matmul_rates.py: a rate of zero"
echo "ok: torch_matmul_rates.py, $rows rows"
expect_error "matmul rates, missing config" "nope\.json" \
  "$SRC/.venv/bin/python" "$SRC/bench/torch_matmul_rates.py" --config nope.json

# A name given twice ran twice and kept one run's figures: refused.
expect_error "a profile given twice" "--profiles: 'fast' is given twice in 'fast,bf16,fast'" \
  "$FORGE" bench --config ci.json --profiles fast,bf16,fast
expect_error "a mode given twice" "--modes: 'eager' is given twice" \
  "$FORGE" bench --config ci.json --modes eager,eager
expect_error "one warm-up step" "--warmup: expected an integer from 2 to 100, got 1" \
  "$FORGE" bench --config ci.json --warmup 1
# The engine alone needs no checkout: a forge copied elsewhere benches with --reference none.
mkdir -p elsewhere && cp "$FORGE" elsewhere/forge
elsewhere/forge bench --config ci.json --profiles fast --reference none --steps 5 \
  >elsewhere.md 2>elsewhere.err || { cat elsewhere.err >&2; fail "a forge outside its checkout could not bench the engine alone"; }
grep -q "^| fast | forge fast |" elsewhere.md || fail "the engine-only bench printed no row"
echo "ok: the engine alone benches outside the checkout"
