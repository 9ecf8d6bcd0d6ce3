// The training stream of docs/formats.md: a token cursor that walks the shard in order,
// B*T tokens per micro-batch (plus one for the shifted targets), wrapping to the start.
// Its whole state is the cursor, saved in checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forge/data/shard.h"
#include "forge/io/config.h"

namespace forge {

class DataLoader {
 public:
  // rank/world: data-parallel slice; every rank walks the same cursor.
  DataLoader(const std::string& path, int B, int T, int rank = 0, int world = 1,
             ShardFormat format = ShardFormat::Auto);
  // Fills inputs and targets ([B, T] each) from the cursor, then advances it.
  void next(int32_t* inputs, int32_t* targets);
  uint64_t cursor() const { return pos_; }
  void set_cursor(uint64_t pos);  // throws if out of range
  void reset() { pos_ = 0; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  const ShardReader& shard() const { return *shard_; }

 private:
  std::unique_ptr<ShardReader> shard_;
  int B_, T_, rank_, world_;
  uint64_t pos_ = 0;
  std::vector<int32_t> window_;
};

// The shard a config's field names ("data.train" or "data.val"), opened for its micro-batches
// of train.batch_size x train.seq_len (rank of world ranks) and checked against its
// model.vocab_size (check_shard_vocabulary); a shard that cannot be read is named with the
// config and the field.
DataLoader open_config_shard(const Config& cfg, const std::string& field, int rank = 0,
                             int world = 1);

// Refuses a shard whose tokens a model of vocab_size cannot embed, naming the config whose
// field 'model.vocab_size' it is: one made with a larger vocabulary (its header says so), or
// one holding a token at or above vocab_size (a headerless file, or a header that lies; read
// unchecked, such a token would index past the embedding's rows). Reads the whole shard once.
// field: the config field that gives vocab_size (a Hugging Face config.json's is
// forge_vocab_size or vocab_size).
void check_shard_vocabulary(const ShardReader& shard, int vocab_size,
                            const std::string& config_path,
                            const std::string& field = "model.vocab_size");

}  // namespace forge
