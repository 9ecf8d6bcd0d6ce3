# The dp gate (../shared/EQUIVALENCE.md) and data-parallel training end to end:
#  1. `mpirun -np 2` (1 accumulation step per rank) against the engine's single process with
#     2 accumulation steps, same global batch: BITWISE on every step's loss and grad norm
#     and on the final model and optimizer files, for the `fast` and `torch-cpu` profiles;
#     also 2 ranks x 2 steps against 1 process x 4 steps (the accumulate path).
#  2. ZeRO-1 (`--dp-sharding zero1`): half the AdamW state per rank; bitwise equal to the
#     replicated run when the clip is inactive; resume with the same N bit for bit; its
#     checkpoint resumed by a single process (another N) continues bit for bit. Without the
#     flag FORGE_DP_SHARDING=zero1 does the same; with both, the flag wins.
#  3. Against the PyTorch reference with the same global batch: TOLERANCE for `fast`.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || fail "mpirun is missing (apt-get install openmpi-bin)"
VPY="$SRC/.venv/bin/python"
[ -x "$VPY" ] || fail "$VPY is missing: the reference side of this gate needs the .venv"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp
        --mca btl_tcp_if_include lo --mca btl_vader_single_copy_mechanism none
        -x OMP_NUM_THREADS=1)
prepare_corpus
common=(train.steps=8 train.eval_interval=0 train.eval_batches=2 train.threads=1
        train.log_interval=1 train.checkpoint_interval=0 data.train='"data/train.bin"'
        data.val='"data/val.bin"')
make_config one_a2.json "$SRC/configs/tiny.json" "${common[@]}" train.grad_accum_steps=2
make_config one_a4.json "$SRC/configs/tiny.json" "${common[@]}" train.grad_accum_steps=4
make_config two_a1.json "$SRC/configs/tiny.json" "${common[@]}" train.grad_accum_steps=1
make_config two_a2.json "$SRC/configs/tiny.json" "${common[@]}" train.grad_accum_steps=2
make_config one_a2_noclip.json one_a2.json train.grad_clip=0
make_config two_a1_noclip.json two_a1.json train.grad_clip=0

# same_run A B [--losses-only]: identical per-step losses and grad norms, identical final
# model (and optimizer) files.
same_run() {
  "$PY" - "$@" <<'PYEOF'
import glob, json, sys
a, b, *flags = sys.argv[1:]
def steps(d):
    return {r["step"]: r for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "loss" in r}
sa, sb = steps(a), steps(b)
if sorted(sa) != sorted(sb) or not sa:
    sys.exit(f"FAIL: {a} has steps {sorted(sa)}, {b} has {sorted(sb)}")
keys = ["loss"] if "--losses-only" in flags else ["loss", "grad_norm"]
bad = [(s, k, sa[s][k], sb[s][k]) for s in sorted(sa) for k in keys if sa[s][k] != sb[s][k]]
if bad:
    sys.exit(f"FAIL: {a} vs {b}: first differences {bad[:3]}")
last = max(sa)
for f in ["model.safetensors", "optimizer.safetensors"]:
    x = open(f"{a}/checkpoints/step_{last:06d}/{f}", "rb").read()
    y = open(f"{b}/checkpoints/step_{last:06d}/{f}", "rb").read()
    if x != y:
        sys.exit(f"FAIL: {a} vs {b}: {f} of step {last} differs")
print(f"ok: {a} == {b}: {len(sa)} steps of {', '.join(keys)} and the final model and optimizer bytes")
PYEOF
}

# --- 1. BITWISE against the engine's own single process --------------------------------
for p in fast torch-cpu; do
  "$FORGE" train --config one_a2.json --numerics $p --out-dir one_$p --quiet >/dev/null
  "${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a1.json --numerics $p --out-dir two_$p >two_$p.log
  grep -q "data parallel: 2 ranks over mpi, 3 buckets" two_$p.log || { cat two_$p.log >&2; fail "no data-parallel line"; }
  # tiny has 2 layers: their 2 buckets start during backward, the embeddings' after it
  grep -q "2.0 of 3 buckets per micro-step started while backward ran" two_$p.log ||
    { cat two_$p.log >&2; fail "the gradient buckets did not start during backward"; }
  same_run one_$p two_$p
done
"$FORGE" train --config one_a4.json --out-dir one_a4 --quiet >/dev/null
"${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a2.json --out-dir two_a2 --quiet >/dev/null
same_run one_a4 two_a2

