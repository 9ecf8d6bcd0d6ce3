// `forge bench`: tokens/s and MFU of the engine beside PyTorch, measured in one run.
// Every measurement is its own process (so each side's peak RSS is its own), run in
// interleaved rounds: engine, reference eager, reference compiled, engine, ...
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "forge/cli/commands.h"
#include "forge/cli/validators.h"
#include "forge/core/error.h"
#include "forge/core/peak.h"
#include "forge/core/test_bugs.h"
#include "forge/core/threads.h"
#include "forge/io/atomic_file.h"
#include "forge/numerics/numerics.h"
#include "forge/train/bench.h"
#include "forge/verify/verify.h"

namespace fs = std::filesystem;

namespace forge::cli {

namespace {

struct BenchOptions {
  std::string config, profiles = "fast", reference = "torch", modes = "eager,compile";
  std::string json_out, md_out, python, engine_only;
  int warmup = 2, steps = 5, rounds = 1, threads = -1;  // threads -1: the config's
  bool breakdown = false;
};

// The names of a comma-separated option; an empty one ("fast,,bf16", "") is refused rather
// than dropped, as a misspelt name is.
std::vector<std::string> split_names(const std::string& s, const char* option) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  if (!s.empty() && s.back() == ',') out.push_back("");
  if (out.empty() || std::find(out.begin(), out.end(), "") != out.end())
    fail("{}: expected comma-separated names, none of them empty, got '{}'", option, s);
  // A name given twice ran twice, and one run's figures were dropped without a word.
  for (size_t i = 0; i < out.size(); ++i)
    if (std::find(out.begin(), out.begin() + static_cast<long>(i), out[i]) !=
        out.begin() + static_cast<long>(i))
      fail("{}: '{}' is given twice in '{}'", option, out[i], s);
  return out;
}

// The checkout whose reference/ runs PyTorch's side (and whose .venv is the default Python),
// found as forge verify finds it. Only a run with a reference needs it.
fs::path repo_root() {
  const fs::path root = verify::find_reference_checkout("");
  if (root.empty())
    fail(
        "forge bench: cannot find the checkout holding reference/forge_ref (PyTorch's side) "
        "above {} or the current folder; run forge from its checkout, or use --reference none",
        fs::read_symlink("/proc/self/exe").string());
  return root;
}

// Runs a command, returns the last line of its stdout parsed as JSON.
nlohmann::json run_json(const std::string& cmd, const std::string& what) {
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) fail("{}: cannot start: {}", what, cmd);
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int rc = pclose(p);
  const auto last = out.find_last_of('{');
  if (rc != 0 || last == std::string::npos)
    fail("{} failed (exit {}): {}", what, WEXITSTATUS(rc), cmd);
  auto j = nlohmann::json::parse(out.substr(out.rfind('\n', out.size() - 2) + 1), nullptr, false);
  if (j.is_discarded() || j.contains("error"))
    fail("{}: {}", what, j.is_discarded() ? "no JSON result" : j["error"].get<std::string>());
  return j;
}

struct Side {
  std::string name;
  std::vector<double> seconds;
  size_t rss = 0;
  int tokens_per_step = 0;
  double tokens_per_s() const { return tokens_per_step / quartile(2); }
  // Step time quartile q: 0 the fastest step, 1 and 3 the lower and upper quartiles (with 5
  // steps, the 2nd and the 4th fastest), 2 the median, 4 the slowest.
  double quartile(int q) const {
    auto s = seconds;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() * q / 4, s.size() - 1)];
  }
};

// forge's speed over the reference's as `forge bench` reports it (medians), and the range
// the steps' quartiles allow: forge's slower quartile against the reference's faster one, and
// the other way round. On a shared machine one round's median ratio can sit anywhere in that
// range; only where the whole range lies on one side of 1 does one round say which is faster.
struct Ratio {
  double median, low, high;
};
Ratio speed_ratio(const Side& engine, const Side& ref) {
  const double tokens = static_cast<double>(engine.tokens_per_step) / ref.tokens_per_step;
  return {engine.tokens_per_s() / ref.tokens_per_s(), tokens * ref.quartile(1) / engine.quartile(3),
          tokens * ref.quartile(3) / engine.quartile(1)};
}

