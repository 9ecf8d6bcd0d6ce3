#include "forge/train/checkpoint.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/io/safetensors.h"

namespace fs = std::filesystem;

namespace forge {

namespace {

constexpr int kStateVersion = 1;

// Copies of the tensors in file layout; transposed ones need their own storage.
struct FileView {
  std::vector<std::vector<float>> storage;
  void add_to(SafetensorsWriter& w, const ParamLayout& layout, const float* base,
              const std::string& prefix) {
    storage.reserve(layout.tensors().size());
    for (const auto& p : layout.tensors()) {
      storage.emplace_back();
      w.add_f32(prefix + p.name, p.file_shape(),
                to_file_layout(p, base + p.offset, storage.back()));
    }
  }
};

void read_into(const SafetensorsFile& f, const ParamLayout& layout, float* base,
               const std::string& prefix) {
  std::vector<float> tmp;
  for (const auto& p : layout.tensors()) {
    const std::string name = prefix + p.name;
    if (!f.contains(name))
      fail("{}: tensor '{}' is missing (is this a checkpoint of this model?)", f.path(), name);
    float* dst = base + p.offset;
    if (!p.file_transposed) {
      f.read_f32(name, p.file_shape(), dst);
    } else {
      tmp.resize(p.numel);
      f.read_f32(name, p.file_shape(), tmp.data());
      const int64_t rows = p.shape[0], cols = p.shape[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = tmp[c * rows + r];
    }
    // Training stops on a non-finite loss before it writes a checkpoint: a NaN or an infinity
    // here is a damaged file, which resumed would read as a diverged run.
    for (size_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(dst[i]))
        fail("{}: tensor '{}' holds {} at element {}: a damaged file", f.path(), name, dst[i], i);
  }
}

}  // namespace

const float* to_file_layout(const ParamSpec& p, const float* src, std::vector<float>& scratch) {
  if (!p.file_transposed) return src;
  const int64_t rows = p.shape[0], cols = p.shape[1];
  scratch.resize(p.numel);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) scratch[c * rows + r] = src[r * cols + c];
  return scratch.data();
}

void save_params(const std::string& path, const ParamLayout& layout, const float* params,
                 const std::string& prefix, const std::string& format_note) {
  SafetensorsWriter w;
  FileView view;
  view.add_to(w, layout, params, prefix);
  w.set_metadata("format", format_note);
  w.write(path);
}

namespace {

// The block index in a tensor name ("transformer.h.3.attn..." or "model.layers.3.mlp..."), or -1.
int block_of(const std::string& name) {
  for (const char* key : {".h.", ".layers."}) {
    const size_t at = name.find(key);
    if (at == std::string::npos) continue;
    const size_t from = at + std::strlen(key);
    const size_t to = name.find('.', from);
    const std::string digits = name.substr(from, to == std::string::npos ? to : to - from);
    if (!digits.empty() && digits.size() <= 6 &&
        digits.find_first_not_of("0123456789") == std::string::npos)
      return std::stoi(digits);
  }
  return -1;
}

}  // namespace

void load_params(const std::string& path, const ParamLayout& layout, float* params,
                 const std::string& prefix) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    fail("{}: expected a safetensors file, found a folder (a checkpoint's is {}/model.safetensors)",
         path, path);
  SafetensorsFile f(path);
  read_into(f, layout, params, prefix);
  // Every tensor the layout names was found with its shape; a file of more blocks than the
  // model's (a config whose n_layer was changed beside its weights) would still pass that, and
  // its last blocks be dropped without a word.
  int blocks = 0;
  for (const auto& p : layout.tensors()) blocks = std::max(blocks, block_of(p.name) + 1);
  for (const std::string& name : f.names())
    if (const int b = block_of(name); b >= blocks)
      fail(
          "{}: tensor '{}' belongs to block {}, but the model has {} blocks (model.n_layer): is "
          "this a checkpoint of this model?",
          path, name, b, blocks);
  // Any other tensor is a part the model does not have (a Llama projection's bias, an untied
  // GPT-2 head): loaded without it, the model would compute something else without a word.
  // Left aside: the buffers transformers saves beside the weights (GPT-2's causal mask, the
  // rotary frequencies), and a tied GPT-2 head equal to the embedding it is tied to.
  std::set<std::string> known;
  for (const auto& p : layout.tensors()) known.insert(prefix + p.name);
  const std::string wte = prefix + "transformer.wte.weight";
  for (const std::string& name : f.names()) {
    if (known.count(name) || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
        name.ends_with(".rotary_emb.inv_freq"))
      continue;
    if (name == prefix + "lm_head.weight" && known.count(wte)) {
      const TensorInfo &head = f.info(name), &emb = f.info(wte);
      if (head.dtype == emb.dtype && head.shape == emb.shape &&
          std::memcmp(f.data(name), f.data(wte), head.nbytes) == 0)
        continue;
      fail("{}: tensor '{}' differs from '{}': forge's GPT-2 ties its head to the embedding", path,
           name, wte);
    }
    fail("{}: tensor '{}' is not part of this model: forge implements no such tensor", path, name);
  }
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  fs::path latest;
  if (fs::is_regular_file(p, ec) && p.filename() == "latest")
    latest = p;
  else if (fs::is_directory(p, ec) && !fs::exists(p / "state.json", ec)) {
    if (fs::is_regular_file(p / "latest", ec))
      latest = p / "latest";
    else if (fs::is_regular_file(p / "checkpoints" / "latest", ec))
      latest = p / "checkpoints" / "latest";
  }
  if (latest.empty()) return path;
  std::string named = read_text_file(latest.string());
  while (!named.empty() && (named.back() == '\n' || named.back() == '\r' || named.back() == '/'))
    named.pop_back();
  const fs::path dir = latest.parent_path() / fs::path(named).filename();
  if (named.empty() || !fs::exists(dir / "state.json", ec))
    fail(
        "{}: expected the name of a checkpoint directory beside it, found '{}' ({} holds no "
        "state.json)",
        latest.string(), named, dir.string());
  return dir.string();
}

