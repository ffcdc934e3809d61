// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite ...`: the flags of the benchmark suites (dcp::suites), and where their
// reports and records go.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/npy.h"
#include "dcp/core/parse.h"

#include "dcp/model/cluster.h"
#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"

#include "dcp/data/length_distribution.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/program/plan_json.h"
#include "dcp/sim/cost_model.h"

#include "apps/cli/args.h"
#include "apps/cli/command_table.h"
#include "apps/cli/workload_flags.h"
#include "apps/suites/balance_suite.h"
#include "apps/suites/calibration_suite.h"
#include "apps/suites/e2e_suite.h"
#include "apps/suites/kinds_suite.h"
#include "apps/suites/micro_suite.h"
#include "apps/suites/paper_suite.h"
#include "apps/suites/planning_suite.h"
#include "apps/suites/pool_suite.h"
#include "apps/suites/reports.h"

namespace dcp::cli {
namespace {

std::vector<MaskSpec> masks_from(
    const Args& args,
    std::string_view fallback = "causal,lambda,shared_question,causal_blockwise") {
  return list_flag<MaskSpec>(args, "--masks", fallback, [](std::string_view name) {
    if (name.find(':') != std::string_view::npos) {
      throw InvalidInput("give mask kinds only (" + dcp::quoted(name) +
                         "); they take the paper's parameters");
    }
    return parse_mask_spec(name);
  });
}

std::vector<double> scales_from(const Args& args) {
  return list_flag<double>(args, "--scales", "0.5,1,2,4", [](std::string_view s) {
    const double scale = parse_double(s, "scale");
    if (!(scale > 0 && scale <= 64)) throw InvalidInput("scale must be in (0, 64]");
    return scale;
  });
}

ClusterSpec cluster_from(const Args& args, std::string_view fallback) {
  const std::string name = args.get_or("--cluster", fallback);
  return with_flag("--cluster " + dcp::quoted(name), [&] { return resolve_cluster(name); });
}

std::string command_line(std::span<const std::string> argv) {
  std::string line = "dcp bench";
  for (const std::string& arg : argv) line += " " + arg;
  return line;
}

// Reports go only where --out-dir says: a run without it writes none (the repository's own reports
// are regenerated with --out-dir docs, as docs/benchmarks.md gives the commands).
void write_report(const Args& args, const std::string& name, const std::string& text,
                  std::ostream& out) {
  const auto dir = args.get("--out-dir");
  if (!dir || dir->empty()) return;
  const std::string path = with_flag("--out-dir " + dcp::quoted(*dir),
                                     [&] { return suites::write_report(*dir, name, text); });
  out << "wrote " << path << "\n";
}

// A suite's report: its markdown written under --out-dir as `name` (write_report) and printed.
int publish(const Args& args, const std::string& name, const std::string& markdown,
            std::ostream& out) {
  write_report(args, name, markdown, out);
  out << markdown;
  return 0;
}

// Creates the folders --out-dir and --json write into before a suite runs, so that a run of
// minutes does not end at a folder that is not there; one that cannot be made is an error naming
// its flag, before anything runs.
void prepare_outputs(const Args& args) {
  if (const auto json = args.get("--json")) {
    with_flag("--json " + dcp::quoted(*json),
              [&] { suites::create_folder(std::filesystem::path(*json).parent_path()); });
  }
  if (const auto dir = args.get("--out-dir")) {
    with_flag("--out-dir " + dcp::quoted(*dir), [&] { suites::create_folder(*dir); });
  }
}

// --threads, by default every hardware thread.
int threads_from(const Args& args) {
  const auto hardware =
      static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(args.get_int("--threads", hardware, 1, 256));
}

// What the suites that sample batches share: batches, --tokens, --cluster (a100-p4de), the
// attention shape's flags and the seed.
template <typename Options>
void set_batch_flags(Options& options, const Args& args, std::int32_t batches, std::uint64_t seed) {
  options.batches = batches;
  options.tokens = args.get_int("--tokens", 131072, 1, 1 << 24);
  options.cluster = cluster_from(args, "a100-p4de");
  options.shape = shape_from_flags(args);
  options.seed = seed;
}

// --json FILE, if given: the suite's records, written atomically.
template <typename Records>
void write_json(const Args& args, Records records, std::ostream& out) {
  const auto json = args.get("--json");
  if (!json) return;
  with_flag("--json " + dcp::quoted(*json), [&] { write_file_atomically(*json, records()); });
  out << "wrote " << *json << "\n";
}

// dcp bench's flags; each suite reads the ones its help names and refuses those its setup fixes.
std::vector<FlagSpec> bench_flags() {
  return {
      {"--suite", "NAME",
       "micro | paper | e2e | calibration | planning | balance | kinds | pool [micro]"},
      {"--clusters", "LIST", "pool: cluster presets or files [a100-p4de,h100-dgx]"},
      {"--pools", "LIST", "pool: devices of each pool, whole nodes of 8 [16,64,256]"},
      {"--models", "LIST",
       "kinds: hybrid-attention models [gemma3-w1024,gemma3-w4096,alternating-w128]"},
      {"--batches", "N",
       "batches per configuration [3; e2e 2; planning 50 per shape, dataset and mask]"},
      {"--datasets", "LIST",
       "micro, planning, balance, kinds: length distributions [ldc,longalign]; pool: "
       "DATASET:TOKENS, the per-device token bound [megatron:2048,ldc:8192,longalign:8192]"},
      {"--dataset", "NAME", "calibration: length distribution [ldc]"},
      {"--scales", "LIST",
       "micro, planning, balance, kinds: length scales [0.5,1,2,4]; planning: batches go "
       "round-robin "
       "over them"},
      {"--shapes", "LIST", "planning: nodes x devices per node [4x8,8x8]"},
      {"--masks", "LIST",
       "mask kinds [causal,lambda,shared_question,causal_blockwise; balance: causal]"},
      {"--balances", "LIST",
       "balance: compute balances to plan at, eps of (1 + eps) x the mean, the first the "
       "reference [0.3,0.1,1,3]"},
      {"--strategies", "LIST",
       "micro [dcp,dcp-pure,ring,zigzag,ulysses,hybrid,te,loongtrain]; calibration "
       "[dcp,ring,zigzag,ulysses,hybrid,te,loongtrain]"},
      {"--static-dp", "N|auto",
       "the static strategies' data parallel degree (micro: also for dcp's static candidates); "
       "auto: per batch, the DCP paper's rule for its baselines [1]"},
      {"--tokens", "N",
       "tokens per batch [micro, paper 131072; calibration 8192]; paper: lengths scale with it; "
       "e2e: the longest max_seq_len, lengths scale with it [131072]"},
      {"--cluster", "PRESET|FILE",
       "[micro, paper a100-p4de; e2e a100-p4de at 8 x 8 GPUs; calibration cpu-local]"},
      {"--heads", "N", "q heads [8]"},
      {"--kv-heads", "N", "kv heads [2]"},
      {"--head-dim", "N", "head dimension [128]"},
      {"--dtype", "T", "bf16 | fp16 | fp32 [bf16]"},
      {"--seed", "S", "seed of the sampled batches and the planner [0]"},
      {"--threads", "N", "micro, balance: batches planned at once [hardware threads]"},
      {"--out-dir", "DIR",
       "write the Markdown report (and micro's SVG charts) into DIR [none: no report]"},
      {"--json", "FILE", "micro, paper, e2e, planning, balance: write the records as JSON"},
      {"--fit", "",
       "paper: fit the cluster's constants no datasheet fixes to the paper's fitted cells, print "
       "them as a cluster file, and report with them"},
      {"--fit-parameters", "LIST",
       "paper --fit: move only these constants, holding the rest (names as the fit prints them, "
       "e.g. sequence_overhead_us) [all]"},
      {"--help", "", "show this help"},
  };
}

constexpr std::string_view kBenchSummary =
    "micro: the DCP paper's attention micro-benchmark under the simulator: datasets x "
    "length scales x masks x strategies on 4 x 8 A100s (a100-p4de), 131072-token batches; "
    "reports micro_bench.md and two SVG charts. paper: every cell the DCP paper measured "
    "(ring, zigzag, loongtrain, te and its DCP, causal and sparse masks) next to the "
    "simulated time on a100-p4de, with the error; reports paper_bench.md. e2e: an estimate "
    "of the paper's end-to-end training iterations (GPT 8B, TP 4, 8 x 8 A100) from the "
    "simulated attention and a step model fitted to its Megatron causal cells, next to the "
    "measured times; reports e2e_estimate.md. calibration: real runs of the CPU runtime on "
    "local ranks next to the simulator's prediction under cpu-local; reports "
    "calibration.md with the error distribution. planning: the wall-clock time of "
    "planning each batch with dcp-pure and dcp on one thread, as median, p90 and max; reports "
    "planning_time.md. balance: dcp-pure's plan of each batch at several compute balances "
    "(bytes between nodes, imbalance, simulated time); reports balance_bench.md. kinds: "
    "hybrid-attention models (sliding-window and full layers) on the micro-benchmark's "
    "batches: dcp's plan of every kind on one token placement against a placement per kind "
    "re-dispatched between layers, one mask's placement for every layer and the static "
    "strategies, simulated per training step, with planning times; reports kinds_bench.md. "
    "pool: data and context parallelism over pools of 16 to 256 devices, per micro-batch: "
    "dcp over the whole pool against fixed CP groups with static strategies, Megatron-style "
    "dynamic CP and dcp inside fixed groups; reports pool_bench.md. "
    "Reports are written only into --out-dir (the repository's own: --out-dir docs). "
    "Progress goes to stderr.";

// What run_bench reads for every suite before it picks one.
struct BenchRun {
  const Args& args;
  std::span<const std::string> argv;  // the report's command line
  std::uint64_t seed = 0;             // --seed
  std::int32_t batches = 3;           // --batches, at its default for most suites
};

// A UsageError for the first of `flags` given: "<flag><why>".
void refuse_flags(const Args& args, std::initializer_list<const char*> flags,
                  std::string_view why) {
  for (const char* flag : flags) {
    if (args.has(flag)) throw UsageError(std::string(flag) + std::string(why));
  }
}

std::vector<LengthDistributionKind> datasets_from(const Args& args) {
  return list_flag<LengthDistributionKind>(args, "--datasets", "ldc,longalign",
                                           parse_length_distribution);
}

// --static-dp, if given.
template <typename Options>
void set_static_dp(Options& options, const Args& args) {
  if (const auto degree = args.get("--static-dp")) {
    options.static_data_parallel =
        with_flag("--static-dp", [&] { return parse_data_parallel(*degree); });
  }
}

int run_micro_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  if (args.has("--fit")) throw UsageError("--fit applies to --suite paper");
  suites::MicroOptions options;
  options.datasets = datasets_from(args);
  options.scales = scales_from(args);
  options.masks = masks_from(args);
  options.strategies =
      list_flag<Strategy>(args, "--strategies",
                          "dcp,dcp-pure,ring,zigzag,ulysses,hybrid,te,loongtrain", parse_strategy);
  set_static_dp(options, args);
  set_batch_flags(options, args, run.batches, run.seed);
  options.threads = threads_from(args);
  prepare_outputs(args);
  std::cerr << "dcp bench micro: "
            << options.datasets.size() * options.scales.size() * options.masks.size()
            << " configurations x " << options.batches << " batches x " << options.strategies.size()
            << " strategies on " << options.cluster.name << "\n";
  const std::vector<suites::MicroRecord> records = suites::run_micro_suite(options, std::cerr);
  const std::string markdown = suites::micro_markdown(options, records, command_line(run.argv));
  write_json(
      args, [&] { return suites::micro_records_json(records); }, out);
  write_report(args, "micro_bench.md", markdown, out);
  write_report(args, "micro_bench_forward.svg", suites::micro_svg(options, records, "forward"),
               out);
  write_report(args, "micro_bench_backward.svg", suites::micro_svg(options, records, "backward"),
               out);
  out << markdown;
  return 0;
}

// paper --fit: fits the cluster's constants to the paper's cells, prints them as a cluster file,
// and leaves them in `options` for the report.
void fit_paper(suites::PaperOptions& options, const Args& args, std::ostream& out) {
  if (args.has("--fit-parameters")) {
    options.fit_parameters = list_flag<std::string>(
        args, "--fit-parameters", "", [](std::string_view name) { return std::string(name); });
  }
  const suites::PaperFit fit = with_flag(
      "--fit-parameters", [&] { return suites::fit_paper_constants(options, std::cerr); });
  std::cerr << "fit: " << fit.evaluations << " evaluations, rms log error "
            << fit.rms_log_error_before << " -> " << fit.rms_log_error_after << "\n";
  out << to_cluster_text(fit.cluster) << "\n"
      << "# not a cluster constant (sim::zigzag_baseline_executor): the zigzag-style "
         "baselines' host time per sequence and pass\n"
      << "# sequence_overhead_us = " << fit.zigzag_baselines.sequence_overhead * 1e6 << "\n\n";
  options.cluster = fit.cluster;
  options.zigzag_baselines = fit.zigzag_baselines;
}

int run_paper_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  refuse_flags(args, {"--datasets", "--dataset", "--scales", "--masks", "--strategies"},
               " does not apply to --suite paper (its cells fix them)");
  suites::PaperOptions options;
  set_batch_flags(options, args, run.batches, run.seed);
  set_static_dp(options, args);
  options.threads = threads_from(args);
  prepare_outputs(args);
  if (args.flag("--fit")) fit_paper(options, args, out);
  std::cerr << "dcp bench paper: " << suites::paper_cells().size() << " cells, " << options.batches
            << " batches per dataset and scale, on " << options.cluster.name << "\n";
  const std::vector<suites::PaperRecord> records = suites::run_paper_suite(options, std::cerr);
  const std::string markdown = suites::paper_markdown(options, records, command_line(run.argv));
  write_json(
      args, [&] { return suites::paper_records_json(records); }, out);
  return publish(args, "paper_bench.md", markdown, out);
}

