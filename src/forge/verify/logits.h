// The logits a model gives on the validation data order, written for another framework to
// check (tests/tools/hf_interop.py compares them with transformers' GPT2LMHeadModel).
#pragma once

#include <string>

#include "forge/model/model.h"

namespace forge::verify {

// Runs `batches` micro-batches of B x T tokens read from the start of shard_path (the
// validation order of docs/formats.md) and writes out_path (safetensors, atomically):
// "tokens" I32 [batches, B, T], "targets" I32 [batches, B, T], "logits" F32
// [batches, B, T, Vp], "loss" F32 [batches] (each micro-batch's mean loss). Returns the mean
// of the losses (what evaluate_loss reports). The model must be planned for B x T.
double dump_logits(Model& model, const std::string& shard_path, int B, int T, int batches,
                   const std::string& out_path);

}  // namespace forge::verify
