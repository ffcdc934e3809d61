// SPDX-License-Identifier: Apache-2.0
// `dcp simulate` and `dcp bench` end to end, on small batches, and the flags each suite refuses.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/apps/cli_testing.h"

namespace dcp::cli {
namespace {

// a100-p4de with 2 nodes x 2 devices.
std::string small_cluster_file() {
  const std::string path = temp_path("small.cluster");
  std::ofstream(path) << "preset = a100-p4de\nnodes = 2\ndevices_per_node = 2\n";
  return path;
}

TEST(SimulateCommand, PrintsPassesDevicesStagesAndWritesATrace) {
  const std::string plan = temp_path("sim.plan");
  const std::string trace = temp_path("sim.trace.json");
  std::filesystem::remove(trace);
  ASSERT_EQ(run({"plan", "--seqlens", "3000,700,40", "--block-size", "256", "--nodes", "2",
                 "--devices-per-node", "2", "--mask", "causal", "-o", plan})
                .status,
            0);
  const Result r = run({"simulate", plan, "--cluster", "h100-dgx", "--trace", trace});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* text : {"cluster h100-dgx", "forward: ", "backward: ", "critical path",
                           "per device", "per stage", "trace: "}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
  const std::string json = read_all(trace);
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"displayTimeUnit\""), std::string::npos);
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("device 3 compute"), std::string::npos);
  // A faster network never makes the plan slower.
  const std::string fast = temp_path("fast.cluster");
  std::ofstream(fast) << "preset = h100-dgx\nnodes = 2\ndevices_per_node = 2\n"
                         "inter_node_gbps = 4000\nintra_node_gbps = 4000\n";
  const Result f = run({"simulate", plan, "--cluster", fast});
  ASSERT_EQ(f.status, 0) << f.err;
  // "forward X ms + backward Y ms = Z ms": the total.
  const auto total = [](const std::string& text) {
    const std::size_t at = text.find(" = ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + 3));
  };
  ASSERT_GT(total(r.out), 0);
  EXPECT_LE(total(f.out), total(r.out));

  expect_usage_error({"simulate", plan, "--cluster", "tpu-pod"}, "--cluster 'tpu-pod'");
  // A cluster file describes its own shape, which must be the plan's.
  const std::string wrong = temp_path("wrong.cluster");
  std::ofstream(wrong) << "preset = a100-p4de\n";
  expect_usage_error({"simulate", plan, "--cluster", wrong}, "describes 4 x 8");
  const Result missing = run({"simulate", temp_path("no_such.plan")});
  EXPECT_NE(missing.status, 0);
  EXPECT_EQ(missing.out, "");
  EXPECT_NE(missing.err.find("no_such.plan"), std::string::npos) << missing.err;
  for (const std::string& path : {plan, trace, fast, wrong}) std::filesystem::remove(path);
}

