#include "forge/train/trainer.h"

#include <fmt/format.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "forge/core/error.h"
#include "forge/core/peak.h"
#include "forge/core/stop_signals.h"
#include "forge/core/test_bugs.h"
#include "forge/core/threads.h"
#include "forge/dist/communicator.h"
#include "forge/dist/data_parallel.h"
#include "forge/io/atomic_file.h"
#include "forge/io/folder_lock.h"
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

// The fields of a config section whose values differ between two configs' JSON, a and b:
// "section.key A (word B)" for each, skipping `skip` and values `same` calls equal.
template <typename Same>
std::vector<std::string> differing_fields(const nlohmann::json& a, const nlohmann::json& b,
                                          const std::string& section, const char* word,
                                          const std::set<std::string>& skip, Same same) {
  std::vector<std::string> out;
  for (auto& [key, value] : a[section].items()) {
    const nlohmann::json other = b[section].value(key, nlohmann::json());
    if (!skip.count(key) && !same(value, other))
      out.push_back(
          fmt::format("{}.{} {} ({} {})", section, key, value.dump(), word, other.dump()));
  }
  return out;
}

// A resumed run against its checkpoint's state (`saved`, the state.json of checkpoint dir): the
// checked invariants (same model, same batch geometry) refused in one line; returns the note on
// what it trains differently (empty if nothing), its shards' contents included (`current`: this
// run's state, which holds its shards' fingerprints). DP: the global batch is B x T x
// grad_accum_steps x ranks, so a checkpoint of W ranks with A accumulation steps resumes on W'
// ranks with A' steps when A*W == A'*W' (the data order is the same; docs/formats.md).
std::string check_resume(const Config& cfg, const TrainState& saved, const TrainState& current,
                         const std::string& dir, int world) {
  const Config old = parse_config(saved.config, dir + "/state.json");
  const int saved_world = saved.world_size;
  const nlohmann::json now = config_to_json(cfg), then = config_to_json(old);
  const auto equal = [](const nlohmann::json& a, const nlohmann::json& b) { return a == b; };
  if (now["model"] != then["model"])
    fail("{}: checkpoint was made for another model: {}", dir,
         fmt::join(differing_fields(then, now, "model", "now", {}, equal), ", "));
  if (cfg.train.batch_size != old.train.batch_size || cfg.train.seq_len != old.train.seq_len ||
      cfg.train.grad_accum_steps * world != old.train.grad_accum_steps * saved_world)
    fail(
        "{}: checkpoint was made with another batch (B={}, T={}, grad_accum_steps {} x {} "
        "ranks; now B={}, T={}, {} x {} ranks); resuming would change the data order",
        dir, old.train.batch_size, old.train.seq_len, old.train.grad_accum_steps, saved_world,
        cfg.train.batch_size, cfg.train.seq_len, cfg.train.grad_accum_steps, world);

  // What it trains differently from its checkpoint's run (the schedule, AdamW's settings, the
  // data) is allowed, as a way to change course, but then the run is not the one an
  // uninterrupted run would have made, so it is said. Settings that change no bit are left out
  // (grad_accum_steps x ranks is checked equal above: the same data order, the same sums), and
  // a shard named another way (relative, absolute) is the same shard.
  static const std::set<std::string> no_bits = {
      "threads",      "log_interval",        "eval_interval",
      "eval_batches", "checkpoint_interval", "grad_accum_steps"};
  const auto same_file = [](const nlohmann::json& a, const nlohmann::json& b) {
    std::error_code ec;
    return a == b || (a.is_string() && b.is_string() &&
                      fs::equivalent(a.get<std::string>(), b.get<std::string>(), ec));
  };
  std::vector<std::string> changes = differing_fields(now, then, "train", "was", no_bits, equal);
  for (std::string& c : differing_fields(now, then, "data", "was", {}, same_file))
    changes.push_back(std::move(c));
  // A shard prepared again at the same path holds other tokens: the same setting, other data.
  const auto contents = [&](const char* field, const std::string& was, const std::string& is) {
    if (!was.empty() && !is.empty() && was != is &&
        same_file(now["data"][field], then["data"][field]))
      changes.push_back(
          fmt::format("data.{}'s contents (its tokens' fingerprint {}, was {})", field, is, was));
  };
  contents("train", saved.train_fingerprint, current.train_fingerprint);
  contents("val", saved.val_fingerprint, current.val_fingerprint);
  if (changes.empty()) return "";
  return fmt::format(
      "note: resuming with {} than the checkpoint's run: {}; the steps from here are not those "
      "that run would have taken",
      changes.size() == 1 ? "a setting other" : "settings other", fmt::join(changes, ", "));
}

