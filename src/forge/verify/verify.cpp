#include "forge/verify/verify.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/io/config.h"
#include "forge/numerics/numerics.h"
#include "forge/train/bench.h"
#include "forge/train/data_loader.h"
#include "forge/verify/process.h"

namespace fs = std::filesystem;

namespace forge::verify {

namespace {

using Clock = std::chrono::steady_clock;

// EQUIVALENCE.md, table "Gates".
std::string required_rung(const std::string& gate, const std::string& profile) {
  if (gate == "resume") return "BITWISE";
  if (gate == "perf") return "SURPASS";  // any profile: the same run, faster, as good
  if (profile == "torch-cpu") return "BITWISE";
  if (gate == "long-horizon") return "CONVERGENT";
  return "TOLERANCE";
}

int default_steps(const std::string& gate, int config_steps) {
  if (gate == "alignment") return 1;
  if (gate == "multistep" || gate == "dp") return 8;
  if (gate == "resume") return 20;
  return config_steps;  // long-horizon and perf: the config's own schedule
}

// Progress goes to stderr, one line per phase, so that stdout carries only the report.
class Phases {
 public:
  void begin(std::string name) {
    name_ = std::move(name);
    fmt::print(stderr, "forge verify: {} ...\n", name_);
    std::fflush(stderr);
    t0_ = Clock::now();
  }
  void end() {
    const double s = std::chrono::duration<double>(Clock::now() - t0_).count();
    times_.emplace_back(name_, s);
    fmt::print(stderr, "forge verify: {}: done in {:.1f} s\n", name_, s);
    std::fflush(stderr);
  }
  const std::vector<std::pair<std::string, double>>& times() const { return times_; }

 private:
  std::string name_;
  Clock::time_point t0_;
  std::vector<std::pair<std::string, double>> times_;
};

bool has_reference(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "reference/forge_ref/train.py", ec);
}

}  // namespace

fs::path find_reference_checkout(const std::string& source_dir) {
  if (!source_dir.empty()) {
    if (!has_reference(source_dir))
      fail("--source-dir {}: no reference/forge_ref/train.py there", source_dir);
    return fs::absolute(source_dir);
  }
  if (const char* env = std::getenv("FORGE_SOURCE_DIR"); env && *env) {
    if (!has_reference(env))
      fail("FORGE_SOURCE_DIR={}: no reference/forge_ref/train.py there", env);
    return fs::absolute(env);
  }
  for (fs::path start : {fs::path(self_executable()).parent_path(), fs::current_path()}) {
    for (fs::path p = start;; p = p.parent_path()) {
      if (has_reference(p)) return p;
      if (p == p.root_path() || p.empty()) break;
    }
  }
  return {};
}

