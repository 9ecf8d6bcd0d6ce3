#include <unistd.h>

#include "forge/cli/commands.h"
#include "forge/cli/validators.h"
#include "forge/data/prepare.h"

namespace forge::cli {

void register_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "data preparation");
  data->require_subcommand(1);
  auto o = std::make_shared<PrepareOptions>();
  auto* prep =
      data->add_subcommand("prepare", "text (.txt, .jsonl, folders) -> train/val token shards");
  prep->add_option("--tokenizer", o->tokenizer, "bytes | gpt2");
  prep->add_option("--vocab-dir", o->tokenizer_options.vocab_dir,
                   "folder with encoder.json and vocab.bpe (gpt2)");
  prep->add_option("--out", o->out_dir, "output folder for train.bin and val.bin")->required();
  prep->add_option("--val-fraction", o->val_fraction,
                   "share of documents for validation, above 0 and at most 0.5: every k-th "
                   "document, k = round(1 / share) (default 0.1)")
      ->check(share_up_to(0.5));
  prep->add_option("--text-field", o->text_field, "field of .jsonl lines that holds the text");
  prep->add_option("inputs", o->inputs, "files or folders")->required();
  prep->callback([o] { prepare_data(*o); });
}

}  // namespace forge::cli
