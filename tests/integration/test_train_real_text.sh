# Training gpt2 on the real corpus lowers the validation loss well below ln(256) = 5.545;
# eval and sample work on the checkpoint (train_real_text in lib.sh, shared with llama).
source "$(dirname "$0")/lib.sh"
prepare_corpus
train_real_text tiny "$SRC/configs/tiny.json"
