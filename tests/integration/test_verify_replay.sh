# forge verify's commands.sh replays the gate: from any folder (it goes to the one verify ran
# in, where the config's relative paths hold), from a folder cleared of the runs' outputs (the
# resume gate's merge of the split run's dumps is in it), with the gate's verdict as its exit
# status, and stopping at the first command that fails instead of comparing stale dumps.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config tiny.json "$SRC/configs/tiny.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"' train.threads=1
verify_gate resume fast tiny.json BITWISE
out=$WORK/$(gate_out resume fast tiny.json)
rm -rf "$out"/straight* "$out"/split*
report_before=$(sha256sum "$out/report.md" "$out/report.json")
(cd / && sh "$out/commands.sh" >"$WORK/replay.out" 2>&1) ||
  { cat "$WORK/replay.out" >&2; fail "commands.sh of the resume gate, run from /, failed"; }
tail -n 1 "$WORK/replay.out" | grep -qx "gate resume profile fast: BITWISE" ||
  { cat "$WORK/replay.out" >&2; fail "the replay did not reach the resume gate's BITWISE"; }
echo "ok: the resume gate's commands.sh replays from / in a cleared folder: BITWISE"
# The replay reports beside the run's own reports, which keep verify's Run section.
[ "$(sha256sum "$out/report.md" "$out/report.json")" = "$report_before" ] ||
  fail "the replay rewrote verify's report.md / report.json"
grep -q "^## Run" "$out/report.md" || fail "report.md lost its Run section"
[ -s "$out/report.replay.md" ] && [ -s "$out/report.replay.json" ] ||
  fail "the replay wrote no report.replay.md / report.replay.json"
echo "ok: the replay's report is report.replay.md; verify's report.md is left as it was"

# A replay whose engine cannot run (its shard gone) stops there with the engine's status.
verify_gate alignment fast tiny.json "TOLERANCE|BITWISE"
out=$WORK/$(gate_out alignment fast tiny.json)
mv data data.away
set +e
(cd / && sh "$out/commands.sh" >"$WORK/broken.out" 2>&1)
rc=$?
set -e
mv data.away data
[ $rc -ne 0 ] || { cat "$WORK/broken.out" >&2; fail "a replay whose shards are gone exited 0"; }
! grep -q "^gate alignment profile fast:" "$WORK/broken.out" ||
  { cat "$WORK/broken.out" >&2; fail "a replay whose engine failed still printed a verdict"; }
echo "ok: a replay that cannot run stops at the failing command (exit $rc), with no verdict"

# A switch taken from the environment is replayed: ATEN_CPU_CAPABILITY too.
VERIFY_ARGS="" ATEN_CPU_CAPABILITY=default verify_gate alignment fast tiny.json "TOLERANCE|BITWISE"
grep -q "ATEN_CPU_CAPABILITY=default .*forge_ref" "$out/commands.sh" ||
  fail "commands.sh does not replay ATEN_CPU_CAPABILITY taken from the environment"
echo "ok: commands.sh replays ATEN_CPU_CAPABILITY from the environment"
