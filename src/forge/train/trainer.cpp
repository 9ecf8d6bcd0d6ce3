#include "forge/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "forge/core/error.h"
#include "forge/core/peak.h"
#include "forge/core/test_bugs.h"
#include "forge/core/threads.h"
#include "forge/io/atomic_file.h"
#include "forge/model/model.h"
#include "forge/numerics/numerics.h"
#include "forge/train/checkpoint.h"
#include "forge/train/data_loader.h"
#include "forge/train/dump.h"
#include "forge/train/evaluate.h"
#include "forge/train/progress.h"
#include "forge/train/schedule.h"

namespace fs = std::filesystem;

namespace forge {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The checked invariants of a resumed run: same model and same batch geometry.
void check_resume_compatible(const Config& cfg, const nlohmann::json& saved,
                             const std::string& dir) {
  Config old = parse_config(saved, dir + "/state.json");
  const ModelConfig &a = cfg.model, &b = old.model;
  if (config_to_json(cfg)["model"] != config_to_json(old)["model"])
    fail("{}: checkpoint was made for another model (n_layer {} vs {}, n_embd {} vs {}, vocab {} "
         "vs {})", dir, b.n_layer, a.n_layer, b.n_embd, a.n_embd, b.vocab_size, a.vocab_size);
  if (cfg.train.batch_size != old.train.batch_size || cfg.train.seq_len != old.train.seq_len ||
      cfg.train.grad_accum_steps != old.train.grad_accum_steps)
    fail("{}: checkpoint was made with another batch (B, T, grad_accum_steps); resuming would "
         "change the data order", dir);
}

}  // namespace

