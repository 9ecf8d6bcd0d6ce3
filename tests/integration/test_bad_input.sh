# Bad input: one line on stderr naming the file and the field, a non-zero exit, and no
# partial file left behind.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config good.json "$SRC/configs/tiny.json" train.steps=2 train.eval_interval=0 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"run"'

expect_error "missing config" "nope\.json" "$FORGE" train --config nope.json
printf '{"model": {"n_layer": 2,}' > malformed.json
expect_error "malformed config" "malformed\.json" "$FORGE" train --config malformed.json
make_config unknown.json good.json train.stpes=3
expect_error "unknown field" "unknown\.json.*train\.stpes" "$FORGE" train --config unknown.json
make_config mistyped.json good.json train.steps='"ten"'
expect_error "mistyped field" "mistyped\.json.*train\.steps" "$FORGE" train --config mistyped.json
make_config range.json good.json model.n_head=5
expect_error "inconsistent dims" "range\.json.*n_head" "$FORGE" train --config range.json
expect_error "bad FORGE_FLUSH_SUBNORMALS" "FORGE_FLUSH_SUBNORMALS: expected 0 or 1, got 'yes'" \
  env FORGE_FLUSH_SUBNORMALS=yes "$FORGE" train --config good.json
[ ! -e run ] || fail "bad FORGE_FLUSH_SUBNORMALS: the run folder was written"
expect_error "bad FORGE_BF16_AMX" "FORGE_BF16_AMX: expected 0 or 1, got 'on'" \
  env FORGE_BF16_AMX=on "$FORGE" train --config good.json
[ ! -e run ] || fail "bad FORGE_BF16_AMX: the run folder was written"
expect_error "bad FORGE_BF16_NATIVE" "FORGE_BF16_NATIVE: expected 0 or 1, got 'false'" \
  env FORGE_BF16_NATIVE=false "$FORGE" train --config good.json
[ ! -e run ] || fail "bad FORGE_BF16_NATIVE: the run folder was written"

# The llama family's own rules, each refused before any training starts.
make_config llama.json "$SRC/configs/llama-tiny.json" train.steps=2 train.eval_interval=0 \
  data.train='"data/train.bin"' data.val='"data/val.bin"' out_dir='"llama_run"'
llama_case() {  # NAME PATTERN key=value...
  local name=$1 pattern=$2
  shift 2
  make_config bad_llama.json llama.json "$@"
  expect_error "$name" "bad_llama\.json: field '$pattern" "$FORGE" train --config bad_llama.json
}
llama_case "llama: n_kv_head not dividing n_head" "model\.n_kv_head': expected a divisor of model\.n_head \(4\), got 3" \
  model.n_kv_head=3
llama_case "llama: more kv heads than heads" "model\.n_kv_head'" model.n_kv_head=8
llama_case "llama: n_embd not divisible by n_head" "model\.n_embd': expected a multiple of model\.n_head" \
  model.n_embd=66
llama_case "llama: odd head dim" "model\.n_embd': expected an even head dimension" model.n_embd=72 model.n_head=8 \
  model.n_kv_head=8
llama_case "llama: ffn_hidden 0" "model\.ffn_hidden': expected the SwiGLU width" model.ffn_hidden=0
llama_case "llama: ffn_hidden negative" "model\.ffn_hidden'" model.ffn_hidden=-176
"$PY" -c 'import json; c = json.load(open("llama.json")); del c["model"]["ffn_hidden"]; json.dump(c, open("bad_llama.json", "w"))'
expect_error "llama: ffn_hidden missing" "bad_llama\.json: field 'model\.ffn_hidden': expected the SwiGLU width" \
  "$FORGE" train --config bad_llama.json
llama_case "llama: rope_theta 0" "model\.rope_theta': expected a positive number" model.rope_theta=0
llama_case "llama: rope_theta negative" "model\.rope_theta': expected a positive number" model.rope_theta=-10000.0
llama_case "llama: norm_eps 0" "model\.norm_eps': expected a positive number" model.norm_eps=0
llama_case "llama: norm_eps negative" "model\.norm_eps': expected a positive number" model.norm_eps=-1e-5
# gpt2 takes the llama-only fields only at values that change nothing
make_config bad_gpt2.json good.json model.n_kv_head=2
expect_error "gpt2: n_kv_head" "bad_gpt2\.json: field 'model\.n_kv_head'.*for family gpt2" "$FORGE" train --config bad_gpt2.json
make_config bad_gpt2.json good.json model.ffn_hidden=100
expect_error "gpt2: ffn_hidden" "bad_gpt2\.json: field 'model\.ffn_hidden'.*for family gpt2" "$FORGE" train --config bad_gpt2.json
make_config bad_gpt2.json good.json model.rope_theta=500000.0
expect_error "gpt2: rope_theta" "bad_gpt2\.json: field 'model\.rope_theta'.*for family gpt2" "$FORGE" train --config bad_gpt2.json
[ ! -e llama_run ] || fail "a rejected llama config left an output folder"

