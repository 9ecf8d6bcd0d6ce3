#include "forge/train/data_loader.h"

#include "forge/core/error.h"

namespace forge {

DataLoader::DataLoader(const std::string& path, int B, int T, int rank, int world,
                       ShardFormat format)
    : shard_(std::make_unique<ShardReader>(path, format)),
      B_(B),
      T_(T),
      rank_(rank),
      world_(world) {
  const uint64_t need = static_cast<uint64_t>(world) * B * T + 1;
  if (shard_->size() < need)
    fail(
        "{}: the shard holds {} tokens, fewer than one global batch needs ({} = {} ranks x B={} "
        "x T={} + 1)",
        path, shard_->size(), need, world, B, T);
  window_.resize(static_cast<size_t>(B) * T + 1);
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  const size_t n = static_cast<size_t>(B_) * T_;
  shard_->read(pos_ + static_cast<uint64_t>(rank_) * n, n + 1, window_.data());
  for (size_t i = 0; i < n; ++i) {
    inputs[i] = window_[i];
    targets[i] = window_[i + 1];
  }
  const uint64_t step = static_cast<uint64_t>(world_) * n;
  pos_ += step;
  if (pos_ + step + 1 > shard_->size()) pos_ = 0;
}

void DataLoader::set_cursor(uint64_t pos) {
  const uint64_t step = static_cast<uint64_t>(world_) * B_ * T_;
  if (pos + step + 1 > shard_->size())
    fail(
        "{}: data cursor {} is beyond the shard's {} tokens (was the checkpoint made with "
        "another shard?)",
        shard_->path(), pos, shard_->size());
  pos_ = pos;
}

DataLoader open_config_shard(const Config& cfg, const std::string& field, int rank, int world) {
  FORGE_CHECK(field == "data.train" || field == "data.val", "open_config_shard: no field {}",
              field);
  const std::string& path = field == "data.train" ? cfg.data.train : cfg.data.val;
  auto loader = [&] {
    try {
      return DataLoader(path, cfg.train.batch_size, cfg.train.seq_len, rank, world);
    } catch (const Error& e) {
      fail("{}: field '{}': {}", cfg.path, field, e.what());
    }
  }();
  check_shard_vocabulary(loader.shard(), cfg.model.vocab_size, cfg.path);
  return loader;
}

void check_shard_vocabulary(const ShardReader& shard, int vocab_size,
                            const std::string& config_path, const std::string& field) {
  if (shard.vocab_size() > static_cast<uint32_t>(vocab_size))
    fail("{}: field '{}' is {} but {} was made with a vocabulary of {}", config_path, field,
         vocab_size, shard.path(), shard.vocab_size());
  const size_t i = shard.first_token_at_or_above(static_cast<uint32_t>(vocab_size));
  if (i < shard.size())
    fail("{}: token {} at index {} is not below field '{}' ({}) of {}", shard.path(), shard[i], i,
         field, vocab_size, config_path);
}

}  // namespace forge