TrainResult run_training(const TrainOptions& opt) {
  Config cfg = load_config(opt.config_path);
  if (!opt.numerics.empty()) cfg.numerics = opt.numerics;
  if (opt.steps >= 0) cfg.train.steps = opt.steps;
  if (!opt.out_dir.empty()) cfg.out_dir = opt.out_dir;
  validate_config(cfg);
  if (cfg.data.train.empty()) fail("{}: field 'data.train': a training shard is required", cfg.path);
  const TrainConfig& tc = cfg.train;
  const int B = tc.batch_size, T = tc.seq_len, accum = tc.grad_accum_steps;

  ensure_writable_dir(cfg.out_dir);
  const int threads = set_thread_count(tc.threads);

  DataLoader train_data(cfg.data.train, B, T);
  if (train_data.shard().vocab_size() > static_cast<uint32_t>(cfg.model.vocab_size))
    fail("{}: field 'model.vocab_size' is {} but {} was made with a vocabulary of {}", cfg.path,
         cfg.model.vocab_size, cfg.data.train, train_data.shard().vocab_size());

  auto numerics = make_numerics(cfg.numerics);
  auto model = make_model(cfg.model, B, T, *numerics);
  const ParamLayout& layout = model->layout();
  const size_t P = layout.total_floats();
  FloatBuffer grads(P), micro_grads(accum > 1 ? P : 0), exp_avg(P), exp_avg_sq(P);
  std::vector<ParamRef> refs;
  for (const auto& p : layout.tensors())
    refs.push_back({model->params() + p.offset, grads.data() + p.offset, exp_avg.data() + p.offset,
                    exp_avg_sq.data() + p.offset, p.numel, p.decay});

  TrainState state;
  state.config = config_to_json(cfg);
  if (!opt.resume.empty()) {
    TrainState saved = load_checkpoint(opt.resume, layout, model->params(), exp_avg.data(),
                                       exp_avg_sq.data());
    check_resume_compatible(cfg, saved.config, opt.resume);
    state.step = saved.step;
    state.data_cursor = saved.data_cursor;
    state.rng = saved.rng;
    state.tokens_seen = saved.tokens_seen;
    train_data.set_cursor(state.data_cursor);
  } else if (!opt.init.empty()) {
    load_params(opt.init, layout, model->params());
  } else {
    model->init_weights(tc.seed);
  }

  std::unique_ptr<DumpWriter> dump;
  if (!opt.dump_dir.empty())
    dump = std::make_unique<DumpWriter>(opt.dump_dir, opt.dump_level < 1 ? 1 : opt.dump_level,
                                        opt.dump_act_steps);

  const Peak peak = measure_peak(threads, 0.1);
  const double flops_per_token = model->train_flops_per_token(T);
  const int64_t last_step = opt.stop_after >= 0 ? std::min<int64_t>(opt.stop_after, tc.steps)
                                                : tc.steps;
  std::FILE* metrics = std::fopen((cfg.out_dir + "/metrics.jsonl").c_str(),
                                  state.step > 0 ? "a" : "w");
  if (!metrics) fail("{}: cannot write metrics.jsonl", cfg.out_dir);
  struct Closer { std::FILE* f; ~Closer() { std::fclose(f); } } closer{metrics};

  if (!opt.quiet)
    fmt::print("forge train: {} ({} parameters), numerics {}, B={} T={} accum={}, {} threads, "
               "peak {:.1f} GFLOP/s fp32\n", cfg.path, layout.numel(), numerics->name(), B, T,
               accum, threads, peak.fp32_flops / 1e9);

  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  std::vector<double> step_tps, step_mfu;
  Progress progress(last_step, state.step, !opt.quiet);
  TrainResult result;
  result.val_loss = std::numeric_limits<double>::quiet_NaN();

  auto write_checkpoint = [&](int64_t step) {
    const std::string dir = fmt::format("{}/checkpoints/step_{:06d}", cfg.out_dir, step);
    state.step = step;
    state.data_cursor = train_data.cursor();
    save_checkpoint(dir, layout, model->params(), exp_avg.data(), exp_avg_sq.data(), state);
    write_text_atomic(cfg.out_dir + "/checkpoints/latest", dir + "\n");
    result.checkpoint = dir;
  };
  auto validate = [&](int64_t step) {
    if (cfg.data.val.empty()) return;
    const double val = evaluate_loss(*model, cfg.data.val, B, T, tc.eval_batches);
    result.val_loss = val;
    progress.message(fmt::format("step {:>6} | val loss {:.4f} | val ppl {:.2f}", step, val,
                                 std::exp(val)));
    fmt::print(metrics, "{}\n", nlohmann::json{{"step", step}, {"val_loss", val}}.dump());
    std::fflush(metrics);
  };

  for (int64_t step = state.step; step < last_step; ++step) {
    const auto t0 = Clock::now();
    const bool record = dump && dump->wants_activations(step + 1);
    double loss_sum = 0;
    for (int m = 0; m < accum; ++m) {
      train_data.next(inputs.data(), targets.data());
      model->set_recorder(record && m == 0 ? dump.get() : nullptr);
      const float loss = model->forward(inputs.data(), targets.data(), B, T);
      loss_sum += loss;
      // d(loss_m / accum): what autograd propagates for the accumulated mean.
      const float dloss = 1.0f / static_cast<float>(accum);
      if (m == 0) {
        model->backward(dloss, grads.data());
      } else {
        model->backward(dloss, micro_grads.data());
        numerics->add_inplace(grads.data(), micro_grads.data(), P);
      }
    }
    model->set_recorder(nullptr);
    const double loss = loss_sum / accum;
    if (!std::isfinite(loss))
      fail("step {}: the loss is {} (diverged); lower train.lr in {}", step + 1, loss, cfg.path);
    if (dump) dump->capture_grads(layout, grads.data());

    OptimizerStep hp;
    hp.lr = learning_rate(tc, static_cast<int>(step));
    hp.beta1 = tc.beta1;
    hp.beta2 = tc.beta2;
    hp.eps = tc.eps;
    hp.weight_decay = tc.weight_decay;
    hp.max_grad_norm = tc.grad_clip;
    hp.step = step + 1;
    if (test_bug_active("adamw-no-bias-correction")) hp.step = int64_t{1} << 40;
    const double grad_norm = numerics->optimizer_step(refs.data(), static_cast<int>(refs.size()), hp);
    if (dump) dump->finish_step(step + 1, loss, grad_norm, layout, model->params());

    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double tokens = static_cast<double>(B) * T * accum;
    state.tokens_seen += tokens;
    const double tps = tokens / secs;
    const double mfu = flops_per_token * tps / peak.fp32_flops;
    if (step > state.step || last_step - state.step == 1) {  // the first step warms caches
      step_tps.push_back(tps);
      step_mfu.push_back(mfu);
    }
    result.last_loss = loss;
    result.steps_done = step + 1;
    fmt::print(metrics, "{}\n",
               nlohmann::json{{"step", step + 1}, {"loss", loss}, {"lr", hp.lr},
                              {"grad_norm", grad_norm}, {"ms", secs * 1e3},
                              {"tokens_per_s", tps}, {"mfu", mfu}}.dump());
    std::fflush(metrics);
    if (!opt.quiet && ((step + 1) % std::max(1, tc.log_interval) == 0 || step == 0))
      progress.message(fmt::format(
          "step {:>6}/{} | loss {:.4f} | lr {:.3e} | norm {:.4f} | {:.1f} ms | {:.0f} tok/s | "
          "MFU {:.1f}%", step + 1, tc.steps, loss, hp.lr, grad_norm, secs * 1e3, tps, 100 * mfu));
    progress.update(step + 1, loss);

    const bool at_end = step + 1 == last_step;
    if (tc.eval_interval > 0 && (step + 1) % tc.eval_interval == 0 && !at_end) validate(step + 1);
    if (tc.checkpoint_interval > 0 && (step + 1) % tc.checkpoint_interval == 0 && !at_end)
      write_checkpoint(step + 1);
  }
  progress.finish();
  if (result.steps_done == 0) result.steps_done = state.step;
  validate(result.steps_done);
  write_checkpoint(result.steps_done);
  result.tokens_per_s = median(step_tps);
  result.mfu = median(step_mfu);
  if (!opt.quiet)
    fmt::print("done: {} steps, last loss {:.4f}, median {:.0f} tok/s, MFU {:.1f}%, checkpoint {}\n",
               result.steps_done, result.last_loss, result.tokens_per_s, 100 * result.mfu,
               result.checkpoint);
  return result;
}

}  // namespace forge
