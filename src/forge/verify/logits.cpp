#include "forge/verify/logits.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "forge/core/error.h"
#include "forge/io/safetensors.h"
#include "forge/train/data_loader.h"

namespace forge::verify {

double dump_logits(Model& model, DataLoader& data, int batches, const std::string& out_path) {
  if (batches <= 0) fail("--batches: expected a positive number of micro-batches, got {}", batches);
  const int B = data.batch(), T = data.seq_len();
  const int64_t V = model.config().vocab_rows();
  const size_t BT = static_cast<size_t>(B) * T;
  // The batches evaluate_loss reads, in its order (wrapping past the shard's end), so that the
  // two report the same mean.
  data.reset();
  std::vector<int32_t> tokens(batches * BT), targets(batches * BT);
  std::vector<float> logits(batches * BT * V), losses(batches);
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    data.next(tokens.data() + b * BT, targets.data() + b * BT);
    losses[b] = model.forward(tokens.data() + b * BT, targets.data() + b * BT, B, T);
    sum += losses[b];
    const float* l = model.logits();
    std::copy(l, l + BT * V, logits.begin() + static_cast<std::ptrdiff_t>(b * BT * V));
  }
  SafetensorsWriter w;
  w.add("tokens", DType::I32, {batches, B, T}, tokens.data());
  w.add("targets", DType::I32, {batches, B, T}, targets.data());
  w.add_f32("logits", {batches, B, T, V}, logits.data());
  w.add_f32("loss", {batches}, losses.data());
  w.set_metadata("format", "forge-logits");
  w.set_metadata("shard", data.shard().path());
  w.write(out_path);
  return sum / batches;
}

}  // namespace forge::verify