TEST(BenchCommand, MicroSuiteWritesRecordsReportAndCharts) {
  const std::string cluster = small_cluster_file();
  const std::string dir = temp_path("micro_report");
  const std::string json = temp_path("micro.json");
  std::filesystem::remove_all(dir);
  const Result r = run(
      {"bench",    "--suite",   "micro",   "--batches",     "1",        "--datasets", "ldc",
       "--scales", "0.5",       "--masks", "causal,lambda", "--tokens", "8192",       "--cluster",
       cluster,    "--threads", "2",       "--out-dir",     dir,        "--json",     json});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string records = read_all(json);
  // 2 masks x 2 passes x 8 strategies, every strategy feasible on 4 devices.
  // One record per line: {"dataset": ..., "mask": "M", "pass": "P", "strategy": "S",
  // "time_ms": T, ...}.
  const auto field = [](const std::string& line, const std::string& key) {
    const std::size_t at = line.find("\"" + key + "\": ");
    if (at == std::string::npos) return std::string();
    std::size_t start = at + key.size() + 4;
    if (line[start] == '"') ++start;
    return line.substr(start, line.find_first_of("\",}", start) - start);
  };
  std::map<std::string, double> time;
  std::istringstream lines(records);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("\"dataset\"") == std::string::npos) continue;
    for (const char* key :
         {"bytes_inter_node", "bytes_intra_node", "imbalance_compute", "plan_ms", "estimate_ms"}) {
      EXPECT_FALSE(field(line, key).empty()) << key << " in " << line;
    }
    time[field(line, "mask") + " " + field(line, "pass") + " " + field(line, "strategy")] =
        std::stod(field(line, "time_ms"));
  }
  ASSERT_EQ(time.size(), 32u) << records;
  // dcp keeps the fastest of its own and the static plans (forward plus backward).
  for (const char* mask : {"causal", "lambda"}) {
    const auto total = [&](const std::string& strategy) {
      return time[std::string(mask) + " forward " + strategy] +
             time[std::string(mask) + " backward " + strategy];
    };
    for (const char* other :
         {"dcp-pure", "ring", "zigzag", "ulysses", "hybrid", "te", "loongtrain"}) {
      EXPECT_LE(total("dcp"), total(other) * (1 + 1e-9)) << mask << " " << other;
    }
  }
  const std::string markdown = read_all(dir + "/micro_bench.md");
  EXPECT_NE(markdown.find("## Forward: simulated time"), std::string::npos);
  EXPECT_NE(markdown.find("| ldc | x0.5 | lambda |"), std::string::npos);
  EXPECT_NE(markdown.find("## Targets"), std::string::npos);
  // The schedule estimate beside the simulation, per strategy.
  EXPECT_NE(markdown.find("## The schedule estimate against the simulation"), std::string::npos);
  EXPECT_NE(markdown.find("| loongtrain | "), std::string::npos);
  // Beside dcp's speed-ups, the paper's measured one (ldc x0.5 lambda forward: TE 34.7 / 7.8).
  EXPECT_NE(markdown.find("paper: DCP / best"), std::string::npos);
  EXPECT_NE(markdown.find("| 4.45× |"), std::string::npos);
  // The static strategies ran over all devices, as the paper's measured baselines did.
  EXPECT_NE(markdown.find("use no data parallelism: one group of all devices"), std::string::npos);
  EXPECT_EQ(read_all(dir + "/micro_bench_forward.svg").rfind("<svg", 0), 0u);
  EXPECT_EQ(read_all(dir + "/micro_bench_backward.svg").rfind("<svg", 0), 0u);
  EXPECT_NE(r.out.find("# Attention micro-benchmark"), std::string::npos);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(json);
  std::filesystem::remove(cluster);
}

TEST(BenchCommand, CalibrationSuiteComparesMeasuredAndSimulatedTimes) {
  const std::string dir = temp_path("calibration_report");
  std::filesystem::remove_all(dir);
  const Result r =
      run({"bench", "--suite", "calibration", "--batches", "1", "--tokens", "600", "--masks",
           "causal", "--strategies", "dcp,ring", "--head-dim", "16", "--out-dir", dir});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string markdown = read_all(dir + "/calibration.md");
  EXPECT_NE(markdown.find("| samples | median |error|"), std::string::npos);
  // One row per (strategy, pass) with positive measured and simulated times.
  int rows = 0;
  std::istringstream lines(markdown);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| 0 | causal | ", 0) != 0) continue;
    // | batch | mask | strategy | pass | measured ms | simulated ms | error |
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    ASSERT_GE(cells.size(), 7u) << line;
    ++rows;
    EXPECT_GT(std::stod(cells[4]), 0) << line;
    EXPECT_GT(std::stod(cells[5]), 0) << line;
  }
  EXPECT_EQ(rows, 4) << markdown;
  std::filesystem::remove_all(dir);
}

// The folders --json and --out-dir name are made before the suite runs; one that cannot be
// made (a file is in the way) is a usage error naming its flag, raised before anything runs.
TEST(BenchCommand, MakesItsOutputFoldersFirstAndRefusesOnesThatCannotBeMade) {
  const std::string root = temp_path("bench_outputs");
  std::filesystem::remove_all(root);
  const std::vector<std::string> suite = {
      "bench", "--suite",    "balance",   "--batches", "1", "--tokens",   "8192", "--head-dim",
      "16",    "--datasets", "longalign", "--scales",  "1", "--balances", "0.3"};
  std::vector<std::string> args = suite;
  for (const std::string& a : {std::string("--out-dir"), root + "/report/a", std::string("--json"),
                               root + "/json/b/records.json"}) {
    args.push_back(a);
  }
  const Result r = run(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(root + "/json/b/records.json"));
  EXPECT_TRUE(std::filesystem::exists(root + "/report/a/balance_bench.md"));

  const std::string file = root + "/file";
  { std::ofstream(file) << "not a folder"; }
  args = suite;
  for (const std::string& a :
       {std::string("--out-dir"), std::string(""), std::string("--json"), file + "/records.json"}) {
    args.push_back(a);
  }
  expect_usage_error(args, "--json '" + file + "/records.json': cannot create the folder");
  args = suite;
  for (const std::string& a : {std::string("--out-dir"), file + "/report"}) args.push_back(a);
  expect_usage_error(args, "--out-dir '" + file + "/report': cannot create the folder");
  EXPECT_FALSE(std::filesystem::exists(file + "/report"));
  std::filesystem::remove_all(root);
}