// The line under the table for one profile.
std::string ratio_line(const std::string& prof, const std::string& ref_name, const Ratio& r) {
  const char* verdict = r.low > 1    ? "forge is faster across the quartiles"
                        : r.high < 1 ? "forge is slower across the quartiles"
                                     : "the quartiles overlap: more `--rounds` are needed to "
                                       "say which is faster";
  return fmt::format(
      "\n`{}` against the fastest reference ({}): {:.2f}x; {:.2f}-{:.2f}x "
      "between the steps' quartiles: {}.\n",
      prof, ref_name, r.median, r.low, r.high, verdict);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

int engine_only(const BenchOptions& o) {
  Config cfg = load_config(o.config);
  validate_config(cfg);
  const int nthreads = set_thread_count(o.threads >= 0 ? o.threads : cfg.train.threads);
  // The peak is measured here, in the child, rather than by the parent: a parent that had run
  // an OpenMP team keeps its threads, and under OMP_WAIT_POLICY=active they spin on the
  // cores the children need (every side measured 2.5x slower).
  const Peak before = measure_peak(nthreads, 0.5);
  EngineTiming t = time_engine_steps(cfg, o.engine_only, o.warmup, o.steps, o.breakdown);
  // Read again after the steps: a machine whose speed moved while they ran (another load, a
  // clock change) shows it in the two readings.
  Peak after = measure_peak(nthreads, 0.5);
  if (test_bug_active("slow-peak")) after.fp32_flops /= 2;  // a machine that slowed down
  Peak peak;
  peak.fp32_flops = std::max(before.fp32_flops, after.fp32_flops);
  peak.bf16_flops = std::max(before.bf16_flops, after.bf16_flops);
  nlohmann::json j{{"side", "forge " + o.engine_only},
                   {"step_seconds", t.step_seconds},
                   {"tokens_per_step", t.tokens_per_step},
                   {"peak_rss_bytes", t.peak_rss_bytes},
                   {"flops_per_token", t.flops_per_token},
                   {"op_seconds", t.op_seconds},
                   {"op_gemm_flops", t.op_gemm_flops},
                   {"peak_fp32_flops", peak.fp32_flops},
                   {"peak_fp32_readings", {before.fp32_flops, after.fp32_flops}},
                   {"peak_bf16_flops", peak.bf16_flops},
                   {"arithmetic", t.arithmetic},
                   {"matmul_dtype", t.matmul_dtype}};
  fmt::print("{}\n", j.dump());
  return 0;
}

// The share of the highest peak reading under which a reading says the machine slowed down.
constexpr double kSteadyPeak = 0.9;

void run_bench(const BenchOptions& o) {
  if (!o.engine_only.empty()) {
    engine_only(o);
    return;
  }
  Config cfg = load_config(o.config);
  validate_config(cfg);
  const int nthreads = set_thread_count(o.threads >= 0 ? o.threads : cfg.train.threads);
  const fs::path root = o.reference == "none" ? fs::path() : repo_root();
  const std::string python = o.python.empty() ? (root / ".venv/bin/python").string() : o.python;
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  // Refused here, before minutes of runs: a name only a child would reject, and an output
  // file that could not be written at the end.
  if (o.reference != "torch" && o.reference != "none")
    fail("--reference: expected torch or none, got '{}'", o.reference);
  const auto profiles = split_names(o.profiles, "--profiles");
  const auto known = numerics_profiles();
  for (const auto& prof : profiles)
    if (std::find(known.begin(), known.end(), prof) == known.end())
      fail("--profiles: '{}' is not a numerics profile: expected some of {}", prof,
           fmt::join(known, ", "));
  // Checked even where no reference runs, so that a typo is not silently ignored.
  const auto given_modes = split_names(o.modes, "--modes");
  for (const auto& mode : given_modes)
    if (mode != "eager" && mode != "compile")
      fail("--modes: '{}' is not a reference mode: expected eager, compile or both", mode);
  const auto modes = o.reference == "none" ? std::vector<std::string>{} : given_modes;
  if (!o.json_out.empty()) check_writable_file(o.json_out, "--json");
  if (!o.md_out.empty()) check_writable_file(o.md_out, "--md");

  // Each engine run measures the machine's peak before and after its steps; the highest
  // reading of the run counts (a peak is what the cores can do, and a reading only loses to
  // noise), and the spread of the readings says whether the machine's speed held.
  Peak peak;
  std::vector<double> fp32_readings;
  std::string env = fmt::format("OMP_NUM_THREADS={}", nthreads);
  if (!root.empty()) env += fmt::format(" PYTHONPATH={}/reference", root.string());
  for (const auto& [name, value] : torch_malloc_tuning()) env += fmt::format(" {}={}", name, value);
  const std::string common = fmt::format("--config {} --warmup {} --steps {} --threads {}",
                                         o.config, o.warmup, o.steps, nthreads);

  std::map<std::string, Side> engine;
  std::map<std::string, std::map<std::string, Side>> refs;
  std::map<std::string, nlohmann::json> breakdown, breakdown_flops;
  std::map<std::string, std::string> arithmetic;    // per profile, as the engine runs reported it
  std::map<std::string, std::string> matmul_dtype;  // likewise: "fp32" or "bf16"
  double flops_per_token = 0;
  for (int r = 0; r < o.rounds; ++r) {
    for (const auto& prof : profiles) {
      fmt::print(stderr, "bench: round {}/{}: forge {}\n", r + 1, o.rounds, prof);
      auto j = run_json(fmt::format("{} bench --engine-only {} {}{}", self, prof, common,
                                    o.breakdown ? " --breakdown" : ""),
                        "forge bench (engine " + prof + ")");
      Side& s = engine[prof];
      s.name = "forge " + prof;
      for (double x : j["step_seconds"]) s.seconds.push_back(x);
      s.rss = std::max(s.rss, j["peak_rss_bytes"].get<size_t>());
      s.tokens_per_step = j["tokens_per_step"];
      flops_per_token = j["flops_per_token"];
      peak.fp32_flops = std::max(peak.fp32_flops, j["peak_fp32_flops"].get<double>());
      for (double x : j["peak_fp32_readings"]) fp32_readings.push_back(x);
      peak.bf16_flops = std::max(peak.bf16_flops, j["peak_bf16_flops"].get<double>());
      if (o.breakdown) {
        // Per step, averaged over the rounds: each round's engine run times its own steps.
        auto add_round = [&](nlohmann::json& total, const nlohmann::json& round) {
          if (total.is_null()) total = nlohmann::json::object();
          for (auto& [op, x] : round.items())
            total[op] = total.value(op, 0.0) + x.get<double>() / o.rounds;
        };
        add_round(breakdown[prof], j["op_seconds"]);
        add_round(breakdown_flops[prof], j["op_gemm_flops"]);
      }
      arithmetic[prof] = j["arithmetic"];
      matmul_dtype[prof] = j["matmul_dtype"];
      const std::string dtype = matmul_dtype[prof];  // the peer multiplies in the same type
      for (const auto& mode : modes) {
        fmt::print(stderr, "bench: round {}/{}: torch {} {}\n", r + 1, o.rounds, mode, dtype);
        auto rj = run_json(fmt::format("env {} {} -m forge_ref.bench {} --mode {} --dtype {}", env,
                                       python, common, mode, dtype),
                           "reference bench (" + mode + " " + dtype + ")");
        Side& rs = refs[prof][mode];
        rs.name = rj["side"];
        for (double x : rj["step_seconds"]) rs.seconds.push_back(x);
        rs.rss = std::max(rs.rss, rj["peak_rss_bytes"].get<size_t>());
        rs.tokens_per_step = rj["tokens_per_step"];
      }
    }
  }

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  nlohmann::json report{{"date", date},
                        {"cpu", cpu_model()},
                        {"threads", nthreads},
                        {"config", o.config},
                        {"peak_fp32_flops", peak.fp32_flops},
                        {"peak_fp32_readings", fp32_readings},
                        {"peak_bf16_flops", peak.bf16_flops},
                        {"flops_per_token", flops_per_token},
                        {"warmup", o.warmup},
                        {"steps", o.steps},
                        {"rounds", o.rounds}};
  auto describe = [&](const Side& s) {
    const double tps = s.tokens_per_s();
    return nlohmann::json{{"tokens_per_s", tps},
                          {"mfu", flops_per_token * tps / peak.fp32_flops},
                          {"step_ms_median", 1e3 * s.quartile(2)},
                          {"step_ms_min", 1e3 * s.quartile(0)},
                          {"step_ms_lower_quartile", 1e3 * s.quartile(1)},
                          {"step_ms_upper_quartile", 1e3 * s.quartile(3)},
                          {"step_ms_max", 1e3 * s.quartile(4)},
                          {"peak_rss_bytes", s.rss}};
  };
  const double lowest = *std::min_element(fp32_readings.begin(), fp32_readings.end());
  std::string md = fmt::format(
      "`forge bench --config {} --profiles {} --reference {}` on {}, {} threads, {} "
      "(fp32 peak measured {:.1f} GFLOP/s, the highest of {} readings, the lowest {:.1f}; median "
      "of {} steps x {} rounds after {} warm-up)\n\n"
      "| profile | side | tokens/s | step ms (median, min-max) | MFU | peak RSS MiB | forge / side "
      "|\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
      o.config, o.profiles, o.reference, cpu_model(), nthreads, date, peak.fp32_flops / 1e9,
      fp32_readings.size(), lowest / 1e9, o.steps, o.rounds, o.warmup);
  std::string ratio_lines;
  for (const auto& prof : profiles) {
    nlohmann::json pj;
    pj["engine"] = describe(engine[prof]);
    const double etps = engine[prof].tokens_per_s();
    const Side* fastest = nullptr;
    for (auto& [mode, s] : refs[prof]) {
      pj["references"][s.name] = describe(s);
      if (!fastest || s.tokens_per_s() > fastest->tokens_per_s()) fastest = &s;
    }
    if (fastest) {
      const Ratio ratio = speed_ratio(engine[prof], *fastest);
      pj["ratio_to_fastest_reference"] = ratio.median;
      pj["ratio_interquartile_range"] = {ratio.low, ratio.high};
      ratio_lines += ratio_line(prof, fastest->name, ratio);
    }
    pj["engine_arithmetic"] = arithmetic[prof];
    if (o.breakdown) {
      pj["engine_op_seconds_per_step"] = breakdown[prof];
      pj["engine_op_gemm_flops_per_step"] = breakdown_flops[prof];
    }
    report["profiles"][prof] = pj;
    auto row = [&](const Side& s, double ratio) {
      const auto d = describe(s);
      md += fmt::format("| {} | {} | {:.0f} | {:.1f} ({:.1f}-{:.1f}) | {:.1f}% | {:.0f} | {} |\n",
                        prof, s.name, d["tokens_per_s"].get<double>(),
                        d["step_ms_median"].get<double>(), d["step_ms_min"].get<double>(),
                        d["step_ms_max"].get<double>(), 100 * d["mfu"].get<double>(),
                        s.rss / 1048576.0, ratio > 0 ? fmt::format("{:.2f}x", ratio) : "");
    };
    row(engine[prof], 0);
    for (auto& [mode, s] : refs[prof]) row(s, etps / s.tokens_per_s());
  }
  md += ratio_lines;
  // A peak reading well under the others: the cores did less for a while (another load, a
  // clock change), and the sides measured then were slowed by an amount no one saw.
  if (lowest < kSteadyPeak * peak.fp32_flops)
    md += fmt::format(
        "\nThe machine's speed did not hold during this run: its fp32 peak readings (before and "
        "after each engine run's steps) spread from {:.1f} to {:.1f} GFLOP/s, {:.0f}% apart. "
        "Steps measured in a slow stretch count against their side, so this run's tokens/s, MFU "
        "and ratios are less sure than their quartiles say; `--rounds` interleaves the sides to "
        "spread such stretches over all of them.\n",
        lowest / 1e9, peak.fp32_flops / 1e9, 100 * (1 - lowest / peak.fp32_flops));
  // An fp32 side cannot pass the fp32 peak: above it, the peak readings were taken while
  // something else held the cores (both equally low, so the note above stays silent). bf16's
  // products run on other units, so its MFU (against the fp32 peak) may pass 100%.
  double fp32_mfu = 0;
  for (const auto& prof : profiles)
    if (matmul_dtype[prof] == "fp32") {
      fp32_mfu = std::max(fp32_mfu, describe(engine[prof])["mfu"].get<double>());
      for (auto& [mode, s] : refs[prof])
        fp32_mfu = std::max(fp32_mfu, describe(s)["mfu"].get<double>());
      // and the breakdown's GEMM rates, against the same peak
      if (o.breakdown)
        for (auto& [op, flops] : breakdown_flops[prof].items())
          if (const double secs = breakdown[prof].value(op, 0.0); secs > 0)
            fp32_mfu = std::max(fp32_mfu, flops.get<double>() / secs / peak.fp32_flops);
    }
  if (fp32_mfu > 1.0)
    md += fmt::format(
        "\nAn fp32 side's MFU (or an op's GEMM rate) is {:.1f}% of the fp32 peak, above it: the "
        "peak readings ({:.1f} GFLOP/s "
        "at most) were taken while something else held the cores, so the MFU column (and the "
        "breakdown's share of the peak) is not this machine's; the sides' times and ratios are "
        "measured as ever.\n",
        100 * fp32_mfu, peak.fp32_flops / 1e9);
  md += "\nforge's arithmetic on this machine:";
  for (const auto& prof : profiles) md += fmt::format(" `{}`: {}.", prof, arithmetic[prof]);
  md += "\n";
  if (o.breakdown) {
    for (const auto& prof : profiles) {
      md += fmt::format(
          "\nWhere a `{}` step's time goes (forge, the mean per step over the timed steps, "
          "which a slow step pulls above the median step of the table above; for an op "
          "holding linear layers' GEMMs, their products' operations over the op's whole time, "
          "and that rate against the fp32 FMA peak measured above):\n\n"
          "| op | ms | share | GEMM GFLOP/s | of fp32 peak |\n| --- | ---: | ---: | ---: | ---: "
          "|\n",
          prof);
      double total = 0;
      std::vector<std::pair<double, std::string>> ops;
      for (auto& [op, secs] : breakdown[prof].items()) {
        ops.push_back({secs.get<double>(), op});
        total += secs.get<double>();
      }
      std::sort(ops.rbegin(), ops.rend());
      const nlohmann::json& flops = breakdown_flops[prof];
      for (auto& [secs, op] : ops) {
        std::string rate = " | ";
        if (flops.contains(op) && secs > 0) {
          const double per_s = flops[op].get<double>() / secs;
          rate = fmt::format("{:.0f} | {:.0f}%", per_s / 1e9, 100 * per_s / peak.fp32_flops);
        }
        md += fmt::format("| {} | {:.2f} | {:.1f}% | {} |\n", op, 1e3 * secs, 100 * secs / total,
                          rate);
      }
    }
  }
  fmt::print("{}", md);
  if (!o.json_out.empty()) write_text_atomic(o.json_out, report.dump(2) + "\n");
  if (!o.md_out.empty()) write_text_atomic(o.md_out, md);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "tokens/s and MFU, engine beside PyTorch, in one run");
  cmd->add_option("--config", o->config, "config JSON")->check(non_empty_path())->required();
  cmd->add_option("--profiles", o->profiles, "comma-separated numerics profiles (fast,bf16)");
  cmd->add_option("--reference", o->reference, "torch | none");
  cmd->add_option("--modes", o->modes, "reference modes: eager,compile");
  cmd->add_option("--warmup", o->warmup,
                  "warm-up steps per measurement (BENCHMARKS.md: at least 2)")
      ->check(integer_in(2, 100));
  cmd->add_option("--steps", o->steps, "timed steps per measurement (median taken)")
      ->check(integer_in(5, 1000));
  cmd->add_option("--rounds", o->rounds, "interleaved rounds")->check(integer_in(1, 100));
  cmd->add_option("--threads", o->threads,
                  "threads for both sides (0: all cores; default: the config's)")
      ->check(integer_in(0, 4096));
  cmd->add_option("--json", o->json_out, "write the report as JSON")->check(non_empty_path());
  cmd->add_option("--md", o->md_out, "write the Markdown table")->check(non_empty_path());
  cmd->add_option("--python", o->python, "reference interpreter (default .venv/bin/python)")
      ->check(non_empty_path());
  cmd->add_flag("--breakdown", o->breakdown, "per-op time of the engine's step");
  cmd->add_option("--engine-only", o->engine_only, "(internal) time one engine profile, print JSON")
      ->group("");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace forge::cli