# A checkpoint of another shape.
"$FORGE" train --config good.json --quiet
make_config wider.json good.json model.n_embd=96
expect_error "checkpoint of the wrong shape" "step_000002" \
  "$FORGE" train --config wider.json --resume run/checkpoints/step_000002
expect_error "eval of the wrong shape" "model\.safetensors.*transformer\.wte\.weight" \
  "$FORGE" eval --checkpoint run/checkpoints/step_000002/model.safetensors --config wider.json

# A checkpoint whose state.json disagrees with its weights (fewer blocks: the last would be
# dropped) or comes from another format version.
cp -r run/checkpoints/step_000002 fewer_blocks
"$PY" -c "import json; p = 'fewer_blocks/state.json'; j = json.load(open(p)); j['config']['model']['n_layer'] = 1; json.dump(j, open(p, 'w'))"
expect_error "state.json with fewer blocks than its weights" \
  "fewer_blocks/model\.safetensors: tensor 'transformer\.h\.1\..*' belongs to block 1, but the model has 1 blocks" \
  "$FORGE" eval --checkpoint fewer_blocks
cp -r run/checkpoints/step_000002 version99
"$PY" -c "import json; p = 'version99/state.json'; j = json.load(open(p)); j['version'] = 99; json.dump(j, open(p, 'w'))"
expect_error "state.json of another version" "version99/state\.json: field 'version': expected 1, got 99" \
  "$FORGE" export --checkpoint version99 --hf hf_v99
[ ! -e hf_v99 ] || fail "a refused export left its folder behind"

cp -r run/checkpoints/step_000002 negative_step
"$PY" -c "import json; p = 'negative_step/state.json'; j = json.load(open(p)); j['step'] = -3; json.dump(j, open(p, 'w'))"
expect_error "state.json with a negative step" "negative_step/state\.json: field 'step': expected a non-negative integer, got -3" \
  "$FORGE" eval --checkpoint negative_step
