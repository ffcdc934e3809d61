// SPDX-License-Identifier: Apache-2.0
// The planner's options table, the command line's flags it gives, and its checks in both
// spellings (flags and Python's keywords).
#include "dcp/planner_options.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "apps/cli/plan_flags.h"
#include "tests/apps/cli_testing.h"

namespace dcp::cli {
namespace {

// What reading `given` with `read` (planner_options_from, batch_options_from) throws.
template <typename Read>
std::string error_of(Read read, const GivenOptions& given, OptionSpelling spelling) {
  try {
    read(given, spelling);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string error_of(const GivenOptions& given, OptionSpelling spelling) {
  return error_of(planner_options_from, given, spelling);
}

std::string batch_error_of(const GivenOptions& given, OptionSpelling spelling) {
  return error_of(batch_options_from, given, spelling);
}

TEST(PlannerOptions, AreThePlanFlagsOneForOneWithTheirHelpAndDefault) {
  const auto options = planner_options();
  const std::vector<FlagSpec>& flags = plan_flags();
  ASSERT_EQ(flags.size(), options.size());
  for (std::size_t i = 0; i < options.size(); ++i) {
    const PlannerOption& option = options[i];
    EXPECT_EQ(flags[i].name, flag_of(option.name));
    EXPECT_EQ(flags[i].value_name, option.value_name) << option.name;
    EXPECT_EQ(flags[i].value_name.empty(), option.type == OptionType::kFlag) << option.name;
    EXPECT_EQ(flags[i].help.substr(0, option.help.size()), option.help) << option.name;
    if (!option.default_text.empty()) {
      EXPECT_TRUE(flags[i].help.ends_with(" [" + std::string(option.default_text) + "]"))
          << flags[i].help;
    }
  }
  EXPECT_EQ(flag_of("devices_per_node"), "--devices-per-node");
}

TEST(PlannerOptions, AreEachListedByThePlanCommandsHelp) {
  const Result r = run({"plan", "--help"});
  ASSERT_EQ(r.status, 0);
  for (const PlannerOption& option : planner_options()) {
    // Appends only: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string(...) at -O2.
    std::string line = "  ";
    line.append(flag_of(option.name));
    if (!option.value_name.empty()) line.append(" ").append(option.value_name);
    EXPECT_NE(r.out.find(line), std::string::npos) << option.name;
  }
}

TEST(PlannerOptions, GiveTheSameOptionsFromFlagTextAndFromTypedKeywords) {
  const PlanOptions from_flags = planner_options_from({{"strategy", std::string("ring")},
                                                       {"static_dp", std::string("2")},
                                                       {"nodes", std::string("2")},
                                                       {"devices_per_node", std::string("4")},
                                                       {"token_flops", std::string("2e8")},
                                                       {"compute_masked_tiles", true},
                                                       {"partial_dtype", std::string("bf16")}},
                                                      OptionSpelling::kFlag);
  const PlanOptions from_keywords = planner_options_from({{"strategy", std::string("ring")},
                                                          {"static_dp", std::int64_t{2}},
                                                          {"nodes", std::int64_t{2}},
                                                          {"devices_per_node", std::int64_t{4}},
                                                          {"token_flops", 2e8},
                                                          {"compute_masked_tiles", true},
                                                          {"partial_dtype", std::string("bf16")}},
                                                         OptionSpelling::kKeyword);
  for (const PlanOptions* options : {&from_flags, &from_keywords}) {
    EXPECT_EQ(options->strategy, Strategy::kRing);
    EXPECT_EQ(options->statics.data_parallel, 2);
    EXPECT_EQ(options->cluster.shape.devices(), 8);
    EXPECT_EQ(options->token_flops, 2e8);
    EXPECT_EQ(options->statics.masked_tiles, MaskedTiles::kCompute);
    EXPECT_EQ(options->partial_dtype, DType::kBf16);
  }
  // None given: PlanOptions' defaults.
  const PlanOptions defaults = planner_options_from({}, OptionSpelling::kKeyword);
  EXPECT_EQ(defaults.strategy, PlanOptions{}.strategy);
  EXPECT_EQ(defaults.statics.data_parallel, PlanOptions{}.statics.data_parallel);
  EXPECT_EQ(defaults.kept_kv_budget, PlanOptions{}.kept_kv_budget);
}

TEST(PlannerOptions, NameTheOptionInTheSpellingOfWhereItCameFrom) {
  EXPECT_EQ(error_of({{"stages", std::string("-1")}}, OptionSpelling::kFlag),
            "--stages '-1': must be in [0, 64]");
  EXPECT_EQ(error_of({{"stages", std::int64_t{-1}}}, OptionSpelling::kKeyword),
            "stages -1: must be in [0, 64]");
  EXPECT_EQ(error_of({{"strategy", std::string("ring")}, {"keep_kv", std::string("all")}},
                     OptionSpelling::kKeyword),
            "keep_kv applies to strategy dcp or dcp-pure; ring has a fixed schedule");
  EXPECT_EQ(error_of({{"static_dp", std::int64_t{2}}, {"strategy", std::string("dcp-pure")}},
                     OptionSpelling::kFlag),
            "--static-dp applies to static strategies and dcp's static candidates, not dcp-pure");
  EXPECT_EQ(error_of({{"token_flops", -1.0}}, OptionSpelling::kKeyword),
            "token_flops must be a number >= 0, got -1");
  EXPECT_EQ(error_of({{"eps_memory", std::string("x")}}, OptionSpelling::kFlag),
            "--eps-memory: 'x' is not a finite number");
  EXPECT_EQ(error_of({{"max_device_tokens", std::int64_t{-1}}}, OptionSpelling::kKeyword),
            "max_device_tokens -1: must be in [0, 2147483648]");
  EXPECT_EQ(error_of({{"strategy", std::string("ulysses")}, {"max_device_tokens", std::int64_t{8}}},
                     OptionSpelling::kFlag),
            "--max-device-tokens applies to --strategy dcp or dcp-pure; ulysses has a fixed "
            "schedule");
  EXPECT_EQ(error_of({{"nodes", 1.5}}, OptionSpelling::kKeyword),
            "nodes 1.5: takes a value of type int");
  EXPECT_EQ(error_of({{"eps_computer", 0.1}}, OptionSpelling::kKeyword),
            "unknown planner option eps_computer");
}

// The batch's options: listed by the help of every command that plans a batch, read alike from
// flag text and typed keywords, and checked in one place, each error naming the option as it was
// spelled.
TEST(BatchOptions, AreFlagsOfThePlanCommandReadAlikeFromTextAndKeywords) {
  const Result r = run({"plan", "--help"});
  ASSERT_EQ(r.status, 0);
  for (const PlannerOption& option : batch_options()) {
    std::string line = "  ";
    line.append(flag_of(option.name)).append(" ").append(option.value_name);
    EXPECT_NE(r.out.find(line), std::string::npos) << option.name;
  }
  const BatchOptions from_flags = batch_options_from({{"heads", std::string("16")},
                                                      {"kv_heads", std::string("4")},
                                                      {"head_dim", std::string("64")},
                                                      {"dtype", std::string("fp16")},
                                                      {"softmax_scale", std::string("0.25")},
                                                      {"block_size", std::string("512")},
                                                      {"head_block_size", std::string("2")}},
                                                     OptionSpelling::kFlag);
  const BatchOptions from_keywords = batch_options_from({{"heads", std::int64_t{16}},
                                                         {"kv_heads", std::int64_t{4}},
                                                         {"head_dim", std::int64_t{64}},
                                                         {"dtype", std::string("fp16")},
                                                         {"softmax_scale", 0.25},
                                                         {"block_size", std::int64_t{512}},
                                                         {"head_block_size", std::int64_t{2}}},
                                                        OptionSpelling::kKeyword);
  for (const BatchOptions* read : {&from_flags, &from_keywords}) {
    EXPECT_EQ(read->shape.q_heads, 16);
    EXPECT_EQ(read->shape.kv_heads, 4);
    EXPECT_EQ(read->shape.head_dim, 64);
    EXPECT_EQ(read->shape.softmax_scale, 0.25);
  }
  EXPECT_EQ(from_flags.shape.dtype, DType::kFp16);
  EXPECT_EQ(from_flags.block_size, 512);
  EXPECT_EQ(from_keywords.block_size, 512);
  EXPECT_EQ(from_flags.head_block_size, 2);
  EXPECT_EQ(
      batch_options_from({{"block_size", std::string("auto")}}, OptionSpelling::kFlag).block_size,
      0);
  EXPECT_EQ(batch_options_from({}, OptionSpelling::kKeyword).shape.q_heads,
            AttentionShape{}.q_heads);
  EXPECT_EQ(batch_error_of({{"kv_heads", std::string("3")}}, OptionSpelling::kFlag),
            "--heads 8 --kv-heads 3: q heads 8 is not divisible by kv heads 3");
  EXPECT_EQ(batch_error_of({{"softmax_scale", -1.0}}, OptionSpelling::kKeyword),
            "softmax_scale -1: must be > 0");
  EXPECT_EQ(batch_error_of({{"block_size", std::string("0")}}, OptionSpelling::kFlag),
            "--block-size '0': must be in [1, 2147483648]");
  EXPECT_EQ(batch_error_of({{"stages", std::int64_t{1}}}, OptionSpelling::kKeyword),
            "unknown batch option stages");
}

}  // namespace
}  // namespace dcp::cli