namespace {

fs::path find_source_dir(const VerifyOptions& o) {
  const fs::path dir = find_reference_checkout(o.source_dir);
  if (dir.empty())
    fail(
        "cannot find the PyTorch reference (reference/forge_ref/train.py) above {} or {}; pass "
        "--source-dir",
        fs::path(self_executable()).parent_path().string(), fs::current_path().string());
  return dir;
}

std::string last_nonempty_line(const std::string& path) {
  std::istringstream in(tail_lines(path, 20));
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

std::string read_file_or_empty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Runner {
  fs::path out, logs;
  std::map<std::string, std::string> env;  // thread pinning, for every child
  std::vector<std::string> unset_env;
  std::string commands;  // what ran, replayable, for OUT/commands.sh
  std::string self;      // this binary's path: the engine
  Phases phases;

  // The argv as commands.sh replays it: the reports go to report.replay.md and the like, so
  // that a replay leaves this run's own reports (with their Run section) as they are.
  std::vector<std::string> for_replay(std::vector<std::string> argv) const {
    for (std::string& a : argv) {
      const fs::path p(a);
      if (p.parent_path() != out) continue;
      const std::string stem = p.stem().string(), ext = p.extension().string();
      const bool report =
          stem == "report" || stem == "calibration" || stem == "dp-vs-single" || stem == "loss";
      if (report && (ext == ".md" || ext == ".json" || ext == ".png"))
        a = (out / (stem + ".replay" + ext)).string();
    }
    return argv;
  }

  // Runs one side; a failure shows the end of its log and names the log. Exit statuses up to
  // `ok_up_to` count as success (the comparer exits 1 for a gate below its rung).
  void run(const std::string& phase, const std::string& log_name, std::vector<std::string> argv,
           const std::map<std::string, std::string>& extra_env = {}, int ok_up_to = 0) {
    Command c;
    c.argv = std::move(argv);
    if (c.argv[0] == self) c.exec_path = kSelfExe;
    c.env = env;
    for (const auto& [k, v] : extra_env) c.env[k] = v;
    c.unset_env = unset_env;
    c.stdout_path = c.stderr_path = (logs / log_name).string();
    std::string prefix;
    for (const auto& [k, v] : c.env) prefix += k + "=" + shell_join({v}) + " ";
    // commands.sh stops at the first command that fails (set -e); statuses this run accepts
    // (the comparer's 1, a gate below its rung) go on there too.
    commands += "# " + phase + "\n" + prefix + shell_join(for_replay(c.argv)) +
                (ok_up_to > 0 ? fmt::format(" || [ $? -le {} ]", ok_up_to) : "") + "\n";
    phases.begin(phase);
    const int rc = run_command(c);
    if (rc < 0 || rc > ok_up_to) {
      fmt::print(stderr, "{}", tail_lines(c.stdout_path, 15));
      fail("{} failed (exit status {}): {} (full output in {})", phase, rc,
           last_nonempty_line(c.stdout_path), c.stdout_path);
    }
    phases.end();
  }
};

// A Python that must import `modules`; the gate cannot run without it, and says so in one line.
std::string probe_python(const std::string& python, const std::string& modules,
                         const std::string& role, const fs::path& logs) {
  std::error_code ec;
  if (!fs::exists(python, ec))
    fail("{} {} not found: the gate cannot run without it{}", role, python,
         python.find(".venv") != std::string::npos ? " (make setup creates .venv)" : "");
  Command c;
  c.argv = {
      python, "-c",
      "import sys; import " + modules + "; import torch as _t; sys.stdout.write(_t.__version__)"};
  if (modules.find("torch") == std::string::npos)
    c.argv = {python, "-c", "import sys; import " + modules + "; sys.stdout.write('ok')"};
  const std::string base = (logs / ("probe-" + fs::path(python).filename().string())).string();
  c.stdout_path = base + ".out";
  c.stderr_path = base + ".err";
  const int rc = run_command(c);
  if (rc != 0)
    fail("{} {} cannot import {} ({}): the gate cannot run", role, python, modules,
         last_nonempty_line(c.stderr_path));
  const std::string said = read_file_or_empty(c.stdout_path);
  if (said.empty())  // not a Python at all (it ignored -c and exited 0)
    fail("{} {} printed nothing when asked to import {}: the gate cannot run", role, python,
         modules);
  return said;
}

// The split run's two dumps (steps 1..k and k+1..N) seen as one dump, for the comparer.
// merge_dumps in Python, for commands.sh (argv: A B OUT); copies rather than hard-links.
constexpr const char* kMergeDumpsPython =
    "import json, os, shutil, sys\n"
    "a, b, out = sys.argv[1:]\n"
    "os.makedirs(out, exist_ok=True)\n"
    "steps, files = [], {}\n"
    "for d in (a, b):\n"
    "    idx = json.load(open(os.path.join(d, 'index.json')))\n"
    "    for s in idx['steps']:\n"
    "        name = idx['files'][str(s)]\n"
    "        shutil.copyfile(os.path.join(d, name), os.path.join(out, name))\n"
    "        steps.append(s)\n"
    "        files[str(s)] = name\n"
    "index = {'format': 'forge-dump', 'version': 1, 'source': 'forge', 'level': 1,\n"
    "         'steps': steps, 'files': files}\n"
    "json.dump(index, open(os.path.join(out, 'index.json'), 'w'), indent=1)\n";

void merge_dumps(const fs::path& a, const fs::path& b, const fs::path& out) {
  fs::create_directories(out);
  nlohmann::json steps = nlohmann::json::array(), files = nlohmann::json::object();
  for (const fs::path& d : {a, b}) {
    const std::string ipath = (d / "index.json").string();
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(read_text_file(ipath));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: malformed dump index: {}", ipath, e.what());
    }
    if (!idx.contains("steps") || !idx.contains("files"))
      fail("{}: fields 'steps' and 'files' are required", ipath);
    for (const auto& s : idx["steps"]) {
      const std::string key = std::to_string(s.get<int64_t>());
      if (!idx["files"].contains(key))
        fail("{}: field 'files' has no entry for step {}", ipath, key);
      const std::string name = idx["files"][key].get<std::string>();
      std::error_code ec;
      fs::remove(out / name);
      fs::create_hard_link(d / name, out / name, ec);
      if (ec) fs::copy_file(d / name, out / name, fs::copy_options::overwrite_existing);
      steps.push_back(s);
      files[key] = name;
    }
  }
  nlohmann::json index = {{"format", "forge-dump"}, {"version", 1},
                          {"source", "forge"},      {"level", 1},
                          {"steps", steps},         {"files", files}};
  write_text_atomic((out / "index.json").string(), index.dump(1) + "\n");
}

std::string fmt_seconds(double s) { return fmt::format("{:.1f} s", s); }

// A comparer report (report.json / calibration.json), parsed.
nlohmann::json read_report(const std::string& path) {
  try {
    return nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed comparer report: {}", path, e.what());
  }
}

// The tensors of a comparer report below `required`, as "name (step s)" -> rel_l2.
std::map<std::string, double> failing_tensors(const nlohmann::json& report,
                                              const std::string& required,
                                              const std::string& path) {
  // The rungs from lowest to highest, as forge_ref/compare.py orders them (RUNGS).
  static const std::map<std::string, int> rank = {
      {"NONE", 0}, {"CONVERGENT", 1}, {"TOLERANCE", 2}, {"BITWISE", 3}};
  std::map<std::string, double> failing;
  try {
    for (const auto& t : report.at("tensors")) {
      const auto r = rank.find(t.at("rung").get<std::string>());
      if (r != rank.end() && r->second >= rank.at(required)) continue;
      const double rel = t.at("rel_l2").is_number() ? t.at("rel_l2").get<double>() : -1.0;
      failing[fmt::format("{} (step {})", t.at("name").get<std::string>(),
                          t.at("step").get<int>())] = rel;
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed comparer report: {}", path, e.what());
  }
  return failing;
}

// The report's calibration section: the second PyTorch against the reference (its comparer
// report at cal_json, held to `required` like the engine's), and which of the engine's
// failures (engine_report, read from engine_json) PyTorch shares.
struct Calibration {
  std::string md;          // the section of report.md
  nlohmann::json summary;  // report.json's "calibration"
};
Calibration calibration_section(const nlohmann::json& engine_report, const std::string& engine_json,
                                const std::string& cal_json, const std::string& required,
                                const std::string& desc, const std::string& cal_md) {
  const nlohmann::json cal_report = read_report(cal_json);
  std::string verdict;
  try {
    verdict = cal_report.at("verdict").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed comparer report: {}", cal_json, e.what());
  }
  const auto engine = failing_tensors(engine_report, required, engine_json);
  const auto cal = failing_tensors(cal_report, required, cal_json);
  const auto rel = [](double v) { return v < 0 ? std::string("-") : fmt::format("{:.3e}", v); };
  Calibration out;
  out.summary = {{"second_pytorch", desc},
                 {"verdict", verdict},
                 {"report", cal_json},
                 {"failing", cal.size()},
                 {"engine_failing", engine.size()},
                 {"shared", 0}};
  std::string& md = out.md;
  md = "\n## Calibration: PyTorch against itself\n\n";
  md += fmt::format(
      "A second PyTorch, {}, trained from the same initial state and was compared "
      "with the reference under the same gate and bounds: **{}**, {} tensor(s) "
      "below {} (`{}`). The gate's verdict is the engine's alone; this tells a "
      "failure PyTorch shares with itself from one it does not.\n\n",
      desc, verdict, cal.size(), required, cal_md);
  if (engine.empty()) {
    md += "The engine has no failing tensor.\n";
    return out;
  }
  size_t shared = 0;
  std::string rows;
  for (const auto& [name, e] : engine) {
    const auto c = cal.find(name);
    shared += c != cal.end();
    rows += fmt::format("| `{}` | {} | {} |\n", name, rel(e),
                        c != cal.end() ? rel(c->second) : std::string("passes"));
  }
  out.summary["shared"] = shared;
  md += fmt::format("Of the engine's {} failing tensor(s), {} fail(s) in the calibration too:\n\n",
                    engine.size(), shared);
  md += "| tensor | engine rel_l2 | second PyTorch rel_l2 |\n| --- | ---: | ---: |\n" + rows;
  return out;
}

}  // namespace

// A program on PATH, as a path the process runner can exec directly.
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && fs::exists(fs::path(dir) / program))
      return (fs::path(dir) / program).string();
  fail("{} is not on PATH (Debian: apt-get install openmpi-bin); the dp gate cannot run", program);
}

