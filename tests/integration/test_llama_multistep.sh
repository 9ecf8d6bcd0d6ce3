# The multistep gate for llama, `fast` profile: 8 optimizer steps side by side with the
# PyTorch reference, level 1 at every step (loss, grad norm, every gradient and updated
# parameter) and level 2 (every module) at steps 1 and 8, each tensor within TOLERANCE
# (llama_gate in lib.sh, shared with the alignment gate).
source "$(dirname "$0")/lib.sh"
llama_gate multistep 8 --dump-act-steps 1,8
