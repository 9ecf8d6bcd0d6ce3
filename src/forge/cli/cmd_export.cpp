#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "forge/cli/commands.h"
#include "forge/cli/validators.h"
#include "forge/core/error.h"
#include "forge/data/tokenizer.h"
#include "forge/io/atomic_file.h"
#include "forge/io/hf_config.h"
#include "forge/train/checkpoint.h"
#include "forge/train/loaded_model.h"

namespace forge::cli {

void register_export(CLI::App& app) {
  struct Opts {
    std::string checkpoint, config, hf_dir, tokenizer, vocab_dir;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("export", "write a checkpoint in another framework's format");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, or a run's OUT/checkpoints/latest or OUT")
      ->check(non_empty_path())
      ->required();
  cmd->add_option("--config", o->config, "config JSON (default: the checkpoint's own)")
      ->check(non_empty_path());
  cmd->add_option("--hf", o->hf_dir, "folder for transformers' from_pretrained")->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "bytes | gpt2, whose end-of-text token the config names as bos and eos "
                  "(default: from the vocabulary size)");
  cmd->add_option("--vocab-dir", o->vocab_dir, "folder with encoder.json and vocab.bpe (gpt2)")
      ->check(non_empty_path());
  cmd->callback([o] {
    if (o->hf_dir.empty()) fail("--hf: expected the folder to write, got an empty path");
    LoadedModel lm = load_trained_model(o->checkpoint, o->config, 1, 1);
    const auto tok = tokenizer_for_model(o->tokenizer, lm.config.model.vocab_size, lm.config.path,
                                         TokenizerOptions{o->vocab_dir});
    // Before the folder is made, so an unexportable family leaves nothing behind.
    const nlohmann::json hf = hf_config_json(lm.config.model, tok->eot_token());
    const OutputFolder out(o->hf_dir);  // removed again, if it was made, when writing fails
    save_params(o->hf_dir + "/model.safetensors", lm.model->layout(), lm.model->params());
    write_text_atomic(o->hf_dir + "/config.json", hf.dump(2) + "\n");
    fmt::print("exported {} -> {}/config.json, {}/model.safetensors\n", o->checkpoint, o->hf_dir,
               o->hf_dir);
  });
}

}  // namespace forge::cli
