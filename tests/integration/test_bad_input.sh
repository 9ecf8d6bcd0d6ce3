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

# A checkpoint of another shape.
"$FORGE" train --config good.json --quiet
make_config wider.json good.json model.n_embd=96
expect_error "checkpoint of the wrong shape" "step_000002" \
  "$FORGE" train --config wider.json --resume run/checkpoints/step_000002
expect_error "eval of the wrong shape" "model\.safetensors.*transformer\.wte\.weight" \
  "$FORGE" eval --checkpoint run/checkpoints/step_000002/model.safetensors --config wider.json

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

expect_no_partial_files "$WORK"
echo "ok: no partial files"