int run_e2e_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  refuse_flags(args,
               {"--datasets", "--dataset", "--scales", "--masks", "--strategies", "--static-dp",
                "--heads", "--kv-heads", "--head-dim", "--dtype", "--fit"},
               " does not apply to --suite e2e (its model fixes it)");
  suites::E2eOptions options;
  options.batches = static_cast<std::int32_t>(args.get_int("--batches", 2, 1, 10000));
  options.tokens = args.get_int("--tokens", 131072, 1024, 131072);
  const std::string cluster = args.get_or("--cluster", "a100-p4de");
  options.gpus = cluster_from(args, "a100-p4de");
  if (is_cluster_preset(cluster)) options.gpus.shape = {8, 8};  // the paper's 8 x p4d
  options.seed = run.seed;
  options.threads = threads_from(args);
  prepare_outputs(args);
  std::cerr << "dcp bench e2e: " << suites::e2e_cells().size() << " cells, " << options.batches
            << " batches per dataset and length, on " << options.gpus.name << "\n";
  const suites::E2eResult result = with_flag("--cluster " + dcp::quoted(cluster), [&] {
    return suites::run_e2e_suite(options, std::cerr);
  });
  const std::string markdown = suites::e2e_markdown(options, result, command_line(run.argv));
  write_json(
      args, [&] { return suites::e2e_records_json(result); }, out);
  return publish(args, "e2e_estimate.md", markdown, out);
}