cp -r run/checkpoints/step_000002 nan_weight
"$PY" - <<'PYEOF'
import json, struct
p = "nan_weight/model.safetensors"
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
at = 8 + n + h["transformer.wte.weight"]["data_offsets"][0]
b[at:at + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
PYEOF
expect_error "a NaN in the weights" "nan_weight/model\.safetensors: tensor 'transformer\.wte\.weight' holds nan at element 0" \
  "$FORGE" train --config good.json --resume nan_weight --out-dir nan_run
[ ! -e nan_run ] || fail "a refused resume left its folder behind"
# A byte model whose vocabulary has rows past 256 samples only what the byte tokenizer can
# decode (it failed midway, on the first id of 256 or more it drew).
make_config v300.json good.json model.vocab_size=300 out_dir='"run300"'
"$FORGE" train --config v300.json --quiet >/dev/null
"$FORGE" sample --checkpoint run300 --tokens 300 --temperature 5 --seed 1 >v300.txt 2>v300.err ||
  { cat v300.err >&2; fail "sampling a 300-token byte model failed"; }
echo "ok: a byte model of 300 tokens samples 300 bytes"
# A checkpoints folder that cannot be made is refused before training, not at the first
# checkpoint after it.
mkdir -p blocked && echo x > blocked/checkpoints
expect_error "checkpoints path a file" "blocked/checkpoints: cannot create directory" \
  "$FORGE" train --config good.json --out-dir blocked
[ ! -e blocked/metrics.jsonl ] || fail "a refused run wrote metrics.jsonl"

# A Hugging Face folder forge cannot run: each refusal names config.json and HF's field.
"$FORGE" export --checkpoint run/checkpoints/step_000002 --hf hf_gpt2
hf_case() {  # NAME PATTERN PYTHON-EDIT-OF-c
  mkdir -p hf_bad
  cp hf_gpt2/model.safetensors hf_bad/
  "$PY" -c "import json; c = json.load(open('hf_gpt2/config.json')); $3; json.dump(c, open('hf_bad/config.json', 'w'))"
  expect_error "$1" "hf_bad/config\.json: field '$2" "$FORGE" eval --checkpoint hf_bad --data data/val.bin
}
hf_case "hf: unknown model_type" "model_type': expected \"gpt2\" or \"llama\", got \"mistral\"" 'c["model_type"] = "mistral"'
hf_case "hf: no model_type" "model_type'.*got none" 'del c["model_type"]'
hf_case "hf: gpt2 untied" "tie_word_embeddings': expected true" 'c["tie_word_embeddings"] = False'
hf_case "hf: llama tied" "tie_word_embeddings': expected false" \
  'c.update(model_type="llama", hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, tie_word_embeddings=True)'
hf_case "hf: llama without hidden_size" "hidden_size' is missing" \
  'c.update(model_type="llama", intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)'

# Shards: truncated, foreign.
head -c 1000 data/train.bin > truncated.bin
make_config trunc.json good.json data.train='"truncated.bin"'
expect_error "truncated shard" "truncated\.bin" "$FORGE" train --config trunc.json
head -c 4097 /dev/urandom > foreign.bin
make_config foreign.json good.json data.train='"foreign.bin"'
expect_error "foreign shard" "foreign\.bin" "$FORGE" train --config foreign.json

# Unwritable output folder (a path below a regular file cannot be created, even by root).
touch afile
make_config unwritable.json good.json out_dir='"afile/run"'
expect_error "unwritable out_dir" "afile/run" "$FORGE" train --config unwritable.json
expect_error "unwritable data prepare" "afile" "$FORGE" data prepare --out afile/data "$SRC/configs/tiny.json"
# Counts that cannot be: refused in one line, not read as "the default".
expect_error "bench: negative threads" "--threads: expected an integer from 0 to 4096, got -1" \
  "$FORGE" bench --config good.json --reference none --threads -1
expect_error "verify: negative threads" "--threads: expected an integer from 0 to 4096, got -2" \
  "$FORGE" verify --gate alignment --profile fast --config good.json --threads -2
expect_error "eval: no batches" "--batches: expected an integer from 1 to 1048576, got 0" \
  "$FORGE" eval --config good.json --batches 0
expect_error "sample: negative threads" "--threads: expected an integer from 0 to 4096, got -3" \
  "$FORGE" sample --config good.json --threads -3
expect_error "bench: steps not a number" "--steps: expected an integer from 5 to 1000, got abc" \
  "$FORGE" bench --config good.json --reference none --steps abc
expect_error "train: zero steps" "--steps: expected an integer above 0, got 0" \
  "$FORGE" train --config good.json --steps 0
expect_error "train: negative stop-after" "--stop-after: expected an integer above 0, got -1" \
  "$FORGE" train --config good.json --stop-after -1
expect_error "train: --dump-level without --dump" "--dump-level requires --dump" \
  "$FORGE" train --config good.json --dump-level 2
expect_error "train: --init with --resume" "--resume excludes --init|--init excludes --resume" \
  "$FORGE" train --config good.json --init x.safetensors --resume run
expect_error "train: unknown --numerics" "--numerics: fp8 not in" \
  "$FORGE" train --config good.json --numerics fp8
expect_error "sample: zero tokens, said plainly" "--tokens: expected an integer above 0, got 0" \
  "$FORGE" sample --checkpoint run --tokens 0
expect_error "sample: NaN temperature" "--temperature: expected a number of at least 0, got nan" \
  "$FORGE" sample --checkpoint run --temperature nan
expect_error "sample: a tokenizer larger than the vocabulary" \
  "--tokenizer gpt2: its 50257 tokens do not fit field 'model\.vocab_size' \(256\)" \
  "$FORGE" sample --checkpoint run --tokenizer gpt2
expect_error "data prepare: val fraction 0" "--val-fraction: expected a share above 0 and at most 0\.5, got 0" \
  "$FORGE" data prepare --out prep0 --val-fraction 0 "$SRC/configs/tiny.json"
make_config noeval.json good.json train.eval_batches=0
expect_error "eval: no validation batches" "noeval\.json: field 'train\.eval_batches' is 0 \(no validation\)" \
  "$FORGE" eval --checkpoint run --config noeval.json
expect_error "tokenize: a folder" "data: cannot open: is a directory" \
  "$FORGE" tokenize --tokenizer bytes data

# A config that gives a field twice (the last would win, silently), or a number no double holds.
printf '{"train": {"lr": 1e-3, "lr": 2e-3}}' > twice.json
expect_error "field given twice" "twice\.json: field 'train\.lr' is given twice" \
  "$FORGE" train --config twice.json
printf '{"train": {"lr": 1e400}}' > huge.json
expect_error "number beyond a double" "huge\.json: unreadable JSON: .*1e400" \
  "$FORGE" train --config huge.json

# Shards the model cannot read, every one refused before training starts and before the run
# folder is made: tokens outside the vocabulary (a headerless file of uint16 ids up to 65535,
# which the embedding would have indexed past its rows), a missing validation shard, a folder.
"$PY" -c "import struct; open('ids.bin', 'wb').write(struct.pack('<5000H', *[(i * 7919) % 65535 for i in range(5000)]))"
make_config outside.json good.json data.train='"ids.bin"' out_dir='"refused"'
expect_error "train tokens outside the vocabulary" \
  "ids\.bin: token 7919 at index 1 is not below field 'model\.vocab_size' \(256\) of outside\.json" \
  "$FORGE" train --config outside.json
make_config outside_val.json good.json data.val='"ids.bin"' out_dir='"refused"'
expect_error "val tokens outside the vocabulary" "ids\.bin: token 7919 at index 1 is not below" \
  "$FORGE" train --config outside_val.json
expect_error "eval: --dump-logits into a missing folder" \
  "--dump-logits: cannot write nodir/l\.safetensors: its folder nodir does not exist" \
  "$FORGE" eval --checkpoint run --dump-logits nodir/l.safetensors
expect_error "eval tokens outside the vocabulary" "ids\.bin: token 7919 at index 1 is not below" \
  "$FORGE" eval --checkpoint run --data ids.bin
make_config noval.json good.json data.val='"nope.bin"' out_dir='"refused"'
expect_error "missing val shard" "noval\.json: field 'data\.val': nope\.bin: cannot open" \
  "$FORGE" train --config noval.json
make_config dirshard.json good.json data.train='"data"' out_dir='"refused"'
expect_error "a folder as the train shard" \
  "dirshard\.json: field 'data\.train': data: expected a token shard file, found a folder" \
  "$FORGE" train --config dirshard.json
expect_error "bad FORGE_CPU_ISA" "FORGE_CPU_ISA: expected avx512, avx2 or generic, got 'foo'" \
  env FORGE_CPU_ISA=foo "$FORGE" train --config good.json --out-dir refused
[ ! -e refused ] || fail "a refused run left its folder behind"
# forge verify refuses what it cannot run before anything runs, and leaves no report folder.
expect_error "verify: a missing shard" "noval\.json: field 'data\.val': nope\.bin: cannot open" \
  "$FORGE" verify --gate alignment --profile fast --config noval.json --source-dir "$SRC" --out vrefused
expect_error "verify: a missing interpreter" "reference interpreter /nonexistent/python not found" \
  "$FORGE" verify --gate alignment --profile fast --config good.json --source-dir "$SRC" \
  --out vrefused --python /nonexistent/python
[ ! -e vrefused ] || fail "a refused verify left its report folder behind"
# data prepare that fails on its input leaves no output folder (nor the parents it made).
printf '{"text": 5}\n' > notext.jsonl
expect_error "data prepare: a bad .jsonl line" "notext\.jsonl:1: field 'text': expected a string" \
  "$FORGE" data prepare --out made/prep notext.jsonl
[ ! -e made ] || fail "a failed data prepare left its output folder behind"
mkdir kept
expect_error "data prepare into a folder that exists" "notext\.jsonl:1" \
  "$FORGE" data prepare --out kept notext.jsonl
[ -d kept ] || fail "a failed data prepare removed a folder it did not make"

printf '{"text": "a", "n": 1e999}\n' > overflow.jsonl
expect_error "data prepare: a number no double holds, in a field not read" \
  "overflow\.jsonl:1: unreadable JSON: .*1e999" "$FORGE" data prepare --out made/prep overflow.jsonl
[ ! -e made ] || fail "a failed data prepare left its output folder behind"

# A mistyped command is named with the choices (CLI11 said only "A subcommand is required").
expect_error "unknown command" "unknown command 'traim' \(expected one of: train, eval" \
  "$FORGE" traim --config good.json
expect_error "unknown data command" "data: unknown command 'prepar' \(expected one of: prepare\)" \
  "$FORGE" data prepar --out x notext.jsonl
# --dump-act-steps means level-2 activations: at level 1 it was accepted and did nothing.
expect_error "--dump-act-steps at level 1" "--dump-act-steps: activations are dumped at level 2 only" \
  "$FORGE" train --config good.json --dump refused --dump-act-steps 1
expect_error "--dump-act-steps not a step" "--dump-act-steps: expected comma-separated step numbers from 1, got '1,2x'" \
  "$FORGE" train --config good.json --dump refused --dump-level 2 --dump-act-steps 1,2x
# The data-parallel switches are checked in a single process too (which ignores them).
expect_error "bad FORGE_DP_SHARDING, one process" "FORGE_DP_SHARDING: expected \"none\" or \"zero1\", got \"bogus\"" \
  env FORGE_DP_SHARDING=bogus "$FORGE" train --config good.json --out-dir refused
expect_error "bad FORGE_DIST_TIMEOUT_S, one process" "FORGE_DIST_TIMEOUT_S: expected a positive number of seconds, got 'abc'" \
  env FORGE_DIST_TIMEOUT_S=abc "$FORGE" train --config good.json --out-dir refused
[ ! -e refused ] || fail "a refused run left its folder behind"

# Values a config must bound: threads (the CLI's --threads stops at 4096; 100000 crashed) and
# n_layer (10^7 exhausted memory before the memory plan could refuse it).
make_config threads.json good.json train.threads=100000 out_dir='"refused"'
expect_error "config: too many threads" "threads\.json: field 'train\.threads': expected an integer from 0 to 4096" \
  "$FORGE" train --config threads.json
make_config layers.json good.json model.n_layer=10000000 out_dir='"refused"'
expect_error "config: too many layers" "layers\.json: field 'model\.n_layer': expected an integer from 1 to 65536" \
  "$FORGE" train --config layers.json
long=$(printf 'd%.0s' $(seq 200))
expect_error "an output folder whose checkpoints' paths are too long" "its checkpoints' paths would be [0-9]+ characters" \
  "$FORGE" train --config good.json --out-dir "refused/$(printf "$long/%.0s" $(seq 21))"
expect_error "--init of a folder" "run: expected a safetensors file, found a folder" \
  "$FORGE" train --config good.json --init run --out-dir refused
make_config heads.json good.json model.n_head=2 out_dir='"refused"'
expect_error "resume with another model" "checkpoint was made for another model: model\.n_head 4 \(now 2\)" \
  "$FORGE" train --config heads.json --resume run
mkdir -p started && echo '{"step": 1, "loss": 5.0}' > started/metrics.jsonl
expect_error "resume of a run with no checkpoint yet" "started: a run folder with no checkpoint yet" \
  "$FORGE" train --config good.json --resume started
[ ! -e refused ] || fail "a refused run left its folder behind"
# Output that cannot be written is an error (it exited 0).
if [ -w /dev/full ]; then
  expect_error "eval into a full disk" "cannot write the output" \
    sh -c '"$0" eval --checkpoint run --json > /dev/full' "$FORGE"
fi
# Heads wider than fast's attention takes (torch-cpu trains them): eval, sample and export work,
# on torch-cpu's kernels.
make_config wide_heads.json good.json model.n_embd=512 model.n_head=1 numerics='"torch-cpu"' out_dir='"wide"'
"$FORGE" train --config wide_heads.json --quiet >/dev/null
"$FORGE" eval --checkpoint wide >/dev/null
"$FORGE" export --checkpoint wide --hf wide_hf >/dev/null
"$FORGE" sample --checkpoint wide --tokens 4 >/dev/null
echo "ok: a model of 512-wide heads evaluates, samples and exports"

# An empty path is refused, not read as "not given" (an unset $OUT wrote into the config's
# out_dir, an empty --resume trained afresh).
expect_error "empty --out-dir" "--out-dir: expected a path, got an empty value" \
  "$FORGE" train --config good.json --out-dir ""
expect_error "empty --resume" "--resume: expected a path, got an empty value" \
  "$FORGE" train --config good.json --resume ""
expect_error "empty --init" "--init: expected a path, got an empty value" \
  "$FORGE" train --config good.json --init ""

# SIGTERM to forge verify alone (kill PID) reaches the command it waits for: the reference
# was left running, orphaned.
make_config verify_long.json good.json train.steps=400 out_dir='"unused"'
"$FORGE" verify --gate long-horizon --profile fast --config verify_long.json --source-dir "$SRC" \
  --out vterm >vterm.log 2>&1 &
vjob=$!
waited=0
until child=$(pgrep -P $vjob); do
  sleep 0.1
  waited=$((waited + 1))
  [ $waited -lt 600 ] || { kill -9 $vjob; fail "verify started no command in 60 s"; }
done
kill -TERM $vjob
set +e
wait $vjob
vrc=$?
set -e
[ $vrc -eq 143 ] || fail "verify ended with $vrc after SIGTERM, expected 143"
sleep 0.5
! kill -0 "$child" 2>/dev/null || { kill -9 "$child"; fail "verify's command $child outlived it"; }
echo "ok: SIGTERM to verify ends the command it waits for (exit 143)"

expect_no_partial_files "$WORK"
echo "ok: no partial files"
