#include "forge/dist/data_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "forge/core/error.h"

namespace forge::dist {

namespace {

using Clock = std::chrono::steady_clock;

// The transformer layer a parameter belongs to ("transformer.h.3.attn..." -> 3), or -1.
int layer_of(const std::string& name) {
  static const std::regex re(R"((?:^|\.)(?:h|layers)\.(\d+)\.)");
  std::smatch m;
  if (!std::regex_search(name, m, re)) return -1;
  return std::stoi(m[1].str());
}

double mib(size_t floats) { return static_cast<double>(floats) * sizeof(float) / (1 << 20); }

}  // namespace

OptimizerSharding parse_sharding(const std::string& value, const std::string& where) {
  if (value == "none" || value == "replicated") return OptimizerSharding::Replicated;
  if (value == "zero1") return OptimizerSharding::Zero1;
  fail("{}: expected \"none\" or \"zero1\", got \"{}\"", where, value);
}

OptimizerSharding choose_sharding(const std::string& flag) {
  if (!flag.empty()) return parse_sharding(flag, "--dp-sharding");
  const char* s = std::getenv("FORGE_DP_SHARDING");
  if (!s || !*s) return OptimizerSharding::Replicated;
  return parse_sharding(s, "environment FORGE_DP_SHARDING");
}

DataParallel::DataParallel(Communicator& comm, const ParamLayout& layout,
                           OptimizerSharding sharding, float* params, float* grads, float* micro)
    : comm_(comm),
      layout_(layout),
      sharding_(sharding),
      params_(params),
      grads_(grads),
      micro_(micro) {
  plan_buckets(layout);
  size_t scratch = 0;
  for (const Bucket& b : buckets_) scratch += Communicator::scratch_floats(b.size(), comm_.world());
  scratch_.resize(scratch);
  size_t off = 0;
  for (Bucket& b : buckets_) {
    b.scratch = scratch_.data() + off;
    off += Communicator::scratch_floats(b.size(), comm_.world());
  }
  if (sharding_ != OptimizerSharding::Zero1) return;

  owned_ = owned_ranges(comm_.rank());
  for (const Span& s : owned_) shard_floats_ += s.size();
  exp_avg_.assign(shard_floats_, 0.0f);
  exp_avg_sq_.assign(shard_floats_, 0.0f);
  // One ParamRef per (tensor, owned range) overlap: AdamW is elementwise, so updating a
  // tensor in pieces computes the same bits as updating it whole. Chunk boundaries are
  // multiples of kChunkAlign and tensors start aligned, so a piece never changes which
  // elements a vectorised kernel handles in its scalar tail.
  size_t packed = 0;
  for (const Span& s : owned_) {
    for (const ParamSpec& p : layout.tensors()) {
      const size_t b = std::max(s.begin, p.offset), e = std::min(s.end, p.offset + p.numel);
      if (b >= e) continue;
      const size_t at = packed + (b - s.begin);
      shard_refs_.push_back(
          {params_ + b, grads_ + b, exp_avg_.data() + at, exp_avg_sq_.data() + at, e - b, p.decay});
    }
    packed += s.size();
  }
  rank_sq_.resize(comm_.world());
}

void DataParallel::plan_buckets(const ParamLayout& layout) {
  const auto& ts = layout.tensors();
  const size_t total = layout.total_floats();
  // Where each layer starts in the flat buffer; layers must be contiguous and in order for
  // per-layer buckets, otherwise one bucket covers everything (correct, just no overlap).
  std::vector<size_t> starts;
  int expect = 0;
  bool ok = true;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int l = layer_of(ts[i].name);
    if (l < 0) continue;
    if (l == expect) {
      starts.push_back(ts[i].offset);
      ++expect;
    } else if (l != expect - 1) {
      ok = false;
    }
  }
  // Every non-layer tensor must sit before layer 0 (embeddings) or after the last layer
  // (final norm) for the ranges below to hold.
  for (const ParamSpec& p : ts)
    if (layer_of(p.name) < 0 && !starts.empty() && p.offset > starts.front() &&
        p.offset < starts.back())
      ok = false;
  const int L = static_cast<int>(starts.size());
  if (!ok || L == 0) {
    buckets_.push_back({0, total, "", nullptr, -1, false});
    return;
  }
  // Backward order: layer L-1 (+ final norm), ..., layer 0, then the embeddings. The model
  // records "actgrad.h.<l>.res_2" as it enters layer l, after layer l+1's gradients are
  // complete, and "actgrad.embed" after layer 0's.
  for (int l = L - 1; l >= 0; --l) {
    const size_t end = l == L - 1 ? total : starts[l + 1];
    const std::string trigger =
        l > 0 ? fmt::format("actgrad.h.{}.res_2", l - 1) : std::string("actgrad.embed");
    buckets_.push_back({starts[l], end, trigger, nullptr, -1, false});
  }
  if (starts.front() > 0) buckets_.push_back({0, starts.front(), "", nullptr, -1, false});
}

