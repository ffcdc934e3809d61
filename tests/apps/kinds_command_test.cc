// SPDX-License-Identifier: Apache-2.0
// Attention kinds on the command line: dcp plan, verify, simulate, run, workload, partition,
// attention and demo with --mask KIND=SPEC and --layers, the plan file they share, and every bad
// kind refused with exit status 2.
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/program/plan_file/model_plan_file.h"

#include "tests/apps/cli_testing.h"

namespace dcp::cli {
namespace {

const std::vector<std::string> kKinds = {"--seqlens",
                                         "900,300,1",
                                         "--block-size",
                                         "128",
                                         "--head-dim",
                                         "16",
                                         "--dtype",
                                         "fp32",
                                         "--nodes",
                                         "1",
                                         "--devices-per-node",
                                         "2",
                                         "--mask",
                                         "global=causal",
                                         "--mask",
                                         "local=sliding_window:window=96",
                                         "--layers",
                                         "global=2,local=6"};

std::vector<std::string> with(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

TEST(KindsCommands, PlanVerifySimulateAndRunEveryKind) {
  const std::string path = temp_path("kinds.plan");
  const Result planned = run(with({"plan"}, with(kKinds, {"-o", path})));
  ASSERT_EQ(planned.status, 0) << planned.err;
  EXPECT_NE(planned.out.find("2 attention kinds on one token placement"), std::string::npos);
  const ModelPlan plan = read_model_plan_file(path);
  ASSERT_EQ(plan.kinds.size(), 2u);
  EXPECT_EQ(plan.kinds[0].name, "global");
  EXPECT_EQ(plan.kinds[1].layers, 6);

  const Result verified = run({"verify", path});
  ASSERT_EQ(verified.status, 0) << verified.err;
  EXPECT_NE(verified.out.find("kind 'local' (6 layers): ok"), std::string::npos) << verified.out;

  const Result simulated = run({"simulate", path, "--cluster", "a100-p4de"});
  ASSERT_EQ(simulated.status, 0) << simulated.err;
  EXPECT_NE(simulated.out.find("kind 'global' (2 layers): forward"), std::string::npos);
  EXPECT_NE(simulated.out.find("step: "), std::string::npos) << simulated.out;
  const Result one_kind = run({"simulate", path, "--kind", "local"});
  ASSERT_EQ(one_kind.status, 0) << one_kind.err;
  EXPECT_EQ(one_kind.out.find("== kind 'global'"), std::string::npos);
  expect_usage_error({"simulate", path, "--kind", "sliding"}, "no attention kind 'sliding'");
  expect_usage_error({"simulate", path, "--trace", temp_path("t.json")}, "--kind");

  // Every kind executed on local ranks and checked against dense fp64 under its own mask.
  const Result ran = run(with({"run"}, kKinds));
  ASSERT_EQ(ran.status, 0) << ran.err;
  EXPECT_NE(ran.out.find("kind 'global' (2 layers)"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("kind 'local' (6 layers)"), std::string::npos) << ran.out;
  std::filesystem::remove(path);
}

TEST(KindsCommands, WorkloadDescribesEveryKindOnTheSameBlocks) {
  const std::vector<std::string> kinds = {
      "--seqlens", "900,300,1",       "--block-size",  "128",    "--head-dim",
      "16",        "--mask",          "global=causal", "--mask", "local=sliding_window:window=96",
      "--layers",  "global=2,local=6"};
  const Result text = run(with({"workload"}, kinds));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("== kind 'global' (2 layers)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("sliding_window:window=96"), std::string::npos) << text.out;
  const Result json = run(with({"workload"}, with(kinds, {"--json"})));
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_NE(json.out.find("\"name\": \"global\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"layers\": 6"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"mask\": \"sliding_window:window=96\""), std::string::npos) << json.out;
}

TEST(KindsCommands, OneUnnamedMaskWritesTodaysPlanFile) {
  const std::string a = temp_path("plain_a.plan"), b = temp_path("plain_b.plan");
  const std::vector<std::string> batch = {"--seqlens",          "900,300", "--block-size", "128",
                                          "--head-dim",         "16",      "--nodes",      "1",
                                          "--devices-per-node", "2"};
  ASSERT_EQ(run(with({"plan"}, with(batch, {"--mask", "causal", "-o", a}))).status, 0);
  ASSERT_EQ(run(with({"plan"}, with(batch, {"-o", b}))).status, 0);
  EXPECT_EQ(read_all(a), read_all(b));
  EXPECT_FALSE(is_kinds_file(read_all(a)));
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(KindsCommands, RefuseBadKindsWithExitStatus2) {
  const std::vector<std::string> batch = {
      "plan", "--seqlens", "300", "--head-dim", "16", "--nodes", "1", "--devices-per-node", "2"};
  expect_usage_error(with(batch, {"--mask", "a=causal", "--mask", "a=full"}),
                     "attention kind 'a' given twice");
  expect_usage_error(with(batch, {"--mask", "a=causal", "--layers", "b=2"}),
                     "no attention kind 'b'");
  expect_usage_error(with(batch, {"--mask", "a=causal", "--layers", "a=0"}), "0 layers");
  expect_usage_error(with(batch, {"--mask", "a=causal", "--layers", "a=2,a=3"}), "given twice");
  expect_usage_error(with(batch, {"--mask", "a=causal", "--mask", "full"}), "name every kind");
  expect_usage_error(with(batch, {"--mask", "causal", "--mask", "full"}), "given 2 times");
  expect_usage_error(with(batch, {"--layers", "a=2"}), "--layers");
  expect_usage_error(with(batch, {"--mask", "bad name=causal"}), "bad name");
  expect_usage_error(with(batch, {"--mask", "a=nonsense"}), "nonsense");
}

// The first array `"key": [...]` of `json`, brackets matched, without its whitespace (which
// depends on how deep it is nested).
std::string json_array(const std::string& json, const std::string& key) {
  const std::size_t begin = json.find("\"" + key + "\": [");
  if (begin == std::string::npos) return "(missing)";
  std::string array;
  int depth = 0;
  for (std::size_t i = json.find('[', begin); i < json.size(); ++i) {
    depth += json[i] == '[' ? 1 : json[i] == ']' ? -1 : 0;
    if (json[i] != ' ' && json[i] != '\n') array += json[i];
    if (depth == 0) return array;
  }
  return "(unterminated)";
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

TEST(KindsCommands, PartitionPlacesTheTokensOnceAndEveryKindsWork) {
  const Result text = run(with({"partition"}, kKinds));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("2 attention kinds on one token placement"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("== kind 'global' (2 layers)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("== kind 'local' (6 layers)"), std::string::npos) << text.out;
  EXPECT_EQ(occurrences(text.out, "\ngreedy "), 2u) << text.out;

  const Result json = run(with({"partition"}, with(kKinds, {"--json"})));
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(occurrences(json.out, "\"token_blocks\": ["), 1u) << "one token placement";
  EXPECT_EQ(occurrences(json.out, "\"work_units\": ["), 2u) << "each kind's work units";
  EXPECT_EQ(occurrences(json.out, "\"zigzag\": {"), 2u);
  EXPECT_NE(json.out.find("\"name\": \"local\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"layers\": 6"), std::string::npos) << json.out;
}

TEST(KindsCommands, PartitionOfOneUnnamedMaskIsUnchanged) {
  const std::vector<std::string> batch = {
      "partition", "--seqlens",          "900,300,1", "--block-size", "128", "--head-dim",
      "16",        "--devices-per-node", "2",         "--json"};
  const Result plain = run(batch);
  ASSERT_EQ(plain.status, 0) << plain.err;
  // One mask's output: no kinds, its placement's token blocks and work units together.
  EXPECT_EQ(plain.out.find("\"kinds\""), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("\"within_bounds\""), std::string::npos) << plain.out;
  const std::string blocks = json_array(plain.out, "token_blocks");
  EXPECT_EQ(blocks, json_array(run(with(batch, {"--mask", "causal"})).out, "token_blocks"));
  // One named kind of 3 layers is placed as the mask alone (place_kinds is place()).
  const Result named = run(with(batch, {"--mask", "a=causal", "--layers", "a=3"}));
  ASSERT_EQ(named.status, 0) << named.err;
  EXPECT_NE(named.out.find("\"kinds\""), std::string::npos) << named.out;
  EXPECT_EQ(json_array(named.out, "token_blocks"), blocks);
  EXPECT_EQ(json_array(named.out, "work_units"), json_array(plain.out, "work_units"));
}

std::vector<float> read_floats(const std::string& path) {
  const NpyArray array = read_npy(path);
  std::vector<float> values(static_cast<std::size_t>(array.element_count()));
  std::memcpy(values.data(), array.data.data(), array.data.size());
  return values;
}

TEST(KindsCommands, AttentionWritesEveryKindsArraysToItsFolder) {
  const AttentionFiles files("kinds");
  const std::vector<std::string> cluster = {"--nodes", "1", "--devices-per-node", "2"};
  const Result plain = run(files.args(cluster));
  ASSERT_EQ(plain.status, 0) << plain.err;
  // One unnamed mask: the five files in --out-dir itself, no folder.
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(files.dir)) {
    EXPECT_TRUE(entry.is_regular_file()) << entry.path();
    ++entries;
  }
  EXPECT_EQ(entries, 5u);
  const std::vector<float> causal_o = read_floats(files.dir + "/o.npy");
  const std::vector<float> causal_dk = read_floats(files.dir + "/dk.npy");

  const Result kinds = run(files.args(
      with(cluster, {"--mask", "global=causal", "--mask", "local=sliding_window:window=32",
                     "--layers", "global=1,local=3", "--check"})));
  ASSERT_EQ(kinds.status, 0) << kinds.err;
  EXPECT_NE(kinds.out.find("error vs dense fp64 attention of kind 'local'"), std::string::npos)
      << kinds.out;
  EXPECT_NE(kinds.out.find("to " + files.dir + "/global ("), std::string::npos) << kinds.out;
  for (const char* kind : {"global", "local"}) {
    for (const char* name : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"}) {
      EXPECT_TRUE(std::filesystem::is_regular_file(files.dir + "/" + kind + "/" + name))
          << kind << "/" << name;
    }
  }
  // The global kind is the causal mask run alone; the local one attends differently.
  const std::vector<float> global_o = read_floats(files.dir + "/global/o.npy");
  const std::vector<float> global_dk = read_floats(files.dir + "/global/dk.npy");
  ASSERT_EQ(global_o.size(), causal_o.size());
  for (std::size_t i = 0; i < global_o.size(); ++i) ASSERT_NEAR(global_o[i], causal_o[i], 1e-5);
  for (std::size_t i = 0; i < global_dk.size(); ++i) ASSERT_NEAR(global_dk[i], causal_dk[i], 1e-5);
  EXPECT_NE(read_floats(files.dir + "/local/o.npy"), global_o);
}

TEST(KindsCommands, AttentionRefusesBadKindsAndWritesNothing) {
  const AttentionFiles files("kinds_reject");
  expect_usage_error(files.args({"--mask", "a=causal", "--mask", "a=full"}),
                     "attention kind 'a' given twice");
  expect_usage_error(files.args({"--mask", "..=causal", "--mask", "b=full"}),
                     "attention kind '..' cannot name a folder");
  EXPECT_TRUE(std::filesystem::is_empty(files.dir));
  // A kind's folder that cannot be made: no kind's files stay, nor the folders made for them.
  write_f4(files.dir + "/local", {1, 1, 1}, 1);
  const Result blocked = run(files.args({"--mask", "global=causal", "--mask", "local=full",
                                         "--nodes", "1", "--devices-per-node", "2"}));
  EXPECT_EQ(blocked.status, 1);
  EXPECT_EQ(blocked.out, "");
  EXPECT_NE(blocked.err.find("local"), std::string::npos) << blocked.err;
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(files.dir)) {
    EXPECT_EQ(entry.path().filename(), "local");
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

TEST(KindsCommands, DemoPlansSimulatesRunsAndChecksEveryKind) {
  const Result r = run(with(
      {"demo"}, with(kKinds, {"--heads", "2", "--kv-heads", "1", "--strategies", "dcp,zigzag"})));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 attention kinds on one token placement"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("every kind's result checked"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("simulated on a100-p4de"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured here on "), std::string::npos) << r.out;
  for (const char* row : {"\ndcp ", "\nzigzag ", " global ", " local "}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  // The step row of each strategy counts every layer: 2 + 6.
  std::size_t steps = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first, second;
    words >> first >> second;
    if (first == "step") {
      EXPECT_EQ(second, "8") << line;
      ++steps;
    }
  }
  EXPECT_EQ(steps, 2u) << r.out;
}

// Bad kinds: exit status 2 naming the value, before anything is planned or written.
TEST(KindsCommands, PartitionAttentionAndDemoRefuseBadKindsWithExitStatus2) {
  const AttentionFiles files("kinds_flags");
  const std::vector<std::vector<std::string>> commands = {
      {"partition", "--seqlens", "300", "--head-dim", "16"},
      files.args({}),
      {"demo", "--seqlens", "300", "--head-dim", "16"}};
  const std::string mask_file = temp_path("kinds_flags_mask.npy");
  for (const auto& command : commands) {
    expect_usage_error(with(command, {"--mask", "a=causal", "--mask", "a=full"}),
                       "attention kind 'a' given twice");
    expect_usage_error(with(command, {"--mask", "a=causal", "--layers", "b=2"}),
                       "no attention kind 'b'");
    expect_usage_error(with(command, {"--mask", "a=causal", "--layers", "a=0"}), "0 layers");
    expect_usage_error(with(command, {"--mask", "a=causal", "--mask-file", mask_file}),
                       "--mask-file or named --mask kinds");
  }
  EXPECT_TRUE(std::filesystem::is_empty(files.dir));
}

}  // namespace
}  // namespace dcp::cli
