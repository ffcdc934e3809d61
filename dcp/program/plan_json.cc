// SPDX-License-Identifier: Apache-2.0
// JSON export of plans and Programs.
#include "dcp/program/plan_json.h"

#include <cstdint>
#include <limits>
#include <vector>

namespace dcp {
namespace {

// Callers hold a JsonWriter::Inline: these arrays go on one line.
void write_ints(JsonWriter& json, const std::vector<std::int32_t>& values) {
  json.begin_array();
  for (const std::int32_t value : values) json.value(value);
  json.end_array();
}

std::string_view direction_name(CommOp::Direction direction) {
  return direction == CommOp::Direction::kSend ? "send" : "recv";
}

void write_rows(JsonWriter& json, const std::vector<AttnRow>& rows) {
  json.key("rows").begin_array();
  for (const AttnRow& row : rows) {
    JsonWriter::Inline line(json);
    json.begin_object();
    json.field("q", row.q).field("out", row.out).field("accumulate", row.accumulate);
    json.key("kv").begin_array();
    for (const AttnKv& kv : row.kv) {
      json.begin_object();
      json.field("kv", kv.kv).field("mask", kv.mask);
      json.field("dkv", kv.dkv).field("dkv_accumulate", kv.dkv_accumulate);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
}

// Fields after "op". Short instructions are written on one line; launches and attention calls
// get one line per operation or row.
struct InstructionFields {
  JsonWriter& json;
  void operator()(const Load& x) const {
    json.field("slot", x.slot).field("block", x.block).field("head_block", x.head_block);
  }
  void operator()(const Store& x) const {
    json.field("slot", x.slot).field("kind", to_string(x.kind));
    json.field("block", x.block).field("head_block", x.head_block);
  }
  void operator()(const Launch& x) const {
    json.field("id", x.id);
    json.key("ops").begin_array();
    for (const CommOp& op : x.ops) {
      JsonWriter::Inline line(json);
      json.begin_object();
      json.field("direction", direction_name(op.direction)).field("peer", op.peer);
      json.field("slot", op.slot).field("bytes", op.bytes);
      json.end_object();
    }
    json.end_array();
  }
  void operator()(const Wait& x) const { json.field("launch", x.launch); }
  void operator()(const AttnForward& x) const { write_rows(json, x.rows); }
  void operator()(const AttnBackward& x) const { write_rows(json, x.rows); }
  void operator()(const Merge& x) const { json.field("dst", x.dst).field("src", x.src); }
  void operator()(const Sum& x) const { json.field("dst", x.dst).field("src", x.src); }
  void operator()(const Free& x) const {
    json.key("slots");
    write_ints(json, x.slots);
  }
  void operator()(const Keep& x) const {
    json.field("slot", x.slot).field("block", x.block).field("head_block", x.head_block);
  }
  void operator()(const Restore& x) const {
    json.field("slot", x.slot).field("block", x.block).field("head_block", x.head_block);
  }
};

bool is_long(const Instruction& instruction) {
  return std::holds_alternative<Launch>(instruction) ||
         std::holds_alternative<AttnForward>(instruction) ||
         std::holds_alternative<AttnBackward>(instruction);
}

void write_instruction(JsonWriter& json, const Instruction& instruction) {
  const auto body = [&] {
    json.begin_object();
    json.field("op", opcode_name(instruction));
    std::visit(InstructionFields{json}, instruction);
    json.end_object();
  };
  if (is_long(instruction)) {
    body();
  } else {
    JsonWriter::Inline line(json);
    body();
  }
}

}  // namespace

void write_json(JsonWriter& json, const PlanHeader& header) {
  json.begin_object();
  json.field("strategy", header.strategy);
  // JsonWriter writes signed 64-bit integers; a seed above that range is written as a string.
  if (header.seed <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    json.field("seed", static_cast<std::int64_t>(header.seed));
  } else {
    json.field("seed", std::to_string(header.seed));
  }
  json.field("nodes", header.cluster.nodes);
  json.field("devices_per_node", header.cluster.devices_per_node);
  json.field("q_heads", header.q_heads).field("kv_heads", header.kv_heads);
  json.field("head_dim", header.head_dim);
  json.field("head_block_size", header.head_block_size);
  json.field("kv_heads_per_block", header.kv_heads_per_block);
  json.field("dtype", to_string(header.dtype));
  json.field("partial_dtype", to_string(header.partial_dtype));
  json.field("partial_routing", to_string(header.partial_routing));
  json.field("softmax_scale", header.softmax_scale);
  json.field("total_tokens", header.total_tokens).field("sequences", header.sequences);
  json.field("token_blocks", header.token_blocks).field("work_units", header.work_units);
  json.end_object();
}

void write_json(JsonWriter& json, const Program& program) {
  json.begin_object();
  json.field("device", program.device).field("pass", to_string(program.pass));
  json.field("stages", program.stages);
  json.key("owned");
  {
    JsonWriter::Inline line(json);
    write_ints(json, program.owned);
  }

  json.key("blocks").begin_array();
  for (const BlockInfo& block : program.blocks) {
    JsonWriter::Inline line(json);
    json.begin_object();
    json.field("id", block.id).field("seq", block.seq).field("tokens", block.tokens);
    json.field("begin", block.begin);
    json.end_object();
  }
  json.end_array();

  json.key("outputs").begin_array();
  for (const ExpectedOutput& output : program.outputs) {
    JsonWriter::Inline line(json);
    json.begin_object();
    json.field("kind", to_string(output.kind)).field("block", output.block);
    json.field("head_block", output.head_block).field("contributions", output.contributions);
    json.field("pairs", output.pairs);
    json.end_object();
  }
  json.end_array();

  json.key("kept").begin_array();
  for (const KeptValue& kept : program.kept) {
    JsonWriter::Inline line(json);
    json.begin_object();
    json.field("kind", to_string(kept.kind)).field("block", kept.block);
    json.field("head_block", kept.head_block);
    json.end_object();
  }
  json.end_array();

  json.key("slots").begin_array();
  for (const Slot& slot : program.slots) {
    JsonWriter::Inline line(json);
    json.begin_object();
    json.field("kind", to_string(slot.kind)).field("tokens", slot.tokens);
    json.end_object();
  }
  json.end_array();

  json.key("masks").begin_array();
  for (const TileMask& mask : program.masks) {
    JsonWriter::Inline line(json);
    json.begin_object();
    json.field("q_tokens", mask.q_tokens).field("kv_tokens", mask.kv_tokens);
    json.key("row_offsets");
    write_ints(json, mask.row_offsets);
    json.key("intervals");
    write_ints(json, mask.intervals);
    json.end_object();
  }
  json.end_array();

  json.key("instructions").begin_array();
  for (const Instruction& instruction : program.instructions) write_instruction(json, instruction);
  json.end_array();
  json.key("instruction_stage");
  {
    JsonWriter::Inline line(json);
    write_ints(json, program.instruction_stage);
  }
  json.end_object();
}

std::string plan_to_json(const Plan& plan) {
  JsonWriter json;
  json.begin_object();
  json.key("header");
  write_json(json, plan.header);
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    json.key(to_string(pass)).begin_array();
    for (const Program& program : plan.programs(pass)) write_json(json, program);
    json.end_array();
  }
  json.end_object();
  return json.str();
}

std::string program_to_json(const PlanHeader& header, const Program& program) {
  JsonWriter json;
  json.begin_object();
  json.key("header");
  write_json(json, header);
  json.key("program");
  write_json(json, program);
  json.end_object();
  return json.str();
}

}  // namespace dcp
