# The perf gate for llama, `fast` profile (EQUIVALENCE.md): llama-tiny trained 200 steps on
# real text by the engine and by the PyTorch reference in one `forge verify` run; SURPASS
# needs the loss curves CONVERGENT, the engine's final validation loss no more than 0.5%
# above the reference's, and the engine's median step faster than the reference's.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/llama-tiny.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"' out_dir='"run"'

set +e
"$FORGE" verify --gate perf --profile fast --config cfg.json --source-dir "$SRC" --out v-perf \
  >perf.out 2>perf.err
rc=$?
set -e
last=$(tail -n 1 perf.out)
[ $rc -eq 0 ] || { cat perf.out perf.err >&2; fail "llama perf gate exited with $rc"; }
[ "$last" = "gate perf profile fast: SURPASS" ] || { cat perf.out >&2; fail "last line '$last'"; }
for f in report.md report.json loss.png; do [ -s "v-perf/$f" ] || fail "v-perf/$f was not written"; done
grep -m1 '^- convergence' v-perf/report.md
grep -m1 '^- speed' v-perf/report.md
echo "ok: $last"