# --- 2. ZeRO-1 --------------------------------------------------------------------------
ZERO=(--dp-sharding zero1)
"${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a1_noclip.json --out-dir zero_nc "${ZERO[@]}" >zero_nc.log
"$FORGE" train --config one_a2_noclip.json --out-dir one_nc --quiet >/dev/null
# the clip off, the coefficient is exactly 1 and ZeRO-1 is bitwise the replicated update
# (its grad norm is summed per shard, so only the logged norm may differ in the last bits)
same_run one_nc zero_nc --losses-only
# the environment variable is the fallback when the flag is absent; the flag wins over it
"${MPIRUN[@]}" -x FORGE_DP_SHARDING=zero1 -np 2 "$FORGE" train --config two_a1_noclip.json \
  --out-dir zero_env >zero_env.log
grep -q "optimizer ZeRO-1 (sharded)" zero_env.log || { cat zero_env.log >&2; fail "FORGE_DP_SHARDING=zero1 did not shard"; }
same_run zero_nc zero_env
"${MPIRUN[@]}" -x FORGE_DP_SHARDING=zero1 -np 2 "$FORGE" train --config two_a1_noclip.json \
  --out-dir flag_wins --dp-sharding none >flag_wins.log
grep -q "optimizer replicated" flag_wins.log ||
  { cat flag_wins.log >&2; fail "--dp-sharding none did not win over FORGE_DP_SHARDING=zero1"; }
same_run one_nc flag_wins
expect_error "unknown --dp-sharding" "--dp-sharding.*zero2" \
  "$FORGE" train --config two_a1.json --dp-sharding zero2
"$PY" - zero_nc.log <<'PYEOF'
import re, sys
line = next((l for l in open(sys.argv[1]) if "ZeRO-1" in l), None)
if not line:
    sys.exit("FAIL: no ZeRO-1 memory line in the log")
m = re.search(r"AdamW state ([\d.]+) MiB per rank \(unsharded ([\d.]+) MiB\)", line)
mine, full = float(m.group(1)), float(m.group(2))
if not (mine <= full / 2 + 0.01):
    sys.exit(f"FAIL: ZeRO-1 keeps {mine} MiB of AdamW state per rank, expected about half of {full}")
print(f"ok: ZeRO-1 AdamW state {mine} MiB per rank of {full} MiB")
PYEOF
# with the clip active: straight vs stopped at 4 and resumed, same N
"${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a1.json --out-dir zero "${ZERO[@]}" --quiet >/dev/null
"${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a1.json --out-dir zero_split "${ZERO[@]}" \
  --stop-after 4 --quiet >/dev/null
[ -f zero_split/checkpoints/step_000004/optimizer.safetensors ] || fail "no ZeRO-1 checkpoint at step 4"
"${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a1.json --out-dir zero_split "${ZERO[@]}" \
  --resume zero_split/checkpoints/step_000004 --quiet >/dev/null
same_run zero zero_split
# another N: the 2-rank ZeRO-1 checkpoint (full optimizer state) resumed by one process
# with 2 accumulation steps continues exactly as that process's own run would
"${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a1_noclip.json --out-dir reshard "${ZERO[@]}" \
  --stop-after 4 --quiet >/dev/null
"$FORGE" train --config one_a2_noclip.json --out-dir reshard \
  --resume reshard/checkpoints/step_000004 --quiet >/dev/null
same_run one_nc reshard --losses-only
# a different global batch is refused in one line
expect_error "resume with another global batch" "another batch .*2 ranks" \
  "$FORGE" train --config two_a1.json --out-dir refuse --resume zero_split/checkpoints/step_000004
expect_no_partial_files .

# --- 3. against the reference, same global batch (TOLERANCE for fast) -------------------
export PYTHONPATH="$SRC/reference"
"$VPY" -m forge_ref.train --config one_a2.json --init-out init.safetensors
"$VPY" -m forge_ref.train --config one_a2.json --init init.safetensors --dump ref --dump-level 2 \
  --threads 1 >/dev/null
"${MPIRUN[@]}" -np 2 "$FORGE" train --config two_a1.json --init init.safetensors --dump eng \
  --dump-level 2 --out-dir ref_run --quiet >/dev/null
"$VPY" -m forge_ref.compare eng ref --gate dp --profile fast --required TOLERANCE --exempt-k-bias --md report.md \
  || { sed -n 1,12p report.md >&2; fail "dp gate (fast) against the reference below TOLERANCE"; }
echo "ok: dp gate, fast, against the reference: $(head -1 report.md)"