int run_calibration_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  refuse_flags(args, {"--datasets", "--scales", "--threads", "--json", "--static-dp", "--fit"},
               " applies to --suite micro or paper");
  suites::CalibrationSuiteOptions options;
  options.masks = masks_from(args);
  options.strategies = list_flag<Strategy>(
      args, "--strategies", "dcp,ring,zigzag,ulysses,hybrid,te,loongtrain", parse_strategy);
  options.batches = run.batches;
  options.tokens = args.get_int("--tokens", 8192, 1, 1 << 24);
  const std::string dataset = args.get_or("--dataset", "ldc");
  options.dataset = with_flag("--dataset", [&] { return parse_length_distribution(dataset); });
  options.cluster = cluster_from(args, "cpu-local");
  options.shape = shape_from_flags(args);
  options.seed = run.seed;
  prepare_outputs(args);
  const std::vector<suites::CalibrationSample> samples =
      suites::run_calibration_suite(options, std::cerr);
  const std::string markdown =
      suites::calibration_markdown(options, samples, command_line(run.argv));
  return publish(args, "calibration.md", markdown, out);
}

// A compute balance of --balances: eps of (1 + eps) x the mean.
double parse_balance(std::string_view text) {
  const double eps = parse_double(text, "balance");
  if (!(eps >= 0 && eps <= 1000)) throw InvalidInput("a balance must be in [0, 1000]");
  return eps;
}