int run_verify(const VerifyOptions& o) {
  const auto t_start = Clock::now();
  const std::string& gate = o.gate;
  const std::string& profile = o.profile;
  if (gate != "alignment" && gate != "multistep" && gate != "resume" && gate != "long-horizon" &&
      gate != "dp" && gate != "perf")
    fail("--gate: expected alignment | multistep | resume | long-horizon | dp | perf, got '{}'",
         gate);
  // perf is long-horizon plus throughput: the same two training runs, also timed.
  const bool long_run = gate == "long-horizon" || gate == "perf";
  if (profile != "fast" && profile != "torch-cpu" && profile != "bf16")
    fail("--profile: expected fast | torch-cpu | bf16, got '{}'", profile);
  const std::string required = required_rung(gate, profile);
  // Whether the profile's products are bf16: its PyTorch peers then run under CPU bf16
  // autocast (the calibration and perf's reference), asked of the profile, as bench does.
  const bool bf16_products = std::string(make_numerics(profile)->matmul_dtype()) == "bf16";
  if (o.calibrate &&
      ((gate != "alignment" && gate != "multistep" && gate != "dp") || profile == "torch-cpu"))
    fail(
        "--calibrate: expected the alignment, multistep or dp gate of fast or bf16, got {} of {}{}",
        gate, profile,
        profile == "torch-cpu" ? " (torch-cpu is held to BITWISE against PyTorch 1.13 itself)"
                               : "");
  if (!o.calibration_python.empty() && !(o.calibrate && profile == "fast"))
    fail("--calibration-python: only with --calibrate under the fast profile");

  // The config is validated by the engine's own reader before anything runs.
  const Config cfg = load_config(o.config);
  nlohmann::json cj;
  try {
    cj = nlohmann::json::parse(read_text_file(o.config));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", o.config, e.what());
  }
  const int steps = o.steps > 0 ? o.steps : default_steps(gate, cfg.train.steps);
  if (long_run && steps < 200)
    fail(
        "{} is {}; the {} gate needs at least 200 steps (CONVERGENT averages "
        "|loss-ref|/ref over steps 101..200)",
        o.steps > 0 ? std::string("--steps") : o.config + ": field 'train.steps'", steps, gate);
  if (long_run && (cfg.data.val.empty() || cfg.train.eval_batches <= 0))
    fail(
        "{}: fields 'data.val' and 'train.eval_batches': the {} gate compares final "
        "validation losses, so it needs a validation shard and eval_batches > 0",
        o.config, gate);
  if (gate == "resume" && steps < 2)
    fail("--steps: the resume gate needs at least 2 steps, got {}", steps);
  if (gate == "multistep" && steps < 2)
    fail(
        "--steps: the multistep gate compares several steps (activations at the first and the "
        "last), so it needs at least 2, got {}",
        steps);
  // The shards both sides read, checked as forge train checks them, before the reference
  // draws anything: a missing shard is named with the user's config, once.
  open_config_shard(cfg, "data.train");
  if (!cfg.data.val.empty() && cfg.train.eval_batches > 0) open_config_shard(cfg, "data.val");
  int threads = o.threads >= 0 ? o.threads : cfg.train.threads;
  // Pinned even when the config says "all cores": the reference's reduction order depends on it.
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const fs::path src = find_source_dir(o);
  const std::string working_dir = fs::current_path().string();  // for commands.sh's cd
  Runner r;
  r.self = self_executable();
  r.out =
      fs::absolute(o.out_dir.empty() ? fmt::format("runs/verify/{}-{}", gate, profile) : o.out_dir);
  r.logs = r.out / "logs";
  const OutputFolder made(r.out.string());  // removed again, if it was made, when set-up fails
  // A refusal before the first run (an interpreter that cannot run the gate) takes back what
  // this command wrote into --out, so that no half-made report folder is left.
  struct SetUp {
    fs::path out;
    bool done = false;
    ~SetUp() {
      if (done || std::uncaught_exceptions() == 0) return;
      std::error_code ec;
      fs::remove_all(out / "logs", ec);
      fs::remove(out / "config.json", ec);
    }
  } set_up{r.out};
  // Only what this command writes is cleared: --out may name a folder holding other things.
  for (const char* p : {"logs",
                        "engine",
                        "engine-dump",
                        "ref-dump",
                        "straight",
                        "straight-dump",
                        "split",
                        "split-dump-1",
                        "split-dump-2",
                        "split-dump",
                        "init.safetensors",
                        "reference.jsonl",
                        "reference-val.json",
                        "report.md",
                        "report.json",
                        "loss.png",
                        "config.json",
                        "commands.sh",
                        "config-dp.json",
                        "single",
                        "single-dump",
                        "dp",
                        "dp-dump",
                        "dp-vs-single.md",
                        "dp-vs-single.json",
                        "calibration-dump",
                        "calibration.jsonl",
                        "calibration.md",
                        "calibration.json",
                        "report.replay.md",
                        "report.replay.json",
                        "loss.replay.png",
                        "dp-vs-single.replay.md",
                        "dp-vs-single.replay.json",
                        "calibration.replay.md",
                        "calibration.replay.json"})
    fs::remove_all(r.out / p);
  ensure_writable_dir(r.logs.string());

  const std::string nthreads = std::to_string(threads);
  r.env = {{"OMP_NUM_THREADS", nthreads},
           {"OPENBLAS_NUM_THREADS", nthreads},
           {"MKL_NUM_THREADS", nthreads}};
  // The switches that choose the engine's kernels (README, environment switches) and
  // oneDNN's: inherited by every child anyway; named here so that commands.sh replays them.
  std::string kernel_env;
  for (const char* name :
       {"FORGE_CPU_ISA", "FORGE_BF16_NATIVE", "FORGE_HUGE_PAGES", "FORGE_FLUSH_SUBNORMALS",
        "FORGE_BF16_AMX", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"})
    if (const char* v = std::getenv(name); v && *v) {
      r.env[name] = v;
      kernel_env += fmt::format("{}{}={}", kernel_env.empty() ? "" : ", ", name, v);
    }
  std::string aten;
  if (const char* v = std::getenv("ATEN_CPU_CAPABILITY"); v && *v) {
    r.env["ATEN_CPU_CAPABILITY"] = v;  // inherited anyway; named so that commands.sh replays it
    aten = std::string(v) + " (from the environment)";
  } else if (profile == "torch-cpu") {
    // The bit-for-bit profile replicates torch's AVX2 kernels; pin the dispatch to them.
    r.env["ATEN_CPU_CAPABILITY"] = "avx2";
    aten = "avx2 (set by forge verify for torch-cpu)";
  } else {
    aten = "unset (torch's own choice)";
  }

  // Both sides read this one file: the pinned thread count and the profile are in it.
  cj["train"]["threads"] = threads;
  cj["numerics"] = profile;
  const std::string config = (r.out / "config.json").string();
  write_text_atomic(config, cj.dump(1) + "\n");

  const bool vs_reference = gate != "resume";
  const std::string ref_python =
      !o.python.empty() ? o.python
                        : (profile == "torch-cpu" ? std::string("/usr/bin/python3")
                                                  : (src / ".venv/bin/python").string());
  // The comparer needs numpy and matplotlib, which the project's .venv has.
  const std::string cmp_python = (src / ".venv/bin/python").string();
  std::string torch_version = "-";
  if (vs_reference)
    torch_version = probe_python(ref_python, "torch", "reference interpreter", r.logs);
  probe_python(cmp_python, "numpy, matplotlib", "comparer interpreter", r.logs);
  // --calibrate's second PyTorch, probed before anything runs.
  std::string calibration_python, calibration_desc;
  if (o.calibrate && bf16_products) {
    calibration_python = ref_python;
    calibration_desc =
        fmt::format("PyTorch {} under CPU bf16 autocast (`{}`)", torch_version, ref_python);
  } else if (o.calibrate) {
    calibration_python =
        o.calibration_python.empty() ? std::string("/usr/bin/python3") : o.calibration_python;
    calibration_desc =
        fmt::format("PyTorch {} in fp32 (`{}`)",
                    probe_python(calibration_python, "torch", "calibration interpreter", r.logs),
                    calibration_python);
  }
  set_up.done = true;  // what follows runs the gate; its logs stay for a failure to point at

  const std::string self = self_executable();
  std::string pythonpath = (src / "reference").string();
  if (const char* v = std::getenv("PYTHONPATH"); v && *v) pythonpath += std::string(":") + v;
  // Several checkouts may share the reference sources: no bytecode written into them.
  const std::map<std::string, std::string> py_env = {{"PYTHONPATH", pythonpath},
                                                     {"PYTHONDONTWRITEBYTECODE", "1"}};
  const std::string S = std::to_string(steps);
  const std::string init = (r.out / "init.safetensors").string();
  const auto out = [&](const char* p) { return (r.out / p).string(); };
  std::vector<std::string> engine_base = {self,    "train",   "--config", config,   "--numerics",
                                          profile, "--steps", S,          "--quiet"};
  const auto with = [](std::vector<std::string> a, std::initializer_list<std::string> more) {
    a.insert(a.end(), more);
    return a;
  };

  // A PyTorch run from the initial state with dumps (`dump_args`): the reference, and under
  // --calibrate a second one, run by calibrate().
  const auto pytorch_run = [&](const std::string& python, const char* dump, const char* log,
                               std::vector<std::string> dump_args, const std::string& threads) {
    std::vector<std::string> argv = {python,   "-m", "forge_ref.train", "--config", config,
                                     "--init", init, "--steps",         S,          "--dump",
                                     out(dump)};
    argv.insert(argv.end(), dump_args.begin(), dump_args.end());
    return with(argv, {"--threads", threads, "--log-out", out(log)});
  };
  // The second PyTorch, from the same initial state: another version's fp32 kernels for
  // fast, PyTorch's own CPU bf16 autocast for bf16.
  const auto calibrate = [&](std::vector<std::string> dump_args, const std::string& threads) {
    auto cal = pytorch_run(calibration_python, "calibration-dump", "calibration.jsonl",
                           std::move(dump_args), threads);
    if (bf16_products) cal = with(cal, {"--autocast", "bf16"});
    r.run(fmt::format("second PyTorch trains {} step(s) with dumps (calibration)", steps),
          "calibration.log", cal, py_env);
  };

  std::string engine_side, ref_side, dump_desc;
  std::vector<std::string> compare_extra;
  if (gate == "alignment" || gate == "multistep") {
    const std::string act_steps = steps > 1 ? fmt::format("1,{}", steps) : "1";
    dump_desc = fmt::format("level 1 at every step, level 2 (activations) at steps {}", act_steps);
    r.run("reference draws the initial state", "init.log",
          {ref_python, "-m", "forge_ref.train", "--config", config, "--init-out", init}, py_env);
    r.run(
        fmt::format("engine trains {} step(s) with dumps", steps), "engine.log",
        with(engine_base, {"--init", init, "--out-dir", out("engine"), "--dump", out("engine-dump"),
                           "--dump-level", "2", "--dump-act-steps", act_steps}));
    const std::vector<std::string> level2 = {"--dump-level", "2", "--dump-act-steps", act_steps};
    r.run(fmt::format("reference trains {} step(s) with dumps", steps), "reference.log",
          pytorch_run(ref_python, "ref-dump", "reference.jsonl", level2, nthreads), py_env);
    engine_side = out("engine-dump");
    ref_side = out("ref-dump");
    if (gate == "multistep") compare_extra = {"--plot", out("loss.png")};
    if (o.calibrate) calibrate(level2, nthreads);
  } else if (gate == "resume") {
    const int half = steps / 2;
    dump_desc = fmt::format("level 1 at every step; split at step {}", half);
    r.run(fmt::format("engine trains {} steps straight", steps), "straight.log",
          with(engine_base, {"--out-dir", out("straight"), "--dump", out("straight-dump"),
                             "--dump-level", "1"}));
    r.run(fmt::format("engine trains steps 1..{} and checkpoints", half), "split-1.log",
          with(engine_base, {"--out-dir", out("split"), "--stop-after", std::to_string(half),
                             "--dump", out("split-dump-1"), "--dump-level", "1"}));
    const std::string ckpt =
        (r.out / "split/checkpoints" / fmt::format("step_{:06d}", half)).string();
    if (!fs::is_directory(ckpt))
      fail("{}: the split run left no checkpoint at step {}", ckpt, half);
    r.run(fmt::format("a new engine process resumes and trains steps {}..{}", half + 1, steps),
          "split-2.log",
          with(engine_base, {"--out-dir", out("split"), "--resume", ckpt, "--dump",
                             out("split-dump-2"), "--dump-level", "1"}));
    merge_dumps(out("split-dump-1"), out("split-dump-2"), out("split-dump"));
    // The same merge in commands.sh, which has no forge command for it.
    r.commands += "# the split run's two dumps as one\n" +
                  shell_join({cmp_python, "-c", kMergeDumpsPython, out("split-dump-1"),
                              out("split-dump-2"), out("split-dump")}) +
                  "\n";
    // The resumed run is held against the straight one, which plays the reference's part.
    engine_side = out("split-dump");
    ref_side = out("straight-dump");
  } else if (gate == "dp") {
    // EQUIVALENCE.md's dp gate: `mpirun -np 2` (A accumulation steps per rank) against the
    // engine's single process with 2A accumulation steps (BITWISE: the ranks' gradients are
    // summed in rank order, which is the single process's micro-step order), then against
    // the reference trained on the same global batch (the profile's rung).
    const int accum = cfg.train.grad_accum_steps;
    nlohmann::json dj = cj;
    dj["train"]["threads"] = 1;  // one thread per rank; the single process uses the same
    nlohmann::json sj = dj;
    sj["train"]["grad_accum_steps"] = 2 * accum;
    write_text_atomic(config, sj.dump(1) + "\n");  // the single process and the reference
    const std::string config_dp = out("config-dp.json");
    write_text_atomic(config_dp, dj.dump(1) + "\n");
    r.env["OMP_NUM_THREADS"] = r.env["OPENBLAS_NUM_THREADS"] = r.env["MKL_NUM_THREADS"] = "1";
    dump_desc = fmt::format("level 1 at every step; 2 ranks x {} accumulation vs 1 process x {}",
                            accum, 2 * accum);
    r.run("reference draws the initial state", "init.log",
          {ref_python, "-m", "forge_ref.train", "--config", config, "--init-out", init}, py_env);
    r.run(fmt::format("engine, one process, {} step(s)", steps), "single.log",
          {self, "train", "--config", config, "--numerics", profile, "--steps", S, "--quiet",
           "--init", init, "--out-dir", out("single"), "--dump", out("single-dump"), "--dump-level",
           "1"});
    r.run(fmt::format("engine, mpirun -np 2, {} step(s)", steps), "dp.log",
          {find_on_path("mpirun"),
           "--allow-run-as-root",
           "--oversubscribe",
           "--mca",
           "btl",
           "self,vader,tcp",
           "--mca",
           "btl_tcp_if_include",
           "lo",
           "--mca",
           "btl_vader_single_copy_mechanism",
           "none",
           "-x",
           "OMP_NUM_THREADS",
           "-x",
           "OPENBLAS_NUM_THREADS",
           "-np",
           "2",
           self,
           "train",
           "--config",
           config_dp,
           "--numerics",
           profile,
           "--steps",
           S,
           "--quiet",
           "--init",
           init,
           "--out-dir",
           out("dp"),
           "--dump",
           out("dp-dump"),
           "--dump-level",
           "1"});
    r.run("2 ranks against one process (BITWISE)", "dp-vs-single.log",
          {cmp_python, "-m", "forge_ref.compare", out("dp-dump"), out("single-dump"), "--gate",
           "dp", "--profile", profile, "--required", "BITWISE", "--md", out("dp-vs-single.md"),
           "--json", out("dp-vs-single.json")},
          py_env);
    // The reference on the single process's config (the same global batch in the same
    // micro-batches), one thread.
    r.run(fmt::format("reference trains {} step(s) with dumps", steps), "reference.log",
          pytorch_run(ref_python, "ref-dump", "reference.jsonl", {"--dump-level", "1"}, "1"),
          py_env);
    if (o.calibrate) calibrate({"--dump-level", "1"}, "1");
    engine_side = out("dp-dump");
    ref_side = out("ref-dump");
  } else {  // long-horizon or perf
    const bool bitwise = profile == "torch-cpu" && gate == "long-horizon";
    const bool perf = gate == "perf";
    dump_desc = bitwise ? "level 1 at every step (BITWISE needs every tensor)"
                : perf  ? "none (loss curves, final validation losses and step times decide)"
                        : "none (the loss curves and final validation losses decide)";
    r.run("reference draws the initial state", "init.log",
          {ref_python, "-m", "forge_ref.train", "--config", config, "--init-out", init}, py_env);
    auto eng = with(engine_base, {"--init", init, "--out-dir", out("engine")});
    std::vector<std::string> ref = {ref_python,
                                    "-m",
                                    "forge_ref.train",
                                    "--config",
                                    config,
                                    "--init",
                                    init,
                                    "--steps",
                                    S,
                                    "--threads",
                                    nthreads,
                                    "--log-out",
                                    out("reference.jsonl"),
                                    "--val-out",
                                    out("reference-val.json")};
    if (bitwise) {
      eng = with(eng, {"--dump", out("engine-dump"), "--dump-level", "1"});
      ref = with(ref, {"--dump", out("ref-dump"), "--dump-level", "1"});
    }
    auto ref_env = py_env;
    if (perf) {
      // The peer is PyTorch at its best (BENCHMARKS.md): glibc malloc tuned so that large
      // activations are not returned to the kernel every step; for bf16, CPU autocast.
      ref_env.insert(torch_malloc_tuning().begin(), torch_malloc_tuning().end());
      if (bf16_products) ref = with(ref, {"--autocast", "bf16"});
    }
    r.run(fmt::format("engine trains {} steps", steps), "engine.log", eng);
    r.run(fmt::format("reference trains {} steps", steps), "reference.log", ref, ref_env);
    engine_side = bitwise ? out("engine-dump") : (r.out / "engine/metrics.jsonl").string();
    ref_side = bitwise ? out("ref-dump") : out("reference.jsonl");
    compare_extra = {"--engine-val", (r.out / "engine/metrics.jsonl").string(),
                     "--ref-val",    out("reference-val.json"),
                     "--plot",       out("loss.png")};
    if (bitwise)
      compare_extra =
          with(compare_extra, {"--engine-log", (r.out / "engine/metrics.jsonl").string(),
                               "--ref-log", out("reference.jsonl")});
  }

  // Non-bitwise profiles: the key third of c_attn.bias has an exactly zero true gradient, so
  // its updates are Adam-normalised rounding noise (see forge_ref.compare); still reported.
  const bool exempt_k_bias = profile != "torch-cpu" && gate != "resume" && gate != "perf";
  // The comparer on `side` against ref_side, under the gate's bounds.
  const auto compare = [&](const std::string& side, const char* md, const char* json) {
    std::vector<std::string> argv = {
        cmp_python,  "-m",    "forge_ref.compare", side,     ref_side, "--gate", gate,
        "--profile", profile, "--required",        required, "--md",   out(md),  "--json",
        out(json)};
    if (exempt_k_bias) argv.push_back("--exempt-k-bias");
    return argv;
  };
  std::vector<std::string> cmp = compare(engine_side, "report.md", "report.json");
  cmp.insert(cmp.end(), compare_extra.begin(), compare_extra.end());
  Command c;
  c.argv = cmp;
  c.env = py_env;
  c.stdout_path = (r.logs / "compare.out").string();
  c.stderr_path = (r.logs / "compare.err").string();
  // The script's status is the comparer's verdict (0: the rung reached, 1: not); any other
  // status is the comparer's own failure and ends the script at once.
  r.commands += "# compare\nverdict=0\n" + shell_join({"PYTHONPATH=" + pythonpath}) + " " +
                shell_join(r.for_replay(cmp)) +
                " || verdict=$?\n[ $verdict -le 1 ] || exit $verdict\n";
  r.phases.begin("comparing");
  const int rc = run_command(c);
  if (rc != 0 && rc != 1) {
    fmt::print(stderr, "{}", tail_lines(c.stderr_path, 15));
    fail("the comparer failed (exit status {}): {}", rc, last_nonempty_line(c.stderr_path));
  }
  r.phases.end();
  const nlohmann::json report = read_report(out("report.json"));
  Calibration calibration;
  if (o.calibrate) {
    r.run("comparing the second PyTorch with the reference (calibration)",
          "calibration-compare.log",
          compare(out("calibration-dump"), "calibration.md", "calibration.json"), py_env,
          /*ok_up_to=*/1);
    calibration = calibration_section(report, out("report.json"), out("calibration.json"), required,
                                      calibration_desc, out("calibration.md"));
  }
  write_text_atomic(
      out("commands.sh"),
      "#!/bin/sh\n# what forge verify ran, in order, from the folder it ran in (the "
      "config's relative paths are read from there); stops at the first command "
      "that fails and exits with the gate's verdict (0: its rung reached); its reports "
      "are report.replay.md and the like, beside this run's\nset -e\n" +
          shell_join({"cd", working_dir}) + "\n" + r.commands + "exit $verdict\n");

  // The comparer's last line is the verdict; everything before it is the worst tensor.
  const std::string cmp_out = read_file_or_empty(c.stdout_path);
  const std::string verdict_line = last_nonempty_line(c.stdout_path);
  const std::string prefix = fmt::format("gate {} profile {}: ", gate, profile);
  if (verdict_line.rfind(prefix, 0) != 0)
    fail("{}: the comparer's last line is '{}', expected '{}RUNG'", c.stdout_path, verdict_line,
         prefix);
  const std::string rung = verdict_line.substr(prefix.size());

  const double total = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::string times;
  for (const auto& [name, s] : r.phases.times())
    times += fmt::format("{}{}: {}", times.empty() ? "" : "; ", name, fmt_seconds(s));
  std::string run_md = "\n## Run\n\n";
  run_md += fmt::format("- config: `{}` as `{}` (threads and numerics pinned)\n", o.config, config);
  run_md += fmt::format("- steps: {}; dumps: {}\n", steps, dump_desc);
  run_md += fmt::format(
      "- threads: {} on both sides (train.threads, OMP_NUM_THREADS, "
      "OPENBLAS_NUM_THREADS, MKL_NUM_THREADS{})\n",
      threads, vs_reference ? ", torch.set_num_threads" : "");
  run_md += fmt::format("- ATEN_CPU_CAPABILITY: {}\n", aten);
  const std::string arithmetic = make_numerics(profile)->arithmetic();
  run_md += fmt::format(
      "- engine: `{}` (numerics {}: {}; {})\n", self, profile, arithmetic,
      kernel_env.empty() ? "no kernel switch set" : kernel_env + " from the environment");
  if (vs_reference)
    run_md += fmt::format("- reference: `{}` (torch {})\n", ref_python, torch_version);
  run_md += fmt::format("- run time: {}; total {}\n", times, fmt_seconds(total));
  run_md += fmt::format("- commands: `{}`\n", out("commands.sh"));
  std::string md = read_file_or_empty(out("report.md"));
  md += calibration.md;
  md += run_md;
  write_text_atomic(out("report.md"), md);

  try {
    nlohmann::json rep = report;
    nlohmann::json phases = nlohmann::json::array();
    for (const auto& [name, s] : r.phases.times())
      phases.push_back({{"phase", name}, {"seconds", s}});
    rep["run"] = {{"config", o.config},
                  {"config_used", config},
                  {"steps", steps},
                  {"threads", threads},
                  {"aten_cpu_capability", aten},
                  {"engine", self},
                  {"engine_arithmetic", arithmetic},
                  {"kernel_switches", kernel_env},
                  {"reference_python", vs_reference ? ref_python : ""},
                  {"torch", torch_version},
                  {"phases", phases},
                  {"total_seconds", total}};
    if (o.calibrate) rep["calibration"] = calibration.summary;
    write_text_atomic(out("report.json"), rep.dump(1) + "\n");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed comparer report: {}", out("report.json"), e.what());
  }

  fmt::print("{}\n", md);
  fmt::print("report: {}, {}{}\n", out("report.md"), out("report.json"),
             fs::exists(out("loss.png")) ? ", " + out("loss.png") : std::string());
  fmt::print("{}", cmp_out);
  if (!cmp_out.empty() && cmp_out.back() != '\n') fmt::print("\n");
  std::fflush(stdout);
  return rc == 0 && !rung.empty() ? 0 : 1;
}

}  // namespace forge::verify