std::string model_file_of(const std::string& path) {
  if (fs::is_directory(path)) return (fs::path(path) / "model.safetensors").string();
  return path;
}

void save_checkpoint(const std::string& dir, const ParamLayout& layout, const float* params,
                     const float* exp_avg, const float* exp_avg_sq, const TrainState& state) {
  const fs::path final_dir(dir);
  const fs::path tmp_dir = final_dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  ensure_writable_dir(tmp_dir.string());
  try {
    save_params((tmp_dir / "model.safetensors").string(), layout, params);
    SafetensorsWriter w;
    FileView m, v;
    m.add_to(w, layout, exp_avg, "exp_avg.");
    v.add_to(w, layout, exp_avg_sq, "exp_avg_sq.");
    w.write((tmp_dir / "optimizer.safetensors").string());
    nlohmann::json j;
    j["format"] = "forge-checkpoint";
    j["version"] = kStateVersion;
    j["step"] = state.step;
    j["data_cursor"] = state.data_cursor;
    j["rng"] = state.rng;
    j["tokens_seen"] = state.tokens_seen;
    j["config"] = state.config;
    j["world_size"] = state.world_size;  // DP: optimizer state is always stored whole
    j["data_fingerprints"] = {{"train", state.train_fingerprint}, {"val", state.val_fingerprint}};
    write_text_atomic((tmp_dir / "state.json").string(), j.dump(2) + "\n");
    fs::remove_all(final_dir, ec);
    fs::rename(tmp_dir, final_dir);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
}

namespace {

// "<name>.tmp.<pid>" of a process that no longer runs: what write_file_atomic leaves when its
// writer is killed between linking the finished file under that name and renaming it over
// the target (Linux cannot link an unnamed file over an existing one, so `latest` has that
// window). Its target was never replaced.
bool stale_atomic_temporary(const fs::path& p) {
  const std::string name = p.filename().string();
  const auto at = name.rfind(".tmp.");
  if (at == std::string::npos) return false;
  const std::string pid = name.substr(at + 5);
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
    return false;
  return ::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH;
}

}  // namespace

void remove_partial_checkpoints(const std::string& out_dir) {
  const fs::path dir = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> partial;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec) && e.path().extension() == ".tmp") partial.push_back(e.path());
    if (e.is_regular_file(ec) && stale_atomic_temporary(e.path())) partial.push_back(e.path());
  }
  for (const auto& p : partial) fs::remove_all(p, ec);
}

