# The MPI communicator under a real launcher: the DistMpi unit tests run as 2 and 3 ranks of
# `mpirun` (ordered all-reduce, reduce-scatter, all-gather, broadcast, gather, barrier, bit
# for bit against the rank-ordered float sums). The unit tests are forge_tests, built beside
# forge.
source "$(dirname "$0")/lib.sh"
TESTS=$(dirname "$FORGE")/forge_tests
[ -x "$TESTS" ] || fail "$TESTS is missing: build the forge_tests target"
command -v mpirun >/dev/null || fail "mpirun is missing (apt-get install openmpi-bin)"
# As root, on loopback, more ranks than cores: the flags Open MPI needs for that.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp
        --mca btl_tcp_if_include lo --mca btl_vader_single_copy_mechanism none
        -x OMP_NUM_THREADS=1)

for np in 2 3; do
  "${MPIRUN[@]}" -np $np "$TESTS" --gtest_filter='DistMpi.*' >out.txt 2>&1 ||
    { cat out.txt >&2; fail "DistMpi tests failed with $np ranks"; }
  # Every rank must have run and passed every DistMpi test (none vacuously).
  passed=$(grep -c '\[  PASSED  \]' out.txt || true)
  [ "$passed" -eq $np ] || { cat out.txt >&2; fail "$passed of $np ranks reported PASSED"; }
  grep -q 'FAILED' out.txt && { cat out.txt >&2; fail "a rank reported FAILED"; }
  echo "ok: DistMpi.* passed on each of $np ranks"
done
