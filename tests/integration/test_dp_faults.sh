# Faults in a data-parallel run: a rank killed mid-run (the writer, rank 0, or another) makes
# the other exit non-zero, with a one-line forge error, within bounded time; a stalled rank
# trips the communication timeout (FORGE_DIST_TIMEOUT_S). No checkpoint is left half written:
# the latest checkpoint is whole and resumes, and nothing partial remains.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || fail "mpirun is missing (apt-get install openmpi-bin)"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp
        --mca btl_tcp_if_include lo --mca btl_vader_single_copy_mechanism none
        -x OMP_NUM_THREADS=1)
prepare_corpus
make_config cfg.json "$SRC/configs/tiny.json" train.steps=100000 train.eval_interval=0 \
  train.threads=1 train.checkpoint_interval=3 train.grad_accum_steps=1 \
  data.train='"data/train.bin"' data.val='"data/val.bin"'

# pid_of_rank R: the pid of rank R of the newest mpirun (its children carry their rank).
pid_of_rank() {
  local mp p
  mp=$(pgrep -n -x mpirun) || return 1
  for p in $(pgrep -P "$mp"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# fault NAME SIGNAL RANK PATTERN [ENV...]: starts 2 ranks, waits for 7 steps, sends SIGNAL to
# RANK, and expects the run to end within 60 s, non-zero, with a stderr line matching PATTERN.
fault() {
  local name=$1 sig=$2 victim=$3 pattern=$4
  shift 4
  local out="run_$name"
  "${MPIRUN[@]}" "$@" -np 2 "$FORGE" train --config cfg.json --out-dir "$out" --quiet \
    >"$name.out" 2>"$name.err" &
  local job=$!
  local waited=0
  until [ -f "$out/metrics.jsonl" ] && [ "$(grep -c '"loss"' "$out/metrics.jsonl")" -ge 7 ]; do
    sleep 0.2
    waited=$((waited + 1))
    [ $waited -lt 600 ] || { kill "$job"; fail "$name: the run made no progress in 120 s"; }
  done
  local pid
  pid=$(pid_of_rank "$victim") || { kill "$job"; fail "$name: no rank $victim found"; }
  local t0=$SECONDS
  kill -"$sig" "$pid"
  set +e
  wait "$job"
  local rc=$?
  set -e
  local took=$((SECONDS - t0))
  [ $rc -ne 0 ] || fail "$name: the run exited 0 after rank $victim got SIG$sig"
  [ $took -le 60 ] || fail "$name: the surviving rank took $took s to exit"
  grep -E -- "$pattern" "$name.err" >/dev/null ||
    { cat "$name.err" >&2; fail "$name: no stderr line matching '$pattern'"; }
  echo "ok: $name: exit $rc after $took s: $(grep -E -- "$pattern" "$name.err" | head -1)"

  # The latest checkpoint is whole and a new run continues from it (which also clears any
  # *.tmp the killed writer left; it was never renamed into a checkpoint).
  local latest
  latest=$(cat "$out/checkpoints/latest")
  for f in model.safetensors optimizer.safetensors state.json; do
    [ -f "$latest/$f" ] || fail "$name: $latest lacks $f"
  done
  for d in "$out"/checkpoints/step_*; do
    case "$d" in *.tmp) continue ;; esac
    [ -f "$d/state.json" ] || fail "$name: $d is a half-written checkpoint"
  done
  local step
  step=$(basename "$latest" | sed 's/step_0*//')
  "${MPIRUN[@]}" -np 2 "$FORGE" train --config cfg.json --out-dir "$out" --resume "$latest" \
    --stop-after $((step + 2)) --quiet >/dev/null 2>"$name.resume.err" ||
    { cat "$name.resume.err" >&2; fail "$name: resuming from $latest failed"; }
  expect_no_partial_files "$out"
  echo "ok: $name: $latest is whole and resumes"
}

fault kill-rank1 KILL 1 "^forge: error: rank 0: "
fault kill-rank0 KILL 0 "^forge: error: rank 1: "
# A stalled (not dead) rank: the launcher sees nothing wrong, the timeout must fire.
fault stall-rank1 STOP 1 "^forge: error: rank 0: no answer from the other ranks for [0-9]+ s" \
  -x FORGE_DIST_TIMEOUT_S=5

# Ranks started unlike each other end at once, in one line, before any folder is made: one
# rank refusing its environment (it stayed alive inside MPI's exit while the other waited out
# its timeout), another FORGE_DP_SHARDING (it deadlocked), another config (it trained).
make_config cfg16.json cfg.json train.seq_len=32
mismatch() {  # NAME PATTERN RANK1-COMMAND...
  local name=$1 pattern=$2 t0=$SECONDS rc
  shift 2
  set +e
  timeout 60 "${MPIRUN[@]}" -np 1 "$FORGE" train --config cfg.json --out-dir "run_$name" \
    --stop-after 2 --quiet : -np 1 "$@" >"$name.out" 2>"$name.err"
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$name: exit $rc, expected a prompt failure"
  grep -E -- "$pattern" "$name.err" >/dev/null ||
    { cat "$name.err" >&2; fail "$name: no stderr line matching '$pattern'"; }
  [ ! -e "run_$name" ] || fail "$name: the run folder was made"
  echo "ok: $name: exit $rc after $((SECONDS - t0)) s: $(grep -E -- "$pattern" "$name.err" | head -1)"
}
mismatch bad-timeout "FORGE_DIST_TIMEOUT_S: expected a positive number of seconds, got 'abc'" \
  env FORGE_DIST_TIMEOUT_S=abc "$FORGE" train --config cfg.json --out-dir run_bad-timeout \
  --stop-after 2 --quiet
mismatch other-sharding "rank 1 was started with another config, numerics, resume or FORGE_DP_SHARDING" \
  env FORGE_DP_SHARDING=zero1 "$FORGE" train --config cfg.json --out-dir run_other-sharding \
  --stop-after 2 --quiet
mismatch other-config "rank 1 was started with another config" \
  "$FORGE" train --config cfg16.json --out-dir run_other-config --stop-after 2 --quiet