// A resumed run appends to metrics.jsonl from its checkpoint's step on. The records of later
// steps (a run that went on past that checkpoint before it stopped) and a line cut short by a
// killed writer are dropped first, so that no step appears twice and every line parses.
void drop_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    if (const auto s = j.find("step"); s != j.end() && s->is_number() && s->get<int64_t>() > step)
      continue;
    kept += line + "\n";
  }
  write_text_atomic(path, kept);
}

}  // namespace

TrainResult run_training(const TrainOptions& opt) {
  Config cfg = load_config(opt.config_path);
  // The checkpoint's state.json, read once: its numerics, then its step, cursor and rng.
  const std::optional<TrainState> saved =
      opt.resume.empty() ? std::nullopt : std::optional(read_checkpoint_state(opt.resume));
  // The run folder OUT the checkpoint sits in (OUT/checkpoints/step_N), or empty.
  const std::string saved_folder = saved ? run_folder_of(opt.resume) : "";
  if (!opt.numerics.empty()) {
    cfg.numerics = opt.numerics;
  } else if (saved) {
    // A resumed run goes on in the numerics its checkpoint was trained with (bit for bit),
    // whatever the config file says, unless --numerics chooses.
    if (const auto n = saved->config.find("numerics"); n != saved->config.end() && n->is_string())
      cfg.numerics = n->get<std::string>();
  }
  if (opt.steps >= 0) cfg.train.steps = opt.steps;
  // A resumed run goes on in the run folder its checkpoint sits in (writing into the config's
  // out_dir, another run's folder, overwrote that run's checkpoints), unless --out-dir says.
  if (!opt.out_dir.empty()) {
    cfg.out_dir = opt.out_dir;
  } else if (!saved_folder.empty()) {
    cfg.out_dir = saved_folder;
  }
  validate_config(cfg);
  if (cfg.data.train.empty())
    fail("{}: field 'data.train': a training shard is required", cfg.path);
  const TrainConfig& tc = cfg.train;
  const int B = tc.batch_size, T = tc.seq_len, accum = tc.grad_accum_steps;

  // DP: one rank per process under mpirun (a single-process communicator otherwise). Rank 0
  // alone logs and writes metrics, dumps and checkpoints; every rank computes the same
  // validation loss. A rank that fails marks the run failed so that the launcher ends the
  // others instead of them waiting on it.
  // The data-parallel switches are checked in a single process too, which ignores them: a
  // value outside their lists is refused wherever it is given.
  const auto sharding_asked = dist::choose_sharding(opt.dp_sharding);
  dist::dist_timeout_seconds();
  auto comm = dist::make_communicator();
  const int rank = comm->rank(), world = comm->world();
  const bool lead = rank == 0;
  // SIGINT / SIGTERM (Ctrl-C, a scheduler's stop), from start-up on: the step in progress
  // finishes and a checkpoint is written before the run ends; a second signal ends it at once.
  // Data parallel keeps the default (each rank would stop at its own step, and the checkpoint
  // is collective).
  StopSignals stop(world == 1);
  if (test_bug_active("pause-at-start-up")) std::this_thread::sleep_for(std::chrono::seconds(3));
  struct FailGuard {
    dist::Communicator& c;
    ~FailGuard() {
      if (std::uncaught_exceptions() > 0) c.mark_failed();
    }
  } fail_guard{*comm};
  const auto sharding = world > 1 ? sharding_asked : dist::OptimizerSharding::Replicated;
  const bool zero1 = sharding == dist::OptimizerSharding::Zero1;
  if (zero1 && !opt.dump_dir.empty())
    fail(
        "--dump: with ZeRO-1 sharding no rank holds the full gradients; dump a "
        "replicated run instead");

  if (world > 1) {
    // DP: every rank must train the same config the same way. A rank started with another
    // config trained silently, and another FORGE_DP_SHARDING deadlocked on the first
    // collective that the two shardings call differently; each rank's settings are compared
    // with rank 0's first.
    const std::string settings =
        fmt::format("{} sharding={} resume={} init={}", config_to_json(cfg).dump(),
                    zero1 ? "zero1" : "none", opt.resume, opt.init);
    const uint64_t mine = std::hash<std::string>{}(settings);
    std::vector<uint64_t> all(world);
    comm->all_gather_bytes(&mine, all.data(), sizeof(mine));
    for (int k = 1; k < world; ++k)
      if (all[k] != all[0])
        fail(
            "data parallel: rank {} was started with another config, numerics, resume or "
            "FORGE_DP_SHARDING than rank 0; every rank must run the same",
            k);
  }
  const int threads = set_thread_count(tc.threads);

  // Both shards are opened and checked before the first step, so that no run trains for hours
  // and then fails on its validation shard with nothing saved.
  DataLoader train_data = open_config_shard(cfg, "data.train", rank, world);
  const bool validates = !cfg.data.val.empty() && tc.eval_batches > 0;
  // Kept open for the whole run: reopened at each evaluation, a shard replaced meanwhile was
  // read without the checks above (tokens past the vocabulary read past the embedding).
  std::optional<DataLoader> val_data;
  if (validates) val_data.emplace(open_config_shard(cfg, "data.val"));

  auto numerics = make_numerics(cfg.numerics);
  set_subnormals_flushed(numerics->flushes_subnormals());
  // The model's weights and activations are its config's size: a size this machine cannot hold
  // is named with the config.
  auto model = [&] {
    try {
      return make_model(cfg.model, B, T, *numerics);
    } catch (const Error& e) {
      fail("{}: fields 'model', 'train.batch_size' and 'train.seq_len': {}", cfg.path, e.what());
    }
  }();
  const ParamLayout& layout = model->layout();
  const size_t P = layout.total_floats();
  // DP: backward always writes micro_grads, which are reduced onto grads; ZeRO-1 keeps the
  // AdamW moments in the DataParallel shard instead of full-size buffers.
  FloatBuffer grads(P), micro_grads(accum > 1 || world > 1 ? P : 0), exp_avg(zero1 ? 0 : P),
      exp_avg_sq(zero1 ? 0 : P);
  std::unique_ptr<dist::DataParallel> dp;
  if (world > 1)
    dp = std::make_unique<dist::DataParallel>(*comm, layout, sharding, model->params(),
                                              grads.data(), micro_grads.data());
  // ZeRO-1: the DataParallel shard holds the refs to the rank's own elements instead.
  std::vector<ParamRef> refs =
      zero1 ? std::vector<ParamRef>{}
            : param_refs(layout, model->params(), grads.data(), exp_avg.data(), exp_avg_sq.data());

  TrainState state;
  state.config = config_to_json(cfg);
  state.train_fingerprint = train_data.shard().fingerprint();
  if (val_data) state.val_fingerprint = val_data->shard().fingerprint();
  std::string resume_note;
  if (saved) {
    // DP: checkpoints hold the full optimizer state, so any number of ranks (sharded or
    // not) resumes from them: ZeRO-1 ranks keep their own elements of it.
    FloatBuffer full_m(zero1 ? P : 0), full_v(zero1 ? P : 0);
    load_checkpoint_tensors(opt.resume, layout, model->params(),
                            zero1 ? full_m.data() : exp_avg.data(),
                            zero1 ? full_v.data() : exp_avg_sq.data());
    resume_note = check_resume(cfg, *saved, state, opt.resume, world);
    if (zero1) dp->load_shard(full_m.data(), full_v.data());
    state.step = saved->step;
    state.data_cursor = saved->data_cursor;
    state.rng = saved->rng;
    state.tokens_seen = saved->tokens_seen;
    train_data.set_cursor(state.data_cursor);
  } else if (!opt.init.empty()) {
    load_params(opt.init, layout, model->params());
  } else {
    model->init_weights(tc.seed);
  }

  const int64_t last_step =
      opt.stop_after >= 0 ? std::min<int64_t>(opt.stop_after, tc.steps) : tc.steps;
  if (state.step >= last_step)
    fail("--resume: {} is at step {}, and the run ends at step {} ({}): nothing left to train",
         opt.resume, state.step, last_step,
         last_step < tc.steps ? "--stop-after"
         : opt.steps >= 0     ? "--steps"
                              : fmt::format("train.steps of {}", cfg.path));

  // The longest path a checkpoint write makes (its temporary files), checked now rather than
  // at the first checkpoint, after the training it would then lose.
  const std::string longest_path =
      fmt::format("{}/checkpoints/step_{:06d}.tmp/optimizer.safetensors.tmp.{}", cfg.out_dir,
                  last_step, std::numeric_limits<pid_t>::max());
  if (longest_path.size() >= PATH_MAX)
    fail(
        "{}...: its checkpoints' paths would be {} characters, the system takes fewer than {}; "
        "choose a shorter --out-dir",
        cfg.out_dir.substr(0, 60), longest_path.size(), PATH_MAX);

  // One writer per run folder (io/folder_lock.h), taken before the folder is read for an
  // earlier run or a killed writer's leftovers: a live writer's are not leftovers.
  std::optional<FolderLock> folder_lock;
  if (lead && std::filesystem::is_directory(cfg.out_dir))
    folder_lock.emplace(cfg.out_dir, "forge train");
  // A new run in a folder that holds an earlier one would mix its checkpoints (and `latest`,
  // until its first checkpoint) with that run's and replace its metrics: refused unless asked.
  // A resume into another folder than its checkpoint's own (--out-dir) must not land on a third
  // run either: its metrics would be cut back and its checkpoints mixed with this run's.
  std::error_code same_ec;
  const bool elsewhere =
      saved && !(!saved_folder.empty() && std::filesystem::exists(cfg.out_dir, same_ec) &&
                 std::filesystem::equivalent(saved_folder, cfg.out_dir, same_ec));
  const EarlierRun earlier = !saved || elsewhere ? earlier_run_in(cfg.out_dir) : EarlierRun{};
  if (!earlier.empty() && saved)
    fail(
        "{}: holds another run ({}); resume {} in its own run folder (leave out --out-dir) or "
        "into an empty --out-dir",
        cfg.out_dir, earlier.describe(), opt.resume);
  if (!earlier.empty() && !opt.overwrite)
    fail(
        "{}: holds an earlier run ({}); {}train into another --out-dir, or replace it with "
        "--overwrite",
        cfg.out_dir, earlier.describe(),
        earlier.checkpoints.empty() ? ""
                                    : fmt::format("continue it with --resume {}, ", cfg.out_dir));

  // The run folder is made once everything it depends on has been read and checked, so that
  // a refused run leaves no empty folder behind.
  if (lead) {
    ensure_writable_dir(cfg.out_dir);
    if (!folder_lock) folder_lock.emplace(cfg.out_dir, "forge train");
    if (!earlier.empty()) remove_earlier_run(cfg.out_dir, earlier);
    // Where checkpoints go, checked now rather than at the first checkpoint, after hours.
    ensure_writable_dir(cfg.out_dir + "/checkpoints");
    remove_partial_checkpoints(cfg.out_dir);  // DP (faults): leftovers of a killed writer
    // Resumed from an earlier checkpoint of this folder than the one `latest` names, the run
    // is now at that step: `latest` names it from the start, so that a run stopped before its
    // next checkpoint resumes where its metrics (cut back to that step) leave off, not from the
    // later checkpoint of the steps it replaces.
    if (saved) {
      const std::string here = fmt::format("{}/checkpoints/step_{:06d}", cfg.out_dir, state.step);
      if (std::filesystem::is_directory(here) &&
          std::filesystem::equivalent(resolve_checkpoint(opt.resume), here))
        write_text_atomic(cfg.out_dir + "/checkpoints/latest", here + "\n");
    }
  }
  std::unique_ptr<DumpWriter> dump;
  if (!opt.dump_dir.empty() && lead)
    dump = std::make_unique<DumpWriter>(opt.dump_dir, opt.dump_level < 1 ? 1 : opt.dump_level,
                                        opt.dump_act_steps);

  // Five 60 ms trials: a 0.1 s window (five of 20 ms) on a shared host once read half the
  // machine (240 GFLOP/s where 460 was measured minutes later) and printed an MFU of 130%.
  Peak peak = measure_peak(threads, 0.3);
  if (test_bug_active("busy-start-up-peak")) peak.fp32_flops /= 1000;  // read on a busy machine
  const bool fp32_products = std::string(numerics->matmul_dtype()) == "fp32";
  bool peak_read_again = false;  // once, where a step's MFU passed 100% (below)
  const double flops_per_token = model->train_flops_per_token(T);
  // DP: ranks other than 0 write their (identical) metrics nowhere.
  const std::string metrics_path = cfg.out_dir + "/metrics.jsonl";
  if (lead && state.step > 0) drop_metrics_after(metrics_path, state.step);
  std::FILE* metrics = lead ? std::fopen(metrics_path.c_str(), state.step > 0 ? "a" : "w")
                            : std::fopen("/dev/null", "w");
  if (!metrics) fail("{}: cannot write metrics.jsonl", cfg.out_dir);
  std::fseek(metrics, 0, SEEK_END);  // appending: ftell (write_record) counts from the end
  struct Closer {
    std::FILE* f;
    ~Closer() {
      if (f) std::fclose(f);
    }
  } closer{metrics};

  // DP: rank 0 speaks for all. --quiet drops the per-step lines and the progress bar only: the
  // first line, validation and the closing summary stay.
  const bool talk = lead, step_lines = lead && !opt.quiet;
  // A record that does not reach the disk (a full disk) ends the run in one line: the README
  // promises one per step, and a run that went on would end with a silent gap.
  // What reached the disk is cut back to the last whole record, so that the file still parses
  // (a resume drops a torn line too, but a reader of a stopped run should not meet one).
  auto write_record = [&](const nlohmann::json& record) {
    const long whole = std::ftell(metrics);
    fmt::print(metrics, "{}\n", record.dump());
    if (std::fflush(metrics) != 0 || std::ferror(metrics)) {
      const int err = errno;
      __fpurge(metrics);  // what the buffer still holds would be written at the close
      if (whole >= 0 && lead) {
        [[maybe_unused]] const int cut = ::truncate(metrics_path.c_str(), whole);
      }
      fail("{}: cannot write: {}", metrics_path, std::strerror(err));
    }
  };
  if (talk)
    fmt::print(
        "forge train: {} ({} parameters), numerics {} ({}), B={} T={} accum={}, {} "
        "threads, peak {:.1f} GFLOP/s fp32\n",
        cfg.path, layout.numel(), numerics->name(), numerics->arithmetic(), B, T, accum, threads,
        peak.fp32_flops / 1e9);
  if (talk && dp) fmt::print("{}\n", dp->describe());
  if (talk && !resume_note.empty()) fmt::print("{}\n", resume_note);
  if (talk && !earlier.empty())
    fmt::print("note: replaced the earlier run in {} ({})\n", cfg.out_dir, earlier.describe());

  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  std::vector<double> step_tps;
  Progress progress(last_step, state.step, step_lines);
  std::vector<float> micro_losses(accum), all_losses(static_cast<size_t>(accum) * world);
  double comm_wait_total = 0, step_time_total = 0;
  TrainResult result;
  result.val_loss = std::numeric_limits<double>::quiet_NaN();

  auto write_checkpoint = [&](int64_t step) {
    const std::string dir = fmt::format("{}/checkpoints/step_{:06d}", cfg.out_dir, step);
    state.step = step;
    state.data_cursor = train_data.cursor();
    state.world_size = world;
    result.checkpoint = dir;
    if (zero1) {  // DP: rank 0 collects every rank's optimizer shard, then writes alone
      FloatBuffer full_m(lead ? P : 0), full_v(lead ? P : 0);
      dp->gather_shards(full_m.data(), full_v.data());
      if (lead) save_checkpoint(dir, layout, model->params(), full_m.data(), full_v.data(), state);
    } else if (lead) {
      save_checkpoint(dir, layout, model->params(), exp_avg.data(), exp_avg_sq.data(), state);
    }
    if (lead) write_text_atomic(cfg.out_dir + "/checkpoints/latest", dir + "\n");
  };
  auto validate = [&](int64_t step) {
    if (!validates) return;
    const double val = evaluate_loss(*model, *val_data, tc.eval_batches);
    result.val_loss = val;
    if (lead)
      progress.message(
          fmt::format("step {:>6} | val loss {:.4f} | val ppl {:.2f}", step, val, std::exp(val)));
    write_record(nlohmann::json{{"step", step}, {"val_loss", val}});
  };

  stop.route_to_main_thread();  // the team is final now
  const int64_t start_step = state.step;
  for (int64_t step = state.step; step < last_step; ++step) {
    if (stop.requested()) {  // arrived during a step, start-up, a validation or a checkpoint
      result.interrupted_by = stop.requested();
      break;
    }
    const auto t0 = Clock::now();
    const bool record = dump && dump->wants_activations(step + 1);
    double loss_sum = 0;
    for (int m = 0; m < accum; ++m) {
      train_data.next(inputs.data(), targets.data());
      model->set_recorder(record && m == 0 ? dump.get() : nullptr);
      const float loss = model->forward(inputs.data(), targets.data(), B, T);
      loss_sum += loss;
      micro_losses[m] = loss;
      // d(loss_m / accum): what autograd propagates for the accumulated mean.
      // DP: the mean is over accum micro-steps on each of the world ranks.
      const float dloss = 1.0f / static_cast<float>(accum * world);
      if (dp) {
        // DP: backward into micro_grads; buckets are reduced onto grads (in rank order) as
        // backward leaves each layer.
        model->set_recorder(dp->backward_hook(m, accum, record && m == 0 ? dump.get() : nullptr));
        model->backward(dloss, micro_grads.data());
        model->set_recorder(nullptr);
        dp->finish_micro_step();
      } else if (m == 0) {
        model->backward(dloss, grads.data());
      } else {
        model->backward(dloss, micro_grads.data());
        numerics->add_inplace(grads.data(), micro_grads.data(), P);
      }
    }
    model->set_recorder(nullptr);
    if (dp) {
      // DP: the global mean in the single process's order: rank k's micro-step m is its
      // micro-step m * world + k.
      comm->all_gather_bytes(micro_losses.data(), all_losses.data(), sizeof(float) * accum);
      loss_sum = 0;
      for (int m = 0; m < accum; ++m)
        for (int k = 0; k < world; ++k) loss_sum += all_losses[static_cast<size_t>(k) * accum + m];
    }
    const double loss = loss_sum / (accum * world);
    if (!std::isfinite(loss))
      fail("step {}: the loss is {} (diverged); lower train.lr in {}", step + 1, loss, cfg.path);
    if (dump) dump->capture_grads(layout, grads.data());

    OptimizerStep hp = optimizer_step(tc, learning_rate(tc, static_cast<int>(step)), step + 1);
    if (test_bug_active("adamw-no-bias-correction")) hp.step = int64_t{1} << 40;
    const double grad_norm =
        zero1 ? dp->zero1_step(*numerics, hp)
              : numerics->optimizer_step(refs.data(), static_cast<int>(refs.size()), hp);
    if (dump) dump->finish_step(step + 1, loss, grad_norm, layout, model->params());

    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double tokens = static_cast<double>(B) * T * accum * world;
    const double comm_wait = dp ? dp->take_wait_seconds() : 0.0;  // DP: blocked on peers
    comm_wait_total += comm_wait;
    step_time_total += secs;
    state.tokens_seen += tokens;
    const double tps = tokens / secs;
    double mfu = flops_per_token * tps / (peak.fp32_flops * world);  // DP: W ranks' peak
    if (mfu > 1.0 && fp32_products && !peak_read_again) {
      // An fp32 step cannot pass the fp32 peak: the start-up reading was taken while something
      // else held the cores (a make train run right after a benchmark read half the machine).
      // Read once more now, rather than print every step's MFU above 100% until the end.
      peak_read_again = true;
      const double before = peak.fp32_flops;
      if (const Peak again = measure_peak(threads, 0.3); again.fp32_flops > peak.fp32_flops)
        peak = again;
      mfu = flops_per_token * tps / (peak.fp32_flops * world);
      if (talk)
        progress.message(fmt::format(
            "note: step {}'s MFU passed 100% against the start-up peak reading ({:.1f} GFLOP/s, "
            "taken while something else held the cores); read again: {:.1f} GFLOP/s fp32, used "
            "from here on",
            step + 1, before / 1e9, peak.fp32_flops / 1e9));
    }
    if (step > state.step || last_step - state.step == 1) {  // the first step warms caches
      step_tps.push_back(tps);
    }
    result.last_loss = loss;
    result.steps_done = step + 1;
    write_record(nlohmann::json{{"step", step + 1},
                                {"loss", loss},
                                {"lr", hp.lr},
                                {"grad_norm", grad_norm},
                                {"ms", secs * 1e3},
                                {"tokens_per_s", tps},
                                {"mfu", mfu},
                                {"comm_wait_ms", comm_wait * 1e3}});
    if (step_lines && ((step + 1) % std::max(1, tc.log_interval) == 0 || step == 0))
      progress.message(fmt::format(
          "step {:>6}/{} | loss {:.4f} | lr {:.3e} | norm {:.4f} | {:.1f} ms | {:.0f} tok/s | "
          "MFU {:.1f}%",
          step + 1, tc.steps, loss, hp.lr, grad_norm, secs * 1e3, tps, 100 * mfu));
    progress.update(step + 1, loss);

    const bool at_end = step + 1 == last_step;
    if (tc.eval_interval > 0 && (step + 1) % tc.eval_interval == 0 && !at_end) validate(step + 1);
    if (tc.checkpoint_interval > 0 && (step + 1) % tc.checkpoint_interval == 0 && !at_end)
      write_checkpoint(step + 1);
  }
  progress.finish();
  if (result.steps_done == 0) result.steps_done = state.step;
  if (result.interrupted_by && result.steps_done == start_step) {
    // Stopped before this process took a step: nothing to save. A new run's empty metrics file
    // goes, so that the folder does not read as an earlier run's.
    if (lead && !saved) {
      std::fclose(closer.f);
      closer.f = nullptr;
      std::filesystem::remove(metrics_path);
    }
    if (talk)
      fmt::print("stopped by {} before the first step: nothing trained\n",
                 strsignal(result.interrupted_by));
    return result;
  }
  if (result.interrupted_by) {
    // Stopped by a signal: the step in progress was finished; a checkpoint of it (unless the
    // interval just wrote one) lets --resume go on bit for bit. No validation: the user asked
    // to stop.
    if (state.step != result.steps_done) write_checkpoint(result.steps_done);
    if (talk)
      fmt::print("stopped by {} after step {}: checkpoint {}; continue with --resume {}\n",
                 strsignal(result.interrupted_by), result.steps_done, result.checkpoint,
                 cfg.out_dir);
    return result;
  }
  validate(result.steps_done);
  write_checkpoint(result.steps_done);
  if (talk && stop.requested())  // after the last step: the run completed all the same
    fmt::print("{} arrived after the last step: the run completed\n", strsignal(stop.requested()));
  result.tokens_per_s = median(step_tps);
  result.mfu = flops_per_token * result.tokens_per_s / (peak.fp32_flops * world);
  {
    // The peak is a maximum: measured again now, the higher reading is the machine's, and the
    // summary divides by it (the per-step lines used the reading of their time).
    const Peak again = measure_peak(threads, 0.3);
    if (again.fp32_flops > peak.fp32_flops) {
      peak = again;
      result.mfu = flops_per_token * result.tokens_per_s / (peak.fp32_flops * world);
      if (talk)
        fmt::print("peak re-measured at the end: {:.1f} GFLOP/s fp32\n", peak.fp32_flops / 1e9);
    }
  }
  if (talk && dp)
    fmt::print(
        "data parallel: {:.1f}% of the step time blocked on communication; {:.1f} of {} "
        "buckets per micro-step started while backward ran\n",
        step_time_total > 0 ? 100 * comm_wait_total / step_time_total : 0.0,
        dp->buckets_started_in_backward(), dp->bucket_count());
  // An fp32 step cannot pass the fp32 peak: every reading was taken while something else held
  // the cores. (bf16's products run on other units: its MFU may pass 100%.)
  if (talk && result.mfu > 1.0 && fp32_products)
    fmt::print(
        "note: MFU above 100%: the fp32 peak readings ({:.1f} GFLOP/s at most) were taken while "
        "something else held the cores; the MFU figures of this run are not this machine's\n",
        peak.fp32_flops / 1e9);
  if (talk)
    fmt::print(
        "done: {} steps, last loss {:.4f}, median {:.0f} tok/s, MFU {:.1f}%, checkpoint {}\n",
        result.steps_done, result.last_loss, result.tokens_per_s, 100 * result.mfu,
        result.checkpoint);
  return result;
}

}  // namespace forge
