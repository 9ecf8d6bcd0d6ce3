# The `bf16` profile's resume gate (BITWISE against itself, the bf16 attention's threads
# included) and its long-run gates against the PyTorch 2.13 reference (EQUIVALENCE.md):
# long-horizon CONVERGENT (against fp32 PyTorch) and perf SURPASS (against PyTorch under CPU
# bf16 autocast, same run), on configs/ci-long.json: ci.json at B=8 and lr 1e-3. At ci.json's
# B=4, lr 3e-3 the loss curve is chaotic: any bf16-sized perturbation moves it by 0.01% to 7%
# depending on the seed (the bf16 engine against the fp32 engine, six seeds measured),
# so there the gate would test the seed, not the arithmetic. The alignment and multistep
# gates of bf16 on GPT-2 stay in tests/pending (zero-initialised biases flip sign at step 1);
# Llama has no biases, and llama-tiny's alignment and multistep reach TOLERANCE here.
source "$(dirname "$0")/lib.sh"
prepare_corpus
make_config cfg.json "$SRC/configs/ci-long.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"'

# The Llama long run at ci-long's batch and learning rate, for the same reason.
make_config llama.json "$SRC/configs/llama-tiny.json" data.train='"data/train.bin"' \
  data.val='"data/val.bin"' train.batch_size=8 train.lr=1e-3 train.min_lr=1e-4

verify_gate resume bf16 cfg.json BITWISE
verify_gate long-horizon bf16 cfg.json CONVERGENT
verify_gate perf bf16 cfg.json SURPASS
verify_gate alignment bf16 llama.json TOLERANCE
verify_gate multistep bf16 llama.json TOLERANCE
verify_gate resume bf16 llama.json BITWISE
verify_gate perf bf16 llama.json SURPASS