int run_balance_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  refuse_flags(args, {"--dataset", "--strategies", "--static-dp", "--fit"},
               " does not apply to --suite balance (dcp-pure)");
  suites::BalanceOptions options;
  options.datasets = datasets_from(args);
  options.scales = scales_from(args);
  options.masks = masks_from(args, "causal");
  options.balances = list_flag<double>(args, "--balances", "0.3,0.1,1,3", parse_balance);
  set_batch_flags(options, args, run.batches, run.seed);
  options.threads = threads_from(args);
  prepare_outputs(args);
  std::cerr << "dcp bench balance: " << options.datasets.size() << " datasets x "
            << options.scales.size() << " scales x " << options.masks.size() << " masks x "
            << options.batches << " batches x " << options.balances.size() << " balances on "
            << options.cluster.name << "\n";
  const std::vector<suites::BalanceSample> samples = suites::run_balance_suite(options, std::cerr);
  const std::string markdown = suites::balance_markdown(options, samples, command_line(run.argv));
  write_json(
      args, [&] { return suites::balance_samples_json(samples); }, out);
  return publish(args, "balance_bench.md", markdown, out);
}

// A cluster shape of --shapes: NODESxDEVICES.
ClusterShape parse_shape(std::string_view text) {
  const std::size_t x = text.find('x');
  if (x == std::string_view::npos) {
    throw InvalidInput("a shape is NODESxDEVICES, got " + dcp::quoted(text));
  }
  const ClusterShape shape{
      static_cast<std::int32_t>(parse_int(text.substr(0, x), "nodes")),
      static_cast<std::int32_t>(parse_int(text.substr(x + 1), "devices per node"))};
  validate(shape);
  return shape;
}

