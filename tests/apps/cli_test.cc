// SPDX-License-Identifier: Apache-2.0
// The dcp command line end to end: outputs, and exit status 2 with a one-line error for bad input.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "dcp/core/npy.h"

#include "dcp/program/plan_file/model_plan_file.h"

#include "apps/cli/command_table.h"
#include "tests/apps/cli_testing.h"
#include <sys/wait.h>

namespace dcp::cli {
namespace {

std::string json_value(const std::string& json, const std::string& key) {
  std::string pattern = "\"";
  pattern.append(key).append("\": ");
  const std::size_t at = json.find(pattern);
  if (at == std::string::npos) return "(missing)";
  const std::size_t start = at + key.size() + 4;
  return json.substr(start, json.find_first_of(",\n}", start) - start);
}

TEST(WorkloadCommand, PrintsTheRequiredJsonFields) {
  const Result r = run({"workload", "--seqlens", "131072", "--block-size", "1024", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_value(r.out, "token_blocks"), "128");
  EXPECT_EQ(json_value(r.out, "work_units"), "66048");
  EXPECT_EQ(json_value(r.out, "full_work_units"), std::to_string(128 * 127 / 2 * 8));
  EXPECT_EQ(json_value(r.out, "unmasked_pairs"), std::to_string(131072LL * 131073 / 2));
  EXPECT_EQ(json_value(r.out, "flops_forward"),
            std::to_string(4 * (131072LL * 131073 / 2) * 128 * 8));
  EXPECT_NE(r.out.find("\"per_sequence\": ["), std::string::npos);
  EXPECT_NE(r.out.find("\"density\": "), std::string::npos);
}

TEST(WorkloadCommand, TakesAChunkedMask) {
  // 1000 tokens in chunks of 256: three full chunks and one of 232, each causal.
  const Result r = run({"workload", "--seqlens", "1000", "--mask", "chunked:chunk=256",
                        "--block-size", "128", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_value(r.out, "unmasked_pairs"), std::to_string(3 * 256 * 257 / 2 + 232 * 233 / 2));
  EXPECT_NE(r.out.find("chunked:chunk=256"), std::string::npos);
}

TEST(WorkloadCommand, PrintsAReadableSummaryForSampledBatchesAndMaskFiles) {
  const Result sampled = run({"workload", "--dist", "ldc", "--seed", "3", "--mask", "lambda"});
  ASSERT_EQ(sampled.status, 0) << sampled.err;
  EXPECT_NE(sampled.out.find("work units"), std::string::npos);
  EXPECT_NE(sampled.out.find("lambda:sink=64,window=4096"), std::string::npos);

  const std::string path = (std::filesystem::temp_directory_path() / "dcp_cli_mask.npy").string();
  const std::vector<std::int32_t> causal = {0, 1, 0, 2, 0, 3, 0, 1};
  write_npy(path, "<i4", {4, 1, 2}, causal.data(), causal.size() * 4);
  const Result from_file =
      run({"workload", "--seqlens", "3,1", "--mask-file", path, "--block-size", "2", "--json"});
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  EXPECT_EQ(json_value(from_file.out, "unmasked_pairs"), "7");
  const Result wrong_count = run({"workload", "--seqlens", "3,2", "--mask-file", path});
  EXPECT_EQ(wrong_count.status, 2);
  EXPECT_NE(wrong_count.err.find("--mask-file"), std::string::npos);
  EXPECT_NE(wrong_count.err.find("has 4 rows, but the batch has 5 tokens"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(WorkloadCommand, RejectsBadInputWithExitStatus2NamingTheFlagAndValue) {
  expect_usage_error({"workload", "--seqlens", "10", "--mask", "bogus"},
                     "--mask: 'bogus': unknown mask kind 'bogus'");
  expect_usage_error({"workload", "--seqlens", "10", "--mask", "sliding_window:window=0"},
                     "window must be >= 1");
  expect_usage_error({"workload", "--seqlens", "10", "--mask", "shared_question:answers=0"},
                     "answers must be >= 1");
  expect_usage_error({"workload", "--seqlens", "10", "--mask", "shared_question:question=1.5"},
                     "question must be in [0, 1)");
  expect_usage_error({"workload", "--seqlens", "10", "--mask", "causal_blockwise:block=0"},
                     "block must be >= 1");
  expect_usage_error({"workload", "--seqlens", "10", "--mask", "chunked:chunk=0"},
                     "--mask: 'chunked:chunk=0': chunk must be >= 1");
  expect_usage_error({"workload", "--seqlens", "10", "--heads", "6", "--kv-heads", "4"},
                     "--heads 6 --kv-heads 4");
  expect_usage_error({"workload", "--seqlens", "10", "--head-block-size", "3"},
                     "--head-block-size 3");
  expect_usage_error({"workload", "--seqlens", "10", "--block-size", "0"},
                     "--block-size '0': must be in [1, ");
  expect_usage_error({"workload", "--seqlens", "10,0"}, "sequence 1 has length 0");
  expect_usage_error({"workload", "--seqlens", "10,-5"}, "--seqlens '10,-5'");
  expect_usage_error({"workload", "--seqlens", ""}, "--seqlens");
  expect_usage_error({"workload"}, "exactly one of --seqlens");
  expect_usage_error({"workload", "--seqlens", "5", "--heads", "x"},
                     "--heads: 'x' is not an integer");
  expect_usage_error({"workload", "--seqlens", "5", "--dtype", "int8"},
                     "--dtype: unknown dtype 'int8'");
  expect_usage_error({"workload", "--seqlens", "5", "--frobnicate"}, "unknown flag '--frobnicate'");
  expect_usage_error({"workload", "--seqlens"}, "--seqlens needs a value");
  expect_usage_error({"workload", "--seqlens", "5", "--mask-file", "/nonexistent.npy"},
                     "--mask-file: /nonexistent.npy: cannot open");
  expect_usage_error({"workload", "--seqlens", "5", "--mask", "causal", "--mask-file", "x.npy"},
                     "at most one of --mask");
  expect_usage_error({"workload", "--dist", "zipf"}, "unknown length distribution 'zipf'");
  expect_usage_error({"frobnicate"}, "unknown command 'frobnicate'");
  expect_usage_error({"workload", "--seqlens", "5", "--heads", "2147483648"},
                     "--heads '2147483648': must be in [1, 16384]");
  expect_usage_error({"workload", "--seqlens", "3000000000"}, "brings the batch past");
  expect_usage_error({"workload", "--seqlens", "1000000000"},
                     "--block-size auto: block size 4096 gives more than");
  expect_usage_error({"workload", "--seqlens", "20000000", "--block-size", "1"},
                     "--block-size 1: block size 1 cuts the batch into more than");
}

TEST(BatchesCommand, PrintsCountBatchesWithinTheBudgetAndIsDeterministic) {
  const Result a =
      run({"batches", "--dist", "ldc", "--tokens", "131072", "--count", "50", "--seed", "0"});
  ASSERT_EQ(a.status, 0) << a.err;
  std::istringstream lines(a.out);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    ++count;
    long long sum = 0;
    std::istringstream items(line);
    std::string item;
    while (std::getline(items, item, ',')) sum += std::stoll(item);
    EXPECT_LE(sum, 131072);
    EXPECT_GE(sum, 98304);
  }
  EXPECT_EQ(count, 50);
  EXPECT_EQ(
      run({"batches", "--dist", "ldc", "--tokens", "131072", "--count", "50", "--seed", "0"}).out,
      a.out);
  EXPECT_NE(
      run({"batches", "--dist", "ldc", "--tokens", "131072", "--count", "50", "--seed", "1"}).out,
      a.out);
  expect_usage_error({"batches", "--dist", "ldc", "--seed", "abc"},
                     "--seed: 'abc' is not an integer");
  expect_usage_error({"batches", "--dist", "ldc", "--count", "0"}, "--count '0': must be in [1, ");
  expect_usage_error({"batches"}, "exactly one of --dist and --lengths-file");
}

TEST(DcpBinary, FailsWhenItCannotWriteItsOutput) {
  const std::string command =
      std::string(DCP_BINARY) + " batches --dist ldc --count 3 >/dev/full 2>/dev/null";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

TEST(DcpBinary, ExitsWith2AndPrintsNothingOnStdoutForBadInput) {
  const std::string command =
      std::string(DCP_BINARY) + " workload --seqlens 10 --mask nope 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[256];
  const std::size_t read = fread(buffer, 1, sizeof(buffer), pipe);
  const int status = pclose(pipe);
  EXPECT_EQ(read, 0u);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace
}  // namespace dcp::cli

namespace dcp::cli {
namespace {

TEST(PartitionCommand, PrintsPlacementAndBaselinesAsJson) {
  // At the default balance (1.3) this case needs the final repair's swap of a block for a smaller
  // one to stay within its memory bound (docs/partitioner.md).
  const Result r = run({"partition", "--seqlens", "3000,500,200", "--block-size", "256", "--nodes",
                        "2", "--devices-per-node", "3", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key :
       {"imbalance_compute", "imbalance_memory", "bytes_inter_node", "bytes_intra_node", "devices",
        "placement", "token_blocks", "work_units", "baselines", "zigzag", "greedy"}) {
    std::string quoted_key = "\"";
    quoted_key.append(key).append("\"");
    EXPECT_NE(r.out.find(quoted_key), std::string::npos) << key;
  }
  EXPECT_EQ(json_value(r.out, "within_bounds"), "true");
  // Every token block appears once: 12 + 2 + 1 blocks of 256 tokens.
  const std::size_t begin = r.out.find("\"token_blocks\": [");
  const std::size_t end = r.out.find("]\n    ]", begin);
  EXPECT_EQ(std::count(r.out.begin() + static_cast<std::ptrdiff_t>(begin),
                       r.out.begin() + static_cast<std::ptrdiff_t>(end), '\n'),
            15);
  EXPECT_EQ(run({"partition", "--seqlens", "3000,500,200", "--block-size", "256", "--nodes", "2",
                 "--devices-per-node", "3", "--json"})
                .out.substr(0, begin),
            r.out.substr(0, begin))
      << "same inputs and seed, same placement";
}

TEST(PartitionCommand, RejectsBadClusterAndEpsilonWithExitStatus2) {
  expect_usage_error({"partition", "--seqlens", "100", "--nodes", "0"},
                     "--nodes '0': must be in [1, ");
  expect_usage_error({"partition", "--seqlens", "100", "--devices-per-node", "-2"},
                     "--devices-per-node '-2': must be in [1, ");
  expect_usage_error({"partition", "--seqlens", "100", "--eps-compute", "-0.1"},
                     "--eps-compute '-0.1': must be >= 0");
  expect_usage_error({"partition", "--seqlens", "100", "--eps-memory", "x"},
                     "--eps-memory: 'x' is not a finite number");
  expect_usage_error({"partition", "--seqlens", "100", "--seed", "1.5"},
                     "--seed: '1.5' is not an integer");
  expect_usage_error({"partition", "--seqlens", "100", "--partitioner", "kahypar"},
                     "unknown partitioner 'kahypar'");
  expect_usage_error(
      {"partition", "--seqlens", "100", "--nodes", "300", "--devices-per-node", "300"},
      "exceeds 65536 devices");
}

TEST(PartitionCommand, SaysWhenSomeDevicesGetNoData) {
  const Result r =
      run({"partition", "--seqlens", "100", "--block-size", "64", "--devices-per-node", "4"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("idle devs"), std::string::npos);
  EXPECT_NE(r.out.find("largest-first packing bound"), std::string::npos);
}

}  // namespace
}  // namespace dcp::cli

namespace dcp::cli {
namespace {

TEST(PlanCommand, WritesAPlanThatVerifiesAndInspects) {
  const std::string plan = temp_path("a.plan");
  const std::string json = temp_path("a.json");
  for (const char* strategy : {"dcp", "ring", "zigzag", "hybrid", "te", "loongtrain"}) {
    const Result r = run({"plan", "--seqlens", "3000,700,40", "--block-size", "256", "--nodes", "2",
                          "--devices-per-node", "2", "--mask", "lambda:sink=16,window=512",
                          "--strategy", strategy, "-o", plan, "--json", json});
    ASSERT_EQ(r.status, 0) << strategy << ": " << r.err;
    EXPECT_NE(r.out.find("forward"), std::string::npos);
    const std::string text = read_all(json);
    for (const char* key :
         {"workload", "partition", "schedule_forward", "schedule_backward", "compile", "total"}) {
      EXPECT_NE(json_value(text, key), "(missing)") << key;
    }
    EXPECT_NE(text.find("\"plan\": {"), std::string::npos);
    const Result v = run({"verify", plan});
    EXPECT_EQ(v.status, 0) << v.err;
    EXPECT_NE(v.out.find(": ok"), std::string::npos) << v.out;
    const Result i = run({"inspect", plan});
    EXPECT_EQ(i.status, 0) << i.err;
    EXPECT_NE(i.out.find("peak MB"), std::string::npos);
  }
  std::filesystem::remove(plan);
  std::filesystem::remove(json);
}

TEST(PlanCommand, IsDeterministic) {
  const std::string a = temp_path("d1.plan"), b = temp_path("d2.plan");
  for (const std::string& path : {a, b}) {
    ASSERT_EQ(run({"plan", "--dist", "ldc", "--tokens", "32768", "--seed", "4", "--nodes", "2",
                   "--devices-per-node", "4", "--block-size", "512", "-o", path})
                  .status,
              0);
  }
  EXPECT_EQ(read_all(a), read_all(b));
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(PlanCommand, AnAutomaticBlockSizeTriesTheSweepAndKeepsTheFastest) {
  const std::string a = temp_path("auto1.plan"), b = temp_path("auto2.plan");
  const std::vector<std::string> common = {
      "plan", "--dist",  "ldc", "--tokens",           "32768", "--seed",
      "2",    "--nodes", "2",   "--devices-per-node", "4"};
  std::vector<std::string> automatic = common;
  automatic.insert(automatic.end(), {"-o", a});
  const Result swept = run(automatic);
  ASSERT_EQ(swept.status, 0) << swept.err;
  EXPECT_NE(swept.out.find("own plans  dcp's partition at each block size, and any layouts it "
                           "ran its way (simulated forward + backward ms; planning ms): 1024 "),
            std::string::npos)
      << swept.out;
  EXPECT_NE(swept.out.find(", 4096 "), std::string::npos) << swept.out;
  // Planning stays deterministic.
  automatic.back() = b;
  ASSERT_EQ(run(automatic).status, 0);
  EXPECT_EQ(read_all(a), read_all(b));
  // A block size given is the one planned.
  std::vector<std::string> given = common;
  given.insert(given.end(), {"--block-size", "512", "-o", a});
  const Result fixed = run(given);
  ASSERT_EQ(fixed.status, 0) << fixed.err;
  EXPECT_EQ(fixed.out.find("own plans"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("(largest 512)"), std::string::npos) << fixed.out;
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(PlanCommand, ABatchOfFewLongSequencesAlsoTriesTheStructuredLayouts) {
  const Result planned = run({"plan", "--seqlens", "24000,3000", "--nodes", "2",
                              "--devices-per-node", "4", "--strategy", "dcp-pure"});
  ASSERT_EQ(planned.status, 0) << planned.err;
  EXPECT_NE(planned.out.find(", hybrid layout "), std::string::npos) << planned.out;
  EXPECT_NE(planned.out.find(", loongtrain layout "), std::string::npos) << planned.out;
  // Five equal sequences under a causal mask: none holds half the tokens, and more than four.
  const Result spread = run({"plan", "--seqlens", "9000,9000,9000,9000,9000", "--nodes", "2",
                             "--devices-per-node", "4", "--strategy", "dcp-pure"});
  ASSERT_EQ(spread.status, 0) << spread.err;
  EXPECT_EQ(spread.out.find("hybrid layout"), std::string::npos) << spread.out;
  EXPECT_EQ(spread.out.find("loongtrain layout"), std::string::npos) << spread.out;
}

TEST(PlanCommand, PlansNamedAttentionKindsOnTheBlocksOfTheFirstKind) {
  const std::string path = temp_path("kinds.plan");
  const Result r = run({"plan", "--seqlens", "3000,700,40", "--nodes", "1", "--devices-per-node",
                        "4", "--strategy", "dcp-pure", "--mask", "local=sliding_window:window=64",
                        "--mask", "global=causal", "--layers", "local=3", "-o", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 attention kinds on one token placement"), std::string::npos) << r.out;
  const ModelPlan plan = read_model_plan_file(path);  // checks that the kinds share their blocks
  ASSERT_EQ(plan.kinds.size(), 2u);
  EXPECT_EQ(plan.names(), (std::vector<std::string>{"local", "global"}));
  EXPECT_EQ(plan.kinds[0].layers, 3);
  EXPECT_EQ(plan.kinds[1].layers, 1);
  // The default kind's name with more than one layer is a kinds plan too.
  ASSERT_EQ(run({"plan", "--seqlens", "3000,700", "--mask", "attention=causal", "--layers",
                 "attention=2", "-o", path})
                .status,
            0);
  EXPECT_EQ(read_model_plan_file(path).kinds.front().layers, 2);
  std::filesystem::remove(path);
  expect_usage_error({"plan", "--seqlens", "100", "--mask", "a=causal", "--layers", "b=2"},
                     "no attention kind 'b' (the kinds are a)");
  expect_usage_error({"plan", "--seqlens", "100", "--mask", "causal", "--layers", "a=2"},
                     "--layers counts the layers of named attention kinds");
}

TEST(PlanCommand, RejectsBadFlagsWithExitStatus2) {
  // A per-device token limit the batch cannot fit on the cluster's devices.
  expect_usage_error({"plan", "--seqlens", "300,100", "--nodes", "1", "--devices-per-node", "2",
                      "--block-size", "64", "--max-device-tokens", "150"},
                     "max_device_tokens 150: 2 devices hold at most 300 tokens, the batch has 400");
  expect_usage_error({"plan", "--seqlens", "100", "--strategy", "star"}, "unknown strategy 'star'");
  expect_usage_error({"plan", "--seqlens", "100", "--cluster", "/no/such/file"}, "--cluster");
  expect_usage_error({"plan", "--seqlens", "100", "--strategy", "ulysses", "--nodes", "4"},
                     "32 devices but only 8 q head blocks");
  expect_usage_error({"plan", "--seqlens", "100", "--stages", "-1"}, "--stages");
  expect_usage_error({"plan", "--seqlens", "100", "--compute-masked-tiles"},
                     "--compute-masked-tiles applies to static strategies");
  expect_usage_error({"plan", "--seqlens", "100", "--keep-kv", "some"}, "--keep-kv");
  expect_usage_error({"plan", "--seqlens", "100", "--keep-kv", "-2"}, "--keep-kv");
  expect_usage_error({"plan", "--seqlens", "100", "--strategy", "ring", "--keep-kv", "all"},
                     "--keep-kv applies to --strategy dcp or dcp-pure");
  expect_usage_error({"plan", "--seqlens", "100", "--strategy", "ring", "--loongtrain-window", "2"},
                     "--loongtrain-window applies to --strategy loongtrain, not ring");
  expect_usage_error(
      {"plan", "--seqlens", "100", "--strategy", "loongtrain", "--loongtrain-window", "3"},
      "loongtrain window 3 does not divide the ring of 16 head groups");
  expect_usage_error({"partition", "--seqlens", "100", "--keep-kv", "maybe"}, "--keep-kv");
  expect_usage_error({"plan", "--seqlens", "100", "--partial-dtype", "fp8"}, "--partial-dtype");
  expect_usage_error({"plan", "--seqlens", "100", "--partial-dtype", "fp16"},
                     "partials travel in fp32 or the storage dtype (bf16), not fp16");
  expect_usage_error(
      {"partition", "--seqlens", "100", "--dtype", "fp32", "--partial-dtype", "bf16"},
      "partials travel in fp32 or the storage dtype (fp32), not bf16");
}

// Static strategies in data parallel groups: --static-dp N or auto; the plan says its degree.
TEST(PlanCommand, RunsStaticStrategiesInDataParallelGroups) {
  const auto plan = [](const char* strategy, const char* degree) {
    return run({"plan", "--seqlens", "3000,700,400,40", "--block-size", "256", "--nodes", "2",
                "--devices-per-node", "4", "--strategy", strategy, "--static-dp", degree});
  };
  for (const char* strategy : {"zigzag", "te", "loongtrain", "hybrid"}) {
    const Result two = plan(strategy, "2");
    ASSERT_EQ(two.status, 0) << strategy << ": " << two.err;
    EXPECT_NE(two.out.find("data parallel 2 (groups of 4 devices)"), std::string::npos) << two.out;
  }
  // 4140 tokens round up to 8192: 2 x 3000 fits, 4 x 3000 does not.
  const Result automatic = plan("ring", "auto");
  ASSERT_EQ(automatic.status, 0) << automatic.err;
  EXPECT_NE(automatic.out.find("data parallel 2"), std::string::npos) << automatic.out;
  const Result one = plan("ring", "1");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(one.out.find("data parallel"), std::string::npos) << one.out;
  const Result dcp = plan("dcp", "auto");  // dcp's static candidates take it
  ASSERT_EQ(dcp.status, 0) << dcp.err;
  expect_usage_error({"plan", "--seqlens", "100", "--static-dp", "0"},
                     "--static-dp: the data "
                     "parallel degree must be auto or a whole number in [1, 65536], got '0'");
  expect_usage_error({"plan", "--seqlens", "100", "--static-dp", "x"}, "got 'x'");
  expect_usage_error({"plan", "--seqlens", "100", "--strategy", "zigzag", "--static-dp", "3"},
                     "zigzag: data parallel degree 3 does not divide the 32 devices");
  expect_usage_error({"plan", "--seqlens", "100", "--strategy", "dcp-pure", "--static-dp", "2"},
                     "--static-dp applies to static strategies");
  expect_usage_error({"plan", "--seqlens", "100", "--static-dp", "2", "--static-dp", "2"},
                     "--static-dp");
  expect_usage_error({"bench", "--suite", "calibration", "--static-dp", "2"},
                     "--static-dp applies to --suite micro");
  expect_usage_error({"bench", "--static-dp", "none"}, "--static-dp");
}

// `dcp plan --json` says per pass whether its schedule runs each device's own outputs last: never
// forward; on this batch (long sequences on DGX H100 nodes, kv kept) the backward schedule does.
TEST(PlanCommand, ReportsWhetherTheBackwardRunsOwnOutputsLast) {
  const Result r =
      run({"plan", "--seqlens", "7000,9000,5000", "--block-size", "512", "--cluster", "h100-dgx",
           "--nodes", "2", "--devices-per-node", "8", "--strategy", "dcp-pure", "--json", "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::size_t backward = r.out.find("\"backward\": {");
  ASSERT_NE(backward, std::string::npos) << r.out;
  EXPECT_EQ(json_value(r.out.substr(0, backward), "own_outputs_last"), "false");
  EXPECT_EQ(json_value(r.out.substr(backward), "own_outputs_last"), "true");
}

// `dcp plan --json` says per pass into how many stages each of a structured layout's stages was
// cut: on one long causal sequence on 2 x 4, dcp keeps the hybrid layout with its backward cut in
// 2 (the planner's tests check why); the forward is never cut.
TEST(PlanCommand, ReportsTheStructuredBackwardsStageParts) {
  const Result r = run({"plan", "--seqlens", "24576", "--nodes", "2", "--devices-per-node", "4",
                        "--strategy", "dcp-pure", "--json", "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::size_t backward = r.out.find("\"backward\": {");
  ASSERT_NE(backward, std::string::npos) << r.out;
  EXPECT_EQ(json_value(r.out.substr(0, backward), "stage_parts"), "1");
  EXPECT_EQ(json_value(r.out.substr(backward), "stage_parts"), "2");
}

// dcp's own plans send partials in the storage dtype unless told otherwise, static strategies
// in fp32 (unless told otherwise); in bf16 the partial messages, and only they, are half as
// long.
TEST(PlanCommand, SendsPartialsInTheDtypeAsked) {
  const auto plan = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "plan", "--seqlens",          "3000,700,40", "--block-size", "256", "--nodes",
        "2",    "--devices-per-node", "2",           "--json",       "-"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  const Result narrow = plan({"--strategy", "dcp-pure"});
  const Result wide = plan({"--strategy", "dcp-pure", "--partial-dtype", "fp32"});
  const Result ring = plan({"--strategy", "ring"});
  const Result ring_narrow = plan({"--strategy", "ring", "--partial-dtype", "bf16"});
  for (const Result* r : {&narrow, &wide, &ring, &ring_narrow}) ASSERT_EQ(r->status, 0) << r->err;
  EXPECT_EQ(json_value(narrow.out, "partial_dtype"), "\"bf16\"");
  EXPECT_EQ(json_value(wide.out, "partial_dtype"), "\"fp32\"");
  EXPECT_EQ(json_value(ring.out, "partial_dtype"), "\"fp32\"");
  EXPECT_EQ(json_value(ring_narrow.out, "partial_dtype"), "\"bf16\"");
  // The same ring schedule: its partial messages halve, its kv messages stay.
  const auto bytes = [](const Result& r, const char* pass) {
    return std::stod(json_value(r.out.substr(r.out.find(pass)), "bytes_inter_node"));
  };
  EXPECT_EQ(bytes(ring_narrow, "\"forward\""), bytes(ring, "\"forward\""));  // kv only
  EXPECT_LT(bytes(ring_narrow, "\"backward\""), bytes(ring, "\"backward\""));
  EXPECT_LT(bytes(narrow, "\"backward\""), bytes(wide, "\"backward\""));
}

// dcp-pure keeps the kv values a device received in the forward pass (by default, or within a
// budget in MiB), and says how much; with none kept, the backward pass receives them again.
TEST(PlanCommand, KeepsKvFromTheForwardPassAsAsked) {
  const auto plan = [](const char* keep) {
    return run({"plan", "--seqlens", "3000,700,40", "--block-size", "256", "--nodes", "2",
                "--devices-per-node", "2", "--strategy", "dcp-pure", "--keep-kv", keep, "--json",
                "-"});
  };
  const auto kept_mb = [](const Result& r) {
    return std::stod(json_value(r.out, "kept_kv_bytes_max_device")) / 1e6;
  };
  const Result all = plan("all"), none = plan("none"), budget = plan("0.5");
  for (const Result* r : {&all, &none, &budget}) ASSERT_EQ(r->status, 0) << r->err;
  EXPECT_GT(kept_mb(all), 0.5 * 1.048576);
  EXPECT_EQ(kept_mb(none), 0);
  EXPECT_GT(kept_mb(budget), 0);
  EXPECT_LE(kept_mb(budget), 0.5 * 1.048576);
  const Result text = run({"plan", "--seqlens", "3000,700,40", "--block-size", "256", "--nodes",
                           "2", "--devices-per-node", "2", "--strategy", "dcp-pure"});
  EXPECT_NE(text.out.find("kept kv    up to"), std::string::npos) << text.out;
}

TEST(VerifyCommand, RejectsDamagedAndForeignFilesWithAClearError) {
  const std::string plan = temp_path("v.plan");
  ASSERT_EQ(run({"plan", "--seqlens", "2000,300", "--block-size", "256", "--nodes", "1",
                 "--devices-per-node", "3", "-o", plan})
                .status,
            0);
  const std::string bytes = read_all(plan);
  const std::string damaged = temp_path("damaged.plan");
  {
    std::ofstream out(damaged, std::ios::binary);
    out << bytes.substr(0, bytes.size() / 2);
  }
  const Result truncated = run({"verify", damaged});
  EXPECT_EQ(truncated.status, 2);
  EXPECT_NE(truncated.err.find(damaged), std::string::npos) << truncated.err;
  {
    std::ofstream out(damaged, std::ios::binary);
    std::string flipped = bytes;
    flipped[flipped.size() - 10] = static_cast<char>(flipped[flipped.size() - 10] ^ 0x5a);
    out << flipped;
  }
  const Result corrupted = run({"verify", damaged});
  EXPECT_EQ(corrupted.status, 2);
  EXPECT_NE(corrupted.err.find("checksum"), std::string::npos) << corrupted.err;
  {
    std::ofstream out(damaged, std::ios::binary);
    out << "not a plan at all";
  }
  EXPECT_EQ(run({"verify", damaged}).status, 2);
  const Result missing = run({"verify", temp_path("missing.plan")});
  EXPECT_EQ(missing.status, 1);  // an I/O failure, not bad input
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;
  expect_usage_error({"inspect", plan, "--device", "3"}, "--device");
  std::filesystem::remove(plan);
  std::filesystem::remove(damaged);
}

TEST(RunCommand, ExecutesEveryStrategyAndPrintsErrorsBelowTheBound) {
  for (const char* strategy : {"dcp", "zigzag", "hybrid", "te", "loongtrain"}) {
    const Result r = run({"run", "--seqlens", "700,300,1", "--block-size", "128", "--nodes", "2",
                          "--devices-per-node", "2", "--head-dim", "16", "--dtype", "fp32",
                          "--strategy", strategy, "--mask", "causal_blockwise:block=64,local=2"});
    ASSERT_EQ(r.status, 0) << strategy << ": " << r.err;
    for (const char* text : {"forward", "backward", "stages", "dk", "relative"}) {
      EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
    }
  }
}

TEST(RunCommand, RejectsBadRuntimeFlagsWithExitStatus2) {
  expect_usage_error({"run", "--seqlens", "100", "--comm", "tcp"}, "--comm");
  expect_usage_error({"run", "--seqlens", "100", "--kernels", "gpu"}, "--kernels");
  expect_usage_error({"run", "--seqlens", "100", "--threads", "0"}, "--threads");
  expect_usage_error({"run", "--seqlens", "100", "--timeout", "-1"}, "--timeout");
}

TEST(AttentionCommand, WritesTheFiveArraysAndAgreesAcrossStrategiesAndWorlds) {
  const AttentionFiles files("agree");
  std::vector<std::vector<float>> first;
  const std::vector<std::vector<std::string>> setups = {
      {"--nodes", "1", "--devices-per-node", "1"},
      {"--nodes", "2", "--devices-per-node", "2", "--strategy", "zigzag"},
      {"--nodes", "1", "--devices-per-node", "3", "--strategy", "dcp", "--check"}};
  for (const auto& setup : setups) {
    const Result r = run(files.args(setup));
    ASSERT_EQ(r.status, 0) << r.err;
    std::vector<std::vector<float>> arrays;
    for (const char* name : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"}) {
      const NpyArray array = read_npy(files.dir + "/" + name);
      EXPECT_EQ(array.descr, "<f4");
      std::vector<float> values(static_cast<std::size_t>(array.element_count()));
      std::memcpy(values.data(), array.data.data(), array.data.size());
      arrays.push_back(values);
    }
    EXPECT_EQ(read_npy(files.dir + "/lse.npy").shape, (std::vector<std::int64_t>{4, 300}));
    EXPECT_EQ(read_npy(files.dir + "/dk.npy").shape, (std::vector<std::int64_t>{300, 2, 8}));
    if (first.empty()) {
      first = arrays;
      continue;
    }
    for (std::size_t a = 0; a < arrays.size(); ++a) {
      for (std::size_t i = 0; i < arrays[a].size(); ++i) {
        ASSERT_NEAR(arrays[a][i], first[a][i], 1e-5) << "array " << a << " element " << i;
      }
    }
  }
}

TEST(AttentionCommand, RejectsBadArraysWithExitStatus2AndWritesNothing) {
  const AttentionFiles files("reject");
  const std::string bad = temp_path("reject_bad.npy");
  const std::vector<double> doubles(300 * 4 * 8, 0.5);
  write_npy(bad, "<f8", {300, 4, 8}, doubles.data(), doubles.size() * sizeof(double));
  auto with_q = [&](const std::string& path) {
    std::vector<std::string> argv = files.args({});
    argv[2] = path;
    return argv;
  };
  expect_usage_error(with_q(bad), "--q");
  write_f4(bad, {300, 32}, 1);
  expect_usage_error(with_q(bad), "--q");
  write_f4(bad, {300, 2, 4}, 1);
  std::vector<std::string> head_dim_mismatch = files.args({});
  head_dim_mismatch[4] = head_dim_mismatch[6] = bad;  // --k and --v with head dim 4
  expect_usage_error(head_dim_mismatch, "tokens and head dim must match");
  std::vector<std::string> short_lengths = files.args({});
  short_lengths[10] = "200,99";
  expect_usage_error(short_lengths, "sum to 299 tokens but --q has 300");
  std::vector<std::string> kv_mismatch = files.args({});
  kv_mismatch[6] = files.q;  // --v with q's heads
  expect_usage_error(kv_mismatch, "--v has shape (300, 4, 8)");
  std::vector<std::string> file_out = files.args({});
  file_out.back() = bad;  // --out-dir names a file
  expect_usage_error(file_out, "not a directory");
  // A bad input refuses before a missing --out-dir is created.
  const std::string missing = temp_path("reject_missing");
  std::filesystem::remove_all(missing);
  std::vector<std::string> missing_out = files.args({});
  missing_out[10] = "200,99";
  missing_out.back() = missing + "/results";
  expect_usage_error(missing_out, "sum to 299 tokens");
  EXPECT_FALSE(std::filesystem::exists(missing));
  EXPECT_TRUE(std::filesystem::is_empty(files.dir));
  std::filesystem::remove(bad);
}

// The README's example writes to a new results/ directory: a missing --out-dir (and its missing
// parents) is created, with the five arrays in it.
TEST(AttentionCommand, CreatesAMissingOutDir) {
  const AttentionFiles files("create");
  const std::string root = temp_path("create_new");
  std::filesystem::remove_all(root);
  std::vector<std::string> argv = files.args({});
  argv.back() = root + "/results/run1";
  const Result r = run(argv);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* name : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"}) {
    EXPECT_TRUE(std::filesystem::is_regular_file(root + "/results/run1/" + name)) << name;
  }
  std::filesystem::remove_all(root);
}

TEST(DemoCommand, PlansVerifiesRunsAndChecksEveryStrategy) {
  const Result r = run({"demo", "--tokens", "3000", "--head-dim", "16", "--nodes", "1",
                        "--devices-per-node", "2", "--block-size", "256"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* strategy : {"dcp", "ring", "zigzag", "ulysses", "hybrid", "te", "loongtrain"}) {
    EXPECT_NE(r.out.find(std::string("\n") + strategy + " "), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("every result checked"), std::string::npos);
  // The table says which times are simulated on the planned cluster and which measured here.
  EXPECT_NE(r.out.find("simulated on a100-p4de"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured here on "), std::string::npos) << r.out;
  // A row: strategy, plan ms, inter-node MB, intra-node MB, imbalance, simulated forward and
  // backward ms, measured forward and backward ms, max error.
  std::map<std::string, double> simulated;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string strategy;
    double plan_ms = 0, inter = 0, intra = 0, imbalance = 0, forward = 0, backward = 0;
    double measured_forward = 0, measured_backward = 0, error = 0;
    if (!(words >> strategy >> plan_ms >> inter >> intra >> imbalance >> forward >> backward >>
          measured_forward >> measured_backward >> error)) {
      continue;
    }
    EXPECT_GT(forward, 0) << line;
    EXPECT_GT(backward, 0) << line;
    EXPECT_GT(measured_forward, 0) << line;
    simulated[strategy] = forward + backward;
  }
  ASSERT_EQ(simulated.size(), 7u) << r.out;
  // dcp's search simulates every static strategy's plan on the same cluster and keeps the fastest
  // (plan_search.h); one it screens out has an estimate at least 1.25 x dcp's, and a static plan's
  // estimate is within a few percent of its simulation. The printed times round to 0.001 ms.
  for (const auto& [strategy, seconds] : simulated) {
    EXPECT_LE(simulated.at("dcp"), seconds + 2e-3) << strategy << "\n" << r.out;
  }
}

}  // namespace
}  // namespace dcp::cli
