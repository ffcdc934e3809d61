// SPDX-License-Identifier: Apache-2.0
// Plan files round-trip exactly, read one Program alone, and reject every damaged file cleanly.
#include "dcp/program/plan_file/plan_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/program/plan_json.h"

#include "tests/testing/sample_plan.h"

namespace dcp {
namespace {

using testing::sample_plan;

// The first field in which two Programs differ, or "" if they are equal.
std::string difference(const Program& a, const Program& b) {
  if (a.device != b.device) return "device";
  if (a.pass != b.pass) return "pass";
  if (a.stages != b.stages) return "stages";
  if (a.owned != b.owned) return "owned";
  if (a.blocks.size() != b.blocks.size()) return "blocks";
  for (std::size_t i = 0; i < a.blocks.size(); ++i) {
    const BlockInfo& x = a.blocks[i];
    const BlockInfo& y = b.blocks[i];
    if (x.id != y.id || x.seq != y.seq || x.tokens != y.tokens || x.begin != y.begin) {
      return "blocks[" + std::to_string(i) + "]";
    }
  }
  if (a.outputs != b.outputs) return "outputs";
  if (a.slots.size() != b.slots.size()) return "slots";
  for (std::size_t i = 0; i < a.slots.size(); ++i) {
    if (a.slots[i].kind != b.slots[i].kind || a.slots[i].tokens != b.slots[i].tokens) {
      return "slots[" + std::to_string(i) + "]";
    }
  }
  if (a.masks != b.masks) return "masks";
  if (a.instructions.size() != b.instructions.size()) return "instructions";
  for (std::size_t i = 0; i < a.instructions.size(); ++i) {
    if (a.instructions[i] != b.instructions[i]) return "instructions[" + std::to_string(i) + "]";
  }
  if (a.instruction_stage != b.instruction_stage) return "instruction_stage";
  return "";
}

std::string difference(const PlanHeader& a, const PlanHeader& b) {
  if (a.strategy != b.strategy) return "strategy";
  if (a.seed != b.seed) return "seed";
  if (a.cluster != b.cluster) return "cluster";
  if (a.q_heads != b.q_heads || a.kv_heads != b.kv_heads || a.head_dim != b.head_dim) {
    return "heads";
  }
  if (a.head_block_size != b.head_block_size || a.kv_heads_per_block != b.kv_heads_per_block) {
    return "head blocks";
  }
  if (a.dtype != b.dtype || a.partial_dtype != b.partial_dtype) return "dtypes";
  if (a.softmax_scale != b.softmax_scale) return "softmax_scale";
  if (a.total_tokens != b.total_tokens || a.sequences != b.sequences ||
      a.token_blocks != b.token_blocks || a.work_units != b.work_units) {
    return "counts";
  }
  return "";
}

void expect_same_plan(const Plan& a, const Plan& b) {
  EXPECT_EQ(difference(a.header, b.header), "");
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    ASSERT_EQ(a.programs(pass).size(), b.programs(pass).size()) << to_string(pass);
    for (std::size_t i = 0; i < a.programs(pass).size(); ++i) {
      EXPECT_EQ(difference(a.programs(pass)[i], b.programs(pass)[i]), "")
          << to_string(pass) << " program " << i;
    }
  }
}

// The message of the InvalidInput that parsing `bytes` throws; fails the test if it parses.
std::string parse_error(const std::string& bytes) {
  try {
    parse_plan(bytes, "plan.bin");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed without an error";
  return "";
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("dcp_plan_file_test_" + name)).string();
}

std::uint64_t u64_at(const std::string& bytes, std::size_t at) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

void put_u32(std::string& bytes, std::size_t at, std::uint32_t value) {
  for (std::size_t i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

// Where the first section (the forward Program of device 0) starts: the header size field.
std::size_t first_section(const std::string& bytes) {
  return static_cast<std::size_t>(u64_at(bytes, 12));
}

TEST(TileMaskHash, EqualMasksHashEqualAndEveryFieldCounts) {
  const TileMask causal{3, 3, {0, 1, 2, 3}, {0, 1, 0, 2, 0, 3}};
  TileMask copy = causal;
  EXPECT_EQ(hash_value(copy), hash_value(causal));
  copy.intervals.back() = 2;  // an interval
  EXPECT_NE(hash_value(copy), hash_value(causal));
  TileMask wider = causal;
  wider.kv_tokens = 4;  // a size
  EXPECT_NE(hash_value(wider), hash_value(causal));
  // Rows moved between the offsets and the intervals: the same integers in another split.
  const TileMask a{2, 4, {0, 1, 2}, {0, 1, 2, 3}};
  const TileMask b{2, 4, {0, 1}, {2, 0, 1, 2, 3}};
  EXPECT_NE(hash_value(a), hash_value(b));
}

TEST(PlanFile, SampleIsAValidPlan) { EXPECT_NO_THROW(check_plan(sample_plan(), "sample")); }

TEST(PlanFile, RoundTripGivesEqualPlanAndIdenticalBytes) {
  const Plan plan = sample_plan();
  const std::string bytes = serialize_plan(plan);
  const Plan parsed = parse_plan(bytes, "sample");
  expect_same_plan(parsed, plan);
  EXPECT_EQ(serialize_plan(parsed), bytes);
}

TEST(PlanFile, RoundTripKeepsTheKeptValuesAndTheirInstructions) {
  const Plan plan = testing::sample_plan_with_kept_kv();
  const std::string bytes = serialize_plan(plan);
  const Plan parsed = parse_plan(bytes, "kept");
  expect_same_plan(parsed, plan);
  EXPECT_EQ(parsed.forward[1].kept, (std::vector<KeptValue>{{SlotKind::kKV, 0, 0}}));
  EXPECT_EQ(serialize_plan(parsed), bytes);
  const std::string json = plan_to_json(parsed);
  EXPECT_NE(json.find("\"op\": \"keep\""), std::string::npos);
  EXPECT_NE(json.find("\"op\": \"restore\""), std::string::npos);
}

// Partials in bf16: the messages carrying them are half as long, and the file keeps the dtype.
TEST(PlanFile, RoundTripKeepsThePartialDtype) {
  const Plan plan = testing::sample_plan(DType::kBf16);
  EXPECT_NO_THROW(check_plan(plan, "bf16 partials"));
  const std::string bytes = serialize_plan(plan);
  const Plan parsed = parse_plan(bytes, "bf16 partials");
  expect_same_plan(parsed, plan);
  EXPECT_EQ(parsed.header.partial_dtype, DType::kBf16);
  EXPECT_NE(plan_to_json(parsed).find("\"partial_dtype\": \"bf16\""), std::string::npos);
}

// Partials travel in fp32 or the storage dtype; any other is refused naming both.
TEST(PlanFile, RefusesAPartialDtypeOtherThanFp32OrTheStorageDtype) {
  Plan plan = testing::sample_plan(DType::kBf16);
  plan.header.partial_dtype = DType::kFp16;  // storage is bf16
  try {
    check_plan(plan, "fp16 partials");
    ADD_FAILURE() << "fp16 partials of a bf16 plan accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("partials travel in fp16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

TEST(PlanFile, RefusesKeptValuesThatCannotBeKept) {
  const auto refused = [](auto&& change, const std::string& expected) {
    Plan plan = testing::sample_plan_with_kept_kv();
    change(plan);
    try {
      check_plan(plan, "kept");
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused([](Plan& p) { p.forward[1].kept[0].kind = SlotKind::kQ; }, "only kv values are");
  refused(
      [](Plan& p) {
        p.forward[1].kept.push_back({SlotKind::kKV, 1, 0});
      },
      "owned by this device");
  refused([](Plan& p) { p.forward[1].kept.push_back({SlotKind::kKV, 0, 0}); }, "repeated");
  refused(
      [](Plan& p) {
        p.backward[1].instructions[0] = Keep{3, 0, 0};
      },
      "belongs to the forward pass");
  refused([](Plan& p) { p.backward[1].kept.clear(); }, "not in the program's kept values");
}

TEST(PlanFile, JsonOfTheParsedPlanEqualsJsonOfTheOriginal) {
  const Plan plan = sample_plan();
  EXPECT_EQ(plan_to_json(parse_plan(serialize_plan(plan), "sample")), plan_to_json(plan));
}

TEST(PlanFile, SerializationIsDeterministic) {
  const Plan plan = sample_plan();
  const Plan copy = plan;
  EXPECT_EQ(serialize_plan(plan), serialize_plan(plan));
  EXPECT_EQ(serialize_plan(plan), serialize_plan(copy));
  EXPECT_EQ(serialize_plan(plan), serialize_plan(sample_plan()));
  EXPECT_EQ(plan_to_json(plan), plan_to_json(copy));
}

TEST(PlanFile, ChecksumIsFnv1a64) {
  EXPECT_EQ(plan_checksum(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(plan_checksum("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(plan_checksum("foobar"), 0x85944171f73967e8ULL);
}

TEST(PlanFile, WriteThenReadFileRoundTrips) {
  const std::string path = temp_path("round_trip.plan");
  const Plan plan = sample_plan();
  write_plan_file(path, plan);
  expect_same_plan(read_plan_file(path), plan);

  const PlanFileSummary summary = read_plan_summary(path);
  EXPECT_EQ(difference(summary.header, plan.header), "");
  EXPECT_EQ(summary.file_bytes, std::filesystem::file_size(path));
  ASSERT_EQ(summary.sections.size(), 4u);
  EXPECT_EQ(summary.sections[0].offset, summary.header_bytes);
  EXPECT_EQ(summary.sections[2].device, 0);
  EXPECT_EQ(summary.sections[2].pass, Pass::kBackward);
  EXPECT_EQ(summary.sections[3].offset + summary.sections[3].bytes, summary.file_bytes);
  EXPECT_EQ(difference(read_plan_header(path), plan.header), "");
  std::filesystem::remove(path);
}

TEST(PlanFile, ReadProgramEqualsTheFullParse) {
  const std::string path = temp_path("read_program.plan");
  const Plan plan = sample_plan();
  write_plan_file(path, plan);
  const Plan full = read_plan_file(path);
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    for (std::int32_t device = 0; device < 2; ++device) {
      PlanHeader header;
      const Program program = read_program(path, device, pass, &header);
      EXPECT_EQ(difference(program, full.programs(pass)[static_cast<std::size_t>(device)]), "")
          << to_string(pass) << " device " << device;
      EXPECT_EQ(difference(header, plan.header), "");
    }
  }
  EXPECT_EQ(difference(read_program(path, 1, Pass::kBackward), plan.backward[1]), "");
  std::filesystem::remove(path);
}

TEST(PlanFile, ReadProgramRejectsADeviceOutsideThePlan) {
  const std::string path = temp_path("device_range.plan");
  write_plan_file(path, sample_plan());
  for (const std::int32_t device : {2, 9, -1}) {
    try {
      read_program(path, device, Pass::kForward);
      ADD_FAILURE() << "device " << device << " was read";
    } catch (const InvalidInput& e) {
      EXPECT_EQ(std::string(e.what()), "plan " + path + " is for 2 devices, device " +
                                           std::to_string(device) + " requested");
    }
  }
  std::filesystem::remove(path);
}

TEST(PlanFile, ReadProgramReadsOnlyItsSection) {
  // Damage the backward Program of device 1: the forward Program of device 0 still reads, the
  // damaged one does not, and neither does the whole plan.
  const std::string path = temp_path("one_section.plan");
  std::string bytes = serialize_plan(sample_plan());
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x40);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_NO_THROW(read_program(path, 0, Pass::kForward));
  EXPECT_THROW(read_program(path, 1, Pass::kBackward), InvalidInput);
  EXPECT_THROW(read_plan_file(path), InvalidInput);
  std::filesystem::remove(path);
}

TEST(PlanFile, EveryTruncationIsInvalidInput) {
  const std::string bytes = serialize_plan(sample_plan());
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_THROW(parse_plan(bytes.substr(0, length), "plan.bin"), InvalidInput)
        << "prefix of " << length << " bytes";
  }
  EXPECT_NE(parse_error(bytes.substr(0, 10)).find("truncated"), std::string::npos);
  EXPECT_NE(parse_error(bytes.substr(0, 200)).find("truncated"), std::string::npos);
  EXPECT_NE(parse_error(bytes.substr(0, bytes.size() - 1)).find("truncated"), std::string::npos);
}

TEST(PlanFile, TruncatedFilesFailInReadProgramToo) {
  const std::string path = temp_path("truncated.plan");
  const std::string bytes = serialize_plan(sample_plan());
  for (const std::size_t length : {std::size_t{0}, std::size_t{5}, std::size_t{19},
                                   std::size_t{100}, first_section(bytes), bytes.size() - 1}) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(length));
    }
    EXPECT_THROW(read_program(path, 0, Pass::kForward), InvalidInput) << length << " bytes";
    EXPECT_THROW(read_plan_summary(path), InvalidInput) << length << " bytes";
  }
  std::filesystem::remove(path);
}

TEST(PlanFile, EveryChangedByteIsCaught) {
  const std::string bytes = serialize_plan(sample_plan());
  for (std::size_t at = 0; at < bytes.size(); ++at) {
    for (const int mask : {0x01, 0x80}) {
      std::string damaged = bytes;
      damaged[at] = static_cast<char>(static_cast<unsigned char>(damaged[at]) ^ mask);
      EXPECT_THROW(parse_plan(damaged, "plan.bin"), InvalidInput)
          << "byte " << at << " ^ " << static_cast<int>(mask);
    }
  }
}

TEST(PlanFile, DamagedSectionNamesTheProgram) {
  std::string bytes = serialize_plan(sample_plan());
  const std::size_t at = first_section(bytes) + 20;
  bytes[at] = static_cast<char>(bytes[at] ^ 1);
  EXPECT_EQ(parse_error(bytes),
            "plan.bin: checksum mismatch in the forward program of device 0 (the file is damaged)");
}

TEST(PlanFile, ResealedChangesEitherParseCanonicallyOrFailCleanly) {
  // Behind the checksums: every byte changed in its lowest bit and set to 0xFF, checksums
  // recomputed. A plan that
  // still parses must serialize back to exactly its bytes (the encoding is canonical).
  const std::string bytes = serialize_plan(sample_plan());
  int parsed = 0;
  for (std::size_t at = 0; at < bytes.size(); ++at) {
    for (const int value : {static_cast<unsigned char>(bytes[at]) ^ 1, 0xFF}) {
      std::string changed = bytes;
      changed[at] = static_cast<char>(value);
      changed = reseal_plan_bytes(changed);
      try {
        const Plan plan = parse_plan(changed, "plan.bin");
        EXPECT_EQ(serialize_plan(plan), changed) << "byte " << at << " = " << value;
        ++parsed;
      } catch (const InvalidInput&) {
      }
    }
  }
  EXPECT_GT(parsed, 0);
}

TEST(PlanFile, WrongMagicIsNotAPlanFile) {
  std::string bytes = serialize_plan(sample_plan());
  bytes[1] = 'X';
  EXPECT_EQ(parse_error(bytes),
            "plan.bin: not a dcp plan file (it does not start with \"DCPPLAN\\0\")");
  EXPECT_NE(parse_error("hello").find("not a dcp plan file"), std::string::npos);
  EXPECT_NE(parse_error("").find("empty file"), std::string::npos);
  EXPECT_NE(parse_error(std::string("\x93NUMPY\x01\x00", 8)).find("not a dcp plan file"),
            std::string::npos);
}

TEST(PlanFile, OtherFormatVersionIsRejectedByTheVersionCheck) {
  std::string bytes = serialize_plan(sample_plan());
  put_u32(bytes, 8, 7);
  EXPECT_EQ(parse_error(reseal_plan_bytes(bytes)),
            "plan.bin: plan format version 7, this dcp reads version 4");
}

// Version 1 plans sent every device's partial straight to the owner, and version 2 Programs have
// no kept values; their files read the same bytes with another meaning, so they are refused,
// naming both versions.
TEST(PlanFile, OlderVersionsAreRefusedNamingBothVersions) {
  for (const std::uint32_t version : {1u, 2u}) {
    std::string bytes = serialize_plan(sample_plan());
    put_u32(bytes, 8, version);
    EXPECT_EQ(
        parse_error(reseal_plan_bytes(bytes)),
        "plan.bin: plan format version " + std::to_string(version) + ", this dcp reads version 4");
  }
}

// The header's partial routing is a field of the file: written, read back, and a value out of
// range refused by name.
TEST(PlanFile, PartialRoutingTravelsInTheHeader) {
  Plan plan = sample_plan();
  for (const PartialRouting routing : {PartialRouting::kReduceInNode, PartialRouting::kDirect}) {
    plan.header.partial_routing = routing;
    EXPECT_EQ(parse_plan(serialize_plan(plan), "plan.bin").header.partial_routing, routing);
  }
  std::string bytes = serialize_plan(plan);
  bytes[58] = 2;  // after dtype (56) and partial_dtype (57)
  EXPECT_NE(parse_error(reseal_plan_bytes(bytes)).find("partial_routing"), std::string::npos)
      << parse_error(reseal_plan_bytes(bytes));
}

TEST(PlanFile, HugeCountsAreRejectedBeforeAllocating) {
  const std::string bytes = serialize_plan(sample_plan());
  // The owned count of the first section: after device (4), pass (1) and stages (4).
  std::string owned = bytes;
  put_u32(owned, first_section(bytes) + 9, 0xFFFFFFFFu);
  const std::string message = parse_error(reseal_plan_bytes(owned));
  EXPECT_NE(message.find("forward program of device 0"), std::string::npos) << message;
  EXPECT_NE(message.find("owned 4294967295 needs at least"), std::string::npos) << message;

  // The section count, after the 3-byte strategy name "dcp".
  std::string sections = bytes;
  put_u32(sections, 95 + 3, 0xFFFFFFFFu);
  EXPECT_NE(parse_error(reseal_plan_bytes(sections)).find("section count 4294967295"),
            std::string::npos);

  std::string strategy = bytes;
  put_u32(strategy, 91, 0x7FFFFFFFu);
  EXPECT_NE(parse_error(reseal_plan_bytes(strategy)).find("strategy length"), std::string::npos);

  std::string header = bytes;
  header[12 + 7] = '\x40';  // header size 2^62
  EXPECT_NE(parse_error(reseal_plan_bytes(header)).find("header size"), std::string::npos);
}

TEST(PlanFile, TrailingBytesAreRejected) {
  const std::string bytes = serialize_plan(sample_plan());
  EXPECT_NE(parse_error(reseal_plan_bytes(bytes + "x")).find("1 unexpected bytes after the last"),
            std::string::npos);
  // Inside a section: one byte more than the Program's fields.
  const PlanFileSummary summary = parse_plan_summary(bytes, "plan.bin");
  const PlanSection& last = summary.sections.back();
  const std::string payload = bytes.substr(static_cast<std::size_t>(last.offset)) + "x";
  const std::string message = parse_error(replace_plan_section(bytes, 3, payload));
  EXPECT_NE(message.find("backward program of device 1: 1 unexpected bytes after the program"),
            std::string::npos)
      << message;
  // One byte short: the last count promises more than is left.
  const std::string short_payload = payload.substr(0, payload.size() - 2);
  EXPECT_NE(parse_error(replace_plan_section(bytes, 3, short_payload))
                .find("instruction_stage 13 needs at least 52 bytes, only 51 are left"),
            std::string::npos);
  const std::string message2 = parse_error(replace_plan_section(bytes, 3, payload.substr(0, 6)));
  EXPECT_NE(message2.find("backward program of device 1: truncated at byte "), std::string::npos)
      << message2;
  EXPECT_NE(message2.find(" reading stages (4 bytes needed, 1 left)"), std::string::npos)
      << message2;
}

TEST(PlanFile, ReplaceSectionWithItsOwnPayloadChangesNothing) {
  const std::string bytes = serialize_plan(sample_plan());
  const PlanFileSummary summary = parse_plan_summary(bytes, "plan.bin");
  for (std::size_t i = 0; i < summary.sections.size(); ++i) {
    const PlanSection& section = summary.sections[i];
    const std::string payload = bytes.substr(static_cast<std::size_t>(section.offset),
                                             static_cast<std::size_t>(section.bytes));
    EXPECT_EQ(replace_plan_section(bytes, i, payload), bytes) << "section " << i;
  }
  EXPECT_THROW(replace_plan_section(bytes, 4, ""), InvalidInput);
  EXPECT_THROW(replace_plan_section(bytes.substr(0, 50), 0, ""), InvalidInput);
}

struct Fault {
  std::string name;
  std::function<void(Plan&)> apply;
  std::vector<std::string> fragments;  // the message names these
};

std::vector<Fault> structural_faults() {
  const auto instruction = [](Plan& plan, Pass pass, std::size_t device,
                              std::size_t index) -> Instruction& {
    return (pass == Pass::kForward ? plan.forward : plan.backward)[device].instructions[index];
  };
  return {
      {"load slot out of range",
       [=](Plan& p) { std::get<Load>(instruction(p, Pass::kForward, 0, 0)).slot = 99; },
       {"plan.bin: forward program of device 0: instructions[0] (load): slot 99 is not a slot"}},
      {"load from no slot",
       [=](Plan& p) { std::get<Load>(instruction(p, Pass::kForward, 0, 2)).slot = kNoSlot; },
       {"instructions[2] (load): slot -1 is not a slot (5 slots)"}},
      {"store slot out of range",
       [=](Plan& p) { std::get<Store>(instruction(p, Pass::kBackward, 1, 5)).slot = 8; },
       {"backward program of device 1", "instructions[5] (store): slot 8", "or -1 for none"}},
      {"store of an input kind",
       [=](Plan& p) { std::get<Store>(instruction(p, Pass::kForward, 1, 8)).kind = SlotKind::kQ; },
       {"forward program of device 1", "kind q is not an output kind"}},
      {"store of a block outside the block table",
       [=](Plan& p) { std::get<Store>(instruction(p, Pass::kForward, 0, 5)).block = 1; },
       {"instructions[5] (store): block 1 is not in the program's block table"}},
      {"kv head block out of range",
       [=](Plan& p) { std::get<Store>(instruction(p, Pass::kBackward, 0, 13)).head_block = 1; },
       {"instructions[13] (store): head_block 1 is outside [0, 1) kv head blocks"}},
      {"q head block out of range",
       [=](Plan& p) { std::get<Load>(instruction(p, Pass::kForward, 1, 1)).head_block = 2; },
       {"instructions[1] (load): head_block 2 is outside [0, 2) q head blocks"}},
      {"peer out of range",
       [=](Plan& p) { std::get<Launch>(instruction(p, Pass::kForward, 0, 1)).ops[0].peer = 2; },
       {"instructions[1] (launch): ops[0]: peer 2 is outside [0, 2)"}},
      {"comm slot out of range",
       [=](Plan& p) { std::get<Launch>(instruction(p, Pass::kBackward, 0, 1)).ops[1].slot = 7; },
       {"instructions[1] (launch): ops[1]: slot 7 is not a slot"}},
      {"wait for a launch that does not exist",
       [=](Plan& p) { std::get<Wait>(instruction(p, Pass::kForward, 1, 5)).launch = 3; },
       {"instructions[5] (wait): launch 3 is outside [0, 1) launches"}},
      {"mask out of range",
       [=](Plan& p) {
         std::get<AttnBackward>(instruction(p, Pass::kBackward, 1, 4)).rows[1].kv[0].mask = 5;
       },
       {"backward program of device 1: instructions[4] (attn_bwd): rows[1].kv[0]: mask 5"}},
      {"dkv out of range",
       [=](Plan& p) {
         std::get<AttnBackward>(instruction(p, Pass::kBackward, 1, 7)).rows[0].kv[0].dkv = -2;
       },
       {"rows[0].kv[0]: dkv -2 is not a slot"}},
      {"merge source out of range",
       [=](Plan& p) { std::get<Merge>(instruction(p, Pass::kForward, 1, 7)).src = 7; },
       {"instructions[7] (merge): src 7"}},
      {"sum destination out of range",
       [=](Plan& p) { std::get<Sum>(instruction(p, Pass::kBackward, 0, 12)).dst = -1; },
       {"instructions[12] (sum): dst -1"}},
      {"free of a slot out of range",
       [=](Plan& p) { std::get<Free>(instruction(p, Pass::kForward, 0, 11)).slots.push_back(5); },
       {"instructions[11] (free): slots[1]: slot 5"}},
      {"row offsets of the wrong length",
       [](Plan& p) { p.forward[0].masks[0].row_offsets.pop_back(); },
       {"masks[0]: row_offsets has 4 entries, expected q_tokens + 1 = 5"}},
      {"interval outside the tile",
       [](Plan& p) { p.backward[0].masks[0].intervals.back() = 5; },
       {"backward program of device 0: masks[0]: row 3 interval [0, 5)"}},
      {"odd interval list",
       [](Plan& p) { p.forward[1].masks[0].intervals.push_back(0); },
       {"masks[0]: intervals has an odd number"}},
      {"row offsets out of order",
       [](Plan& p) {
         p.forward[1].masks[0].row_offsets = {0, 3, 2, 3, 4};
       },
       {"masks[0]: row_offsets are not monotone"}},
      {"instruction stages missing",
       [](Plan& p) { p.forward[1].instruction_stage.pop_back(); },
       {"instruction_stage has 10 entries for 11 instructions"}},
      {"stage beyond the epilogue",
       [](Plan& p) { p.forward[0].instruction_stage[3] = 2; },
       {"instruction_stage[3]: stage 2 is outside [0, stages = 1]"}},
      {"negative stage",
       [](Plan& p) { p.backward[0].instruction_stage[0] = -1; },
       {"instruction_stage[0]: stage -1"}},
      {"no stages", [](Plan& p) { p.backward[1].stages = 0; }, {"stages is 0"}},
      {"blocks out of order",
       [](Plan& p) { std::swap(p.forward[1].blocks[0], p.forward[1].blocks[1]); },
       {"blocks[1]: id 0 after 1"}},
      {"block beyond the batch",
       [](Plan& p) { p.forward[0].blocks[1].begin = 9; },
       {"blocks[1]: tokens [9, 9 + 2) are outside the batch's 10 tokens"}},
      {"owned block not in the table",
       [](Plan& p) { p.forward[0].owned.push_back(1); },
       {"owned[2]: block 1 is not in the program's block table"}},
      {"owned twice",
       [](Plan& p) { p.backward[0].owned.push_back(0); },
       {"owned: block 0 appears twice"}},
      {"output of an input kind",
       [](Plan& p) { p.backward[1].outputs[0].kind = SlotKind::kQGrad; },
       {"outputs[0]: kind qgrad is not an output kind"}},
      {"slot of no tokens",
       [](Plan& p) { p.forward[0].slots[2].tokens = 0; },
       {"slots[2]: tokens is 0"}},
      {"device field disagrees with the section table",
       [](Plan& p) { p.forward[1].device = 0; },
       {"forward program of device 1: device field is 0, the section table says 1"}},
      {"pass field disagrees with the section table",
       [](Plan& p) { p.backward[0].pass = Pass::kForward; },
       {"backward program of device 0: pass field is forward"}},
      {"missing program", [](Plan& p) { p.backward.pop_back(); }, {"3 sections, expected 4"}},
      {"cluster shape",
       [](Plan& p) { p.header.cluster.nodes = 0; },
       {"plan.bin: cluster: nodes must be in [1, 65536], got 0"}},
      {"heads not divisible",
       [](Plan& p) { p.header.kv_heads = 3; },
       {"attention shape: q heads 2 is not divisible by kv heads 3"}},
      {"kv heads per block",
       [](Plan& p) { p.header.kv_heads_per_block = 2; },
       {"kv_heads_per_block is 2"}},
      {"softmax scale", [](Plan& p) { p.header.softmax_scale = 0; }, {"softmax_scale"}},
      {"strategy name",
       [](Plan& p) { p.header.strategy = "dc\np"; },
       {"strategy name has a byte 10"}},
      {"negative counts", [](Plan& p) { p.header.work_units = -1; }, {"work_units -1"}},
  };
}

TEST(PlanFile, StructurallyInvalidProgramsAreRejectedNamingTheField) {
  for (const Fault& fault : structural_faults()) {
    Plan plan = sample_plan();
    fault.apply(plan);
    const std::string message = parse_error(serialize_plan(plan));
    for (const std::string& fragment : fault.fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << fault.name << ": \"" << message << "\" lacks \"" << fragment << "\"";
    }
  }
}

TEST(PlanFile, CheckPlanCatchesWhatTheReaderCatches) {
  for (const Fault& fault : structural_faults()) {
    Plan plan = sample_plan();
    fault.apply(plan);
    EXPECT_THROW(check_plan(plan, "plan.bin"), InvalidInput) << fault.name;
  }
}

TEST(PlanFile, EnumValuesOutOfRangeAreRejected) {
  Plan dtype = sample_plan();
  dtype.header.dtype = static_cast<DType>(7);
  EXPECT_NE(parse_error(serialize_plan(dtype)).find("dtype 7 is out of range [0, 2]"),
            std::string::npos);
  Plan kind = sample_plan();
  kind.backward[1].slots[3].kind = static_cast<SlotKind>(6);
  EXPECT_NE(parse_error(serialize_plan(kind)).find("backward program of device 1: byte "),
            std::string::npos);
  EXPECT_NE(parse_error(serialize_plan(kind)).find("slots[].kind 6 is out of range [0, 5]"),
            std::string::npos);
  Plan direction = sample_plan();
  std::get<Launch>(direction.forward[0].instructions[1]).ops[0].direction =
      static_cast<CommOp::Direction>(2);
  EXPECT_NE(parse_error(serialize_plan(direction)).find("launch.ops[].direction 2"),
            std::string::npos);
  EXPECT_THROW(check_plan(direction, "memory"), InvalidInput);
}

TEST(PlanFile, WriteRejectsAnInvalidPlanAndWritesNothing) {
  const std::string path = temp_path("invalid.plan");
  std::filesystem::remove(path);
  Plan plan = sample_plan();
  plan.forward[0].slots.pop_back();
  try {
    write_plan_file(path, plan);
    ADD_FAILURE() << "an invalid plan was written";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": forward program of device 0", 0), 0u)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(PlanFile, WriteToAMissingDirectoryIsIoErrorAndLeavesNoFile) {
  const std::filesystem::path dir = temp_path("no_such_directory");
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "plan.bin").string();
  EXPECT_THROW(write_plan_file(path, sample_plan()), IoError);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(PlanFile, ReadingAMissingFileIsIoError) {
  const std::string path = temp_path("missing.plan");
  std::filesystem::remove(path);
  EXPECT_THROW(read_plan_file(path), IoError);
  EXPECT_THROW(read_plan_summary(path), IoError);
  EXPECT_THROW(read_program(path, 0, Pass::kForward), IoError);
}

TEST(PlanFile, ReadingADirectoryIsIoError) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_THROW(read_plan_file(dir), IoError);
  EXPECT_THROW(read_program(dir, 0, Pass::kForward), IoError);
}

}  // namespace
}  // namespace dcp