int run_planning_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  refuse_flags(args, {"--dataset", "--strategies", "--static-dp", "--fit", "--threads"},
               " does not apply to --suite planning (dcp-pure and dcp, one thread)");
  suites::PlanningOptions options;
  options.shapes = list_flag<ClusterShape>(args, "--shapes", "4x8,8x8", parse_shape);
  options.datasets = datasets_from(args);
  options.scales = scales_from(args);
  options.masks = masks_from(args);
  set_batch_flags(options, args, static_cast<std::int32_t>(args.get_int("--batches", 50, 1, 10000)),
                  run.seed);
  prepare_outputs(args);
  std::cerr << "dcp bench planning: " << options.shapes.size() << " shapes x "
            << options.datasets.size() << " datasets x " << options.masks.size() << " masks x "
            << options.batches << " batches, dcp-pure and dcp, one thread\n";
  const std::vector<suites::PlanningSample> samples =
      suites::run_planning_suite(options, std::cerr);
  const std::string markdown = suites::planning_markdown(options, samples, command_line(run.argv));
  write_json(
      args, [&] { return suites::planning_samples_json(samples); }, out);
  return publish(args, "planning_time.md", markdown, out);
}

int run_kinds_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  refuse_flags(args, {"--dataset", "--strategies", "--static-dp", "--fit", "--masks"},
               " does not apply to --suite kinds (its models fix the masks; dcp and the baselines "
               "are compared)");
  suites::KindsOptions options;
  options.datasets = datasets_from(args);
  options.scales = scales_from(args);
  const std::vector<suites::KindModel> known = suites::default_kind_models();
  options.models = list_flag<suites::KindModel>(
      args, "--models", "gemma3-w1024,gemma3-w4096,alternating-w128", [&](std::string_view n) {
        for (const suites::KindModel& model : known) {
          if (model.name == n) return model;
        }
        throw InvalidInput("no model " + dcp::quoted(n) +
                           " (gemma3-w1024, gemma3-w4096, alternating-w128)");
      });
  set_batch_flags(options, args, run.batches, run.seed);
  options.threads = threads_from(args);
  prepare_outputs(args);
  std::cerr << "dcp bench kinds: " << options.models.size() << " models x "
            << options.datasets.size() << " datasets x " << options.scales.size() << " scales x "
            << options.batches << " batches on " << options.cluster.name << "\n";
  const std::vector<suites::KindsRecord> records = suites::run_kinds_suite(options, std::cerr);
  const std::string markdown = suites::kinds_markdown(options, records, command_line(run.argv));
  write_json(
      args, [&] { return suites::kinds_records_json(records); }, out);
  return publish(args, "kinds_bench.md", markdown, out);
}