std::vector<Span> DataParallel::owned_ranges(int rank) const {
  std::vector<Span> out;
  for (const Bucket& b : buckets_) {
    const Span c = chunk_of(b.size(), rank, comm_.world());
    if (c.size()) out.push_back({b.begin + c.begin, b.begin + c.end});
  }
  return out;
}

void DataParallel::Hook::record(const std::string& name, const float* data,
                                const std::vector<int64_t>& shape) {
  if (chain) chain->record(name, data, shape);
  dp_.on_backward_point(name);
}

ActivationRecorder* DataParallel::backward_hook(int micro_step, int accum,
                                                ActivationRecorder* chain) {
  micro_step_ = micro_step;
  accum_ = accum;
  next_bucket_ = 0;
  for (Bucket& b : buckets_) b.started = false;
  hook_.chain = chain;
  return &hook_;
}

void DataParallel::on_backward_point(const std::string& name) {
  if (next_bucket_ < buckets_.size() && !buckets_[next_bucket_].trigger.empty() &&
      name == buckets_[next_bucket_].trigger)
    start_bucket(buckets_[next_bucket_++]);
  comm_.progress();  // between layers: move the buckets in flight forward
}

void DataParallel::start_bucket(Bucket& b) {
  // The first micro-step overwrites the accumulator, later ones add onto it (what the
  // single process's "grads = g_0; grads += g_m" does); the last one completes the sum on
  // every rank unless the optimizer state is sharded.
  const bool accumulate = micro_step_ > 0;
  const bool last = micro_step_ == accum_ - 1;
  const float* x = micro_ + b.begin;
  float* acc = grads_ + b.begin;
  if (last && sharding_ == OptimizerSharding::Replicated)
    b.handle = comm_.start_all_reduce(x, acc, b.size(), accumulate, b.scratch);
  else
    b.handle = comm_.start_reduce_scatter(x, acc, b.size(), accumulate, b.scratch);
  b.started = true;
}

