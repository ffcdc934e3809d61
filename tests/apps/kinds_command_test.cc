// SPDX-License-Identifier: Apache-2.0
// Attention kinds on the command line: dcp plan, verify, simulate and run with --mask KIND=SPEC
// and --layers, the plan file they share, and every bad kind refused with exit status 2.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/program/model_plan_file.h"

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
  // Commands that plan one mask say so.
  expect_usage_error({"partition", "--seqlens", "300", "--mask", "a=causal"},
                     "takes one unnamed mask");
}

}  // namespace
}  // namespace dcp::cli