EarlierRun earlier_run_in(const std::string& out_dir) {
  EarlierRun run;
  std::error_code ec;
  run.metrics = fs::exists(fs::path(out_dir) / "metrics.jsonl", ec);
  const fs::path dir = fs::path(out_dir) / "checkpoints";
  // Only what a run writes counts: step_ and digits, holding a state.json. A user's own folder
  // there (step_notes, a step_000010_backup copy) is neither listed nor removed.
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      const bool step_name = name.size() > 5 && name.rfind("step_", 0) == 0 &&
                             name.find_first_not_of("0123456789", 5) == std::string::npos;
      if (step_name && e.is_directory(ec) && fs::exists(e.path() / "state.json", ec))
        run.checkpoints.push_back(name);
    }
  std::sort(run.checkpoints.begin(), run.checkpoints.end());
  return run;
}

std::string EarlierRun::describe() const {
  std::string what;
  if (checkpoints.size() == 1) what = "checkpoint " + checkpoints.front();
  if (checkpoints.size() > 1)
    what = fmt::format("{} checkpoints, {} to {}", checkpoints.size(), checkpoints.front(),
                       checkpoints.back());
  if (metrics) what += what.empty() ? "metrics.jsonl" : " and metrics.jsonl";
  return what;
}

void remove_earlier_run(const std::string& out_dir, const EarlierRun& run) {
  const fs::path dir = fs::path(out_dir) / "checkpoints";
  for (const std::string& name : run.checkpoints) fs::remove_all(dir / name);
  std::error_code ec;
  fs::remove(dir / "latest", ec);
  fs::remove(fs::path(out_dir) / "metrics.jsonl", ec);
}

std::string run_folder_of(const std::string& checkpoint_path) {
  const fs::path dir = fs::path(resolve_checkpoint(checkpoint_path)).lexically_normal();
  const fs::path parent = (dir.has_filename() ? dir : dir.parent_path()).parent_path();
  if (parent.filename() != "checkpoints") return "";
  const fs::path run = parent.parent_path();
  return run.empty() ? "." : run.string();
}

TrainState read_checkpoint_state(const std::string& path) {
  const std::string dir = resolve_checkpoint(path);
  const fs::path d(dir);
  if (!fs::is_directory(d)) fail("{}: not a checkpoint directory", dir);
  const std::string state_path = (d / "state.json").string();
  std::error_code ec;
  if (!fs::exists(state_path, ec)) {
    // A run folder killed before its first checkpoint: say so, rather than "no state.json".
    if (fs::exists(d / "metrics.jsonl", ec) || fs::is_directory(d / "checkpoints", ec))
      fail("{}: a run folder with no checkpoint yet (no checkpoints/latest)", dir);
    fail("{}: not a checkpoint (no state.json) nor a run folder", dir);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(state_path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", state_path, e.what());
  }
  if (j.value("format", "") != "forge-checkpoint")
    fail("{}: field 'format': expected \"forge-checkpoint\"", state_path);
  if (j.value("version", -1) != kStateVersion)
    fail("{}: field 'version': expected {}, got {}", state_path, kStateVersion,
         j.value("version", -1));
  TrainState s;
  try {
    s.step = j.at("step").get<int64_t>();
    s.data_cursor = j.at("data_cursor").get<uint64_t>();
    s.rng = j.at("rng").get<std::array<uint64_t, 4>>();
    s.tokens_seen = j.at("tokens_seen").get<double>();
    s.config = j.at("config");
    s.world_size = j.value("world_size", 1);
    if (const auto f = j.find("data_fingerprints"); f != j.end()) {
      s.train_fingerprint = f->value("train", "");
      s.val_fingerprint = f->value("val", "");
    }
    if (s.world_size < 1) fail("{}: field 'world_size': expected a positive integer", state_path);
    if (s.step < 0)
      fail("{}: field 'step': expected a non-negative integer, got {}", state_path, s.step);
    if (!(s.tokens_seen >= 0) || !std::isfinite(s.tokens_seen))
      fail("{}: field 'tokens_seen': expected a non-negative number, got {}", state_path,
           s.tokens_seen);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", state_path, e.what());
  }
  return s;
}

void load_checkpoint_tensors(const std::string& path, const ParamLayout& layout, float* params,
                             float* exp_avg, float* exp_avg_sq) {
  const fs::path d(resolve_checkpoint(path));
  load_params((d / "model.safetensors").string(), layout, params);
  if (exp_avg && exp_avg_sq) {
    SafetensorsFile f((d / "optimizer.safetensors").string());
    read_into(f, layout, exp_avg, "exp_avg.");
    read_into(f, layout, exp_avg_sq, "exp_avg_sq.");
  }
}

}  // namespace forge
