// The logits a model gives on the validation data order, written for another framework to
// check (tests/tools/hf_interop.py compares them with transformers' GPT2LMHeadModel).
#pragma once

#include <string>

#include "forge/model/model.h"
#include "forge/train/data_loader.h"

namespace forge::verify {

// Runs `batches` micro-batches read from the start of `data` (the validation order of
// docs/formats.md, whatever its cursor was) and writes out_path (safetensors, atomically):
// "tokens" I32 [batches, B, T], "targets" I32 [batches, B, T], "logits" F32
// [batches, B, T, Vp], "loss" F32 [batches] (each micro-batch's mean loss). Returns the mean
// of the losses (what evaluate_loss reports). The model must be planned for data's B x T.
double dump_logits(Model& model, DataLoader& data, int batches, const std::string& out_path);

}  // namespace forge::verify
