# Shared helpers of the integration tests. Usage: source lib.sh FORGE SRC
set -euo pipefail
FORGE=$(realpath "$1")
SRC=$(realpath "$2")
WORK=$(mktemp -d /tmp/forge-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
PY=${PYTHON:-python3}

fail() { echo "FAIL: $*" >&2; exit 1; }

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