TEST(BenchCommand, RejectsBadFlagsWithExitStatus2) {
  expect_usage_error({"bench", "--suite", "macro"}, "--suite 'macro'");
  expect_usage_error({"bench", "--scales", "0"}, "--scales");
  expect_usage_error({"bench", "--masks", "lambda:sink=1"}, "mask kinds only");
  expect_usage_error({"bench", "--datasets", "wiki"}, "--datasets");
  expect_usage_error({"bench", "--strategies", "dcp,star"}, "unknown strategy 'star'");
  expect_usage_error({"bench", "--suite", "calibration", "--json", "x.json"},
                     "--json applies to --suite micro");
  expect_usage_error({"bench", "--batches", "0"}, "--batches");
}

TEST(PaperSuite, RefusesFlagsItsCellsFix) {
  expect_usage_error({"bench", "--suite", "paper", "--masks", "causal"},
                     "--masks does not apply to --suite paper");
  expect_usage_error({"bench", "--suite", "micro", "--fit"}, "--fit applies to --suite paper");
  expect_usage_error({"bench", "--suite", "calibration", "--fit"}, "--fit applies to");
  expect_usage_error({"bench", "--suite", "paper", "--fit-parameters", "forward_tflops"},
                     "--fit-parameters applies with --fit");
}

TEST(E2eSuite, RefusesFlagsItsModelFixes) {
  expect_usage_error({"bench", "--suite", "e2e", "--masks", "causal"},
                     "--masks does not apply to --suite e2e");
  expect_usage_error({"bench", "--suite", "e2e", "--heads", "4"}, "--heads does not apply");
  expect_usage_error({"bench", "--suite", "e2e", "--tokens", "100"}, "--tokens");
}

TEST(BalanceSuite, RefusesBadBalancesAndFlagsItFixes) {
  expect_usage_error({"bench", "--suite", "balance", "--balances", "0.1,-1"},
                     "a balance must be in [0, 1000]");
  expect_usage_error({"bench", "--suite", "balance", "--strategies", "ring"},
                     "--strategies does not apply to --suite balance");
}

TEST(PlanningSuite, RefusesBadShapesAndFlagsItFixes) {
  expect_usage_error({"bench", "--suite", "planning", "--shapes", "4by8"},
                     "a shape is NODESxDEVICES, got '4by8'");
  expect_usage_error({"bench", "--suite", "planning", "--shapes", "0x8"}, "--shapes");
  expect_usage_error({"bench", "--suite", "planning", "--strategies", "ring"},
                     "--strategies does not apply to --suite planning");
  expect_usage_error({"bench", "--suite", "nope"},
                     "expected micro, paper, e2e, calibration, planning, balance, kinds or pool");
}

TEST(PoolSuite, RefusesBadPoolsAndWorkloadsAndFlagsItFixes) {
  expect_usage_error({"bench", "--suite", "pool", "--pools", "12"},
                     "--pools: '12' is not a whole number of 8-device nodes");
  expect_usage_error({"bench", "--suite", "pool", "--datasets", "ldc"},
                     "--datasets: 'ldc' is not DATASET:TOKENS");
  expect_usage_error({"bench", "--suite", "pool", "--datasets", "ldc:8"},
                     "the bound in 'ldc:8' is not in [64, 16777216]");
  expect_usage_error({"bench", "--suite", "pool", "--datasets", "nope:2048"},
                     "unknown length distribution 'nope'");
  expect_usage_error({"bench", "--suite", "pool", "--masks", "causal"},
                     "--masks does not apply to --suite pool");
}

}  // namespace
}  // namespace dcp::cli