void DataParallel::finish_micro_step() {
  hook_.chain = nullptr;
  early_starts_ += static_cast<int64_t>(next_bucket_);
  ++micro_steps_;
  for (; next_bucket_ < buckets_.size(); ++next_bucket_) start_bucket(buckets_[next_bucket_]);
  const auto t0 = Clock::now();
  for (Bucket& b : buckets_) comm_.wait(b.handle);
  wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

double DataParallel::zero1_step(Numerics& numerics, const OptimizerStep& hp) {
  FORGE_CHECK(sharding_ == OptimizerSharding::Zero1, "zero1_step without Zero1 sharding");
  // Sum of squares of this rank's reduced gradients: 8 lanes, then the lanes in order, so
  // the value never depends on threads or timing.
  double lanes[8] = {};
  for (const Span& s : owned_) {
    const float* g = grads_ + s.begin;
    const size_t n = s.size();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) lanes[k] += static_cast<double>(g[i + k]) * g[i + k];
    for (; i < n; ++i) lanes[0] += static_cast<double>(g[i]) * g[i];
  }
  double mine = 0;
  for (double l : lanes) mine += l;
  const auto t0 = Clock::now();
  comm_.all_gather_bytes(&mine, rank_sq_.data(), sizeof(double));
  wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  double sq = 0;
  for (double v : rank_sq_) sq += v;
  const double norm = std::sqrt(sq);

  // torch's clip_grad_norm_: g *= min(1, max_norm / (norm + 1e-6)), applied here so that the
  // profile's own step runs unclipped on the shard (multiplying by 1 changes no bits).
  if (hp.max_grad_norm > 0) {
    const float coef = static_cast<float>(std::min(1.0, hp.max_grad_norm / (norm + 1e-6)));
    if (coef != 1.0f)
      for (const ParamRef& r : shard_refs_)
        for (size_t i = 0; i < r.numel; ++i) r.grad[i] = r.grad[i] * coef;
  }
  OptimizerStep unclipped = hp;
  unclipped.max_grad_norm = 0;
  numerics.optimizer_step(shard_refs_.data(), static_cast<int>(shard_refs_.size()), unclipped);

  // Every rank's updated chunk of every bucket to every rank.
  for (Bucket& b : buckets_) b.handle = comm_.start_all_gather(params_ + b.begin, b.size());
  const auto t1 = Clock::now();
  for (Bucket& b : buckets_) comm_.wait(b.handle);
  wait_s_ += std::chrono::duration<double>(Clock::now() - t1).count();
  return norm;
}

void DataParallel::load_shard(const float* full_m, const float* full_v) {
  size_t at = 0;
  for (const Span& s : owned_) {
    std::memcpy(exp_avg_.data() + at, full_m + s.begin, s.size() * sizeof(float));
    std::memcpy(exp_avg_sq_.data() + at, full_v + s.begin, s.size() * sizeof(float));
    at += s.size();
  }
}

void DataParallel::gather_shards(float* full_m, float* full_v) {
  const int W = comm_.world();
  std::vector<std::vector<Span>> ranges(W);
  std::vector<size_t> counts(W, 0);
  size_t total = 0;
  for (int k = 0; k < W; ++k) {
    ranges[k] = owned_ranges(k);
    for (const Span& s : ranges[k]) counts[k] += s.size();
    total += counts[k];
  }
  const bool root = comm_.rank() == 0;
  std::vector<float> packed(root ? total : 0);
  for (int which = 0; which < 2; ++which) {
    const float* mine = which == 0 ? exp_avg_.data() : exp_avg_sq_.data();
    float* full = which == 0 ? full_m : full_v;
    comm_.gather_to_root(mine, root ? packed.data() : nullptr, counts);
    if (!root) continue;
    size_t at = 0;
    for (int k = 0; k < W; ++k)
      for (const Span& s : ranges[k]) {
        std::memcpy(full + s.begin, packed.data() + at, s.size() * sizeof(float));
        at += s.size();
      }
  }
}

double DataParallel::take_wait_seconds() {
  const double s = wait_s_;
  wait_s_ = 0;
  return s;
}

std::string DataParallel::describe() const {
  const size_t full = layout_.total_floats();
  const size_t moments = sharding_ == OptimizerSharding::Zero1 ? 2 * shard_floats_ : 2 * full;
  // params + accumulator + micro-step gradients + reduction scratch + AdamW moments
  const size_t per_rank = 3 * full + scratch_.size() + moments;
  return fmt::format(
      "data parallel: {} ranks over {}, {} buckets, optimizer {}: AdamW state {:.2f} MiB per "
      "rank (unsharded {:.2f} MiB), parameters+gradients+state {:.2f} MiB per rank",
      comm_.world(), comm_.name(), buckets_.size(),
      sharding_ == OptimizerSharding::Zero1 ? "ZeRO-1 (sharded)" : "replicated", mib(moments),
      mib(2 * full), mib(per_rank));
}

}  // namespace forge::dist
