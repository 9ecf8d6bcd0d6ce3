#include "forge/train/dump.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/io/safetensors.h"
#include "forge/train/checkpoint.h"

namespace forge {

DumpWriter::DumpWriter(std::string dir, int level, std::set<int64_t> act_steps)
    : dir_(std::move(dir)), level_(level), act_steps_(std::move(act_steps)) {
  if (level_ < 1 || level_ > 2) fail("--dump-level: expected 1 or 2, got {}", level_);
  if (act_steps_.empty()) act_steps_.insert(1);
  ensure_writable_dir(dir_);
}

void DumpWriter::record(const std::string& name, const float* data,
                        const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  tensors_[name] = Captured{shape, std::vector<float>(data, data + n)};
}

void DumpWriter::capture_grads(const ParamLayout& layout, const float* grads) {
  std::vector<float> scratch;
  for (const auto& p : layout.tensors()) {
    const float* src = to_file_layout(p, grads + p.offset, scratch);
    tensors_["grad." + p.name] = Captured{p.file_shape(), std::vector<float>(src, src + p.numel)};
  }
}

void DumpWriter::finish_step(int64_t step, double loss, double grad_norm, const ParamLayout& layout,
                             const float* params) {
  std::vector<float> scratch;
  for (const auto& p : layout.tensors()) {
    const float* src = to_file_layout(p, params + p.offset, scratch);
    tensors_["param." + p.name] = Captured{p.file_shape(), std::vector<float>(src, src + p.numel)};
  }
  tensors_["loss"] = Captured{{1}, {static_cast<float>(loss)}};
  tensors_["grad_norm"] = Captured{{1}, {static_cast<float>(grad_norm)}};
  SafetensorsWriter w;
  for (const auto& [name, t] : tensors_) w.add_f32(name, t.shape, t.data.data());
  const std::string file = fmt::format("step_{:06d}.safetensors", step);
  w.write(dir_ + "/" + file);
  tensors_.clear();
  steps_written_.push_back(step);

  nlohmann::json index;
  index["format"] = "forge-dump";
  index["version"] = 1;
  index["source"] = "forge";
  index["level"] = level_;
  index["steps"] = steps_written_;
  nlohmann::json files = nlohmann::json::object();
  for (int64_t s : steps_written_)
    files[std::to_string(s)] = fmt::format("step_{:06d}.safetensors", s);
  index["files"] = files;
  write_text_atomic(dir_ + "/index.json", index.dump(2) + "\n");
}

}  // namespace forge