// A pool of --pools: its devices, whole nodes of 8.
std::int32_t parse_pool_devices(std::string_view text) {
  const std::int64_t n = parse_int(text, "--pools");
  if (n < 8 || n > 4096 || n % 8 != 0) {
    throw InvalidInput("--pools: " + dcp::quoted(text) +
                       " is not a whole number of 8-device nodes in [8, 4096]");
  }
  return static_cast<std::int32_t>(n);
}

// A workload of the pool suite's --datasets: DATASET:TOKENS, the per-device token bound.
suites::PoolWorkload parse_pool_workload(std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    throw InvalidInput("--datasets: " + dcp::quoted(text) +
                       " is not DATASET:TOKENS (the per-device token bound)");
  }
  suites::PoolWorkload workload;
  workload.dataset = parse_length_distribution(text.substr(0, colon));
  const std::int64_t tokens = parse_int(text.substr(colon + 1), "--datasets");
  if (tokens < 64 || tokens > (std::int64_t{1} << 24)) {
    throw InvalidInput("--datasets: the bound in " + dcp::quoted(text) +
                       " is not in [64, 16777216]");
  }
  workload.device_tokens = tokens;
  return workload;
}

int run_pool_bench(const BenchRun& run, std::ostream& out) {
  const Args& args = run.args;
  refuse_flags(args,
               {"--dataset", "--strategies", "--static-dp", "--fit", "--masks", "--scales",
                "--tokens", "--cluster", "--heads", "--kv-heads", "--head-dim", "--dtype",
                "--models", "--shapes", "--balances"},
               " does not apply to --suite pool (its model, masks and layouts are fixed; see "
               "--clusters, --pools, --datasets)");
  suites::PoolOptions options;
  options.model = suites::pool_model();
  options.clusters = list_flag<ClusterSpec>(
      args, "--clusters", "a100-p4de,h100-dgx",
      [](std::string_view name) { return resolve_cluster(std::string(name)); });
  options.pool_devices = list_flag<std::int32_t>(args, "--pools", "16,64,256", parse_pool_devices);
  options.workloads = list_flag<suites::PoolWorkload>(
      args, "--datasets", "megatron:2048,ldc:8192,longalign:8192", parse_pool_workload);
  options.batches = static_cast<std::int32_t>(args.get_int("--batches", 2, 1, 10000));
  options.seed = run.seed;
  options.threads = threads_from(args);
  prepare_outputs(args);
  std::cerr << "dcp bench pool: " << options.clusters.size() << " clusters x "
            << options.pool_devices.size() << " pools x " << options.workloads.size()
            << " workloads x " << options.batches << " micro-batches\n";
  const std::vector<suites::PoolRecord> records = suites::run_pool_suite(options, std::cerr);
  const std::string markdown = suites::pool_markdown(options, records, command_line(run.argv));
  write_json(
      args, [&] { return suites::pool_records_json(records); }, out);
  return publish(args, "pool_bench.md", markdown, out);
}

// The suites by --suite name.
constexpr std::pair<std::string_view, int (*)(const BenchRun&, std::ostream&)> kSuites[] = {
    {"micro", run_micro_bench},     {"paper", run_paper_bench},
    {"e2e", run_e2e_bench},         {"calibration", run_calibration_bench},
    {"balance", run_balance_bench}, {"planning", run_planning_bench},
    {"kinds", run_kinds_bench},     {"pool", run_pool_bench},
};

}  // namespace

int run_bench(std::span<const std::string> argv, std::ostream& out) {
  const std::vector<FlagSpec> specs = bench_flags();
  const Args args(specs, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp bench --suite micro|paper|e2e|calibration|planning|balance|kinds|pool [flags]",
        kBenchSummary, specs);
    return 0;
  }
  const std::string suite = args.get_or("--suite", "micro");
  if (args.has("--fit-parameters") && !args.flag("--fit")) {
    throw UsageError("--fit-parameters applies with --fit");
  }
  const BenchRun run{args, argv, static_cast<std::uint64_t>(args.get_int("--seed", 0, 0)),
                     static_cast<std::int32_t>(args.get_int("--batches", 3, 1, 10000))};
  for (const auto& [name, run_suite] : kSuites) {
    if (suite == name) return run_suite(run, out);
  }
  throw UsageError("--suite " + dcp::quoted(suite) +
                   ": expected micro, paper, e2e, calibration, planning, balance, kinds or pool");
}

}  // namespace dcp::cli
