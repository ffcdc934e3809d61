// SPDX-License-Identifier: Apache-2.0
// Writing binary plan files (docs/plan_format.md): the same Plan gives the same bytes.
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/npy.h"

#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/plan_file/plan_file_detail.h"

namespace dcp {
namespace {

using namespace plan_file_detail;

// Little-endian fixed-width fields, one at a time: the bytes depend on the values only.
class Writer {
 public:
  void u8(std::uint8_t value) { out_.push_back(static_cast<char>(value)); }
  void u32(std::uint32_t value) { put(value, 4); }
  void u64(std::uint64_t value) { put(value, 8); }
  void i32(std::int32_t value) { u32(static_cast<std::uint32_t>(value)); }
  void i64(std::int64_t value) { u64(static_cast<std::uint64_t>(value)); }
  void f64(double value) { u64(std::bit_cast<std::uint64_t>(value)); }
  void flag(bool value) { u8(value ? 1 : 0); }
  void bytes(std::string_view data) { out_.append(data); }
  void count(std::size_t n, std::string_view what) {
    if (n > std::numeric_limits<std::uint32_t>::max()) {
      throw InvalidInput("plan file: " + std::string(what) + " has " + std::to_string(n) +
                         " entries, more than a plan file can count (2^32 - 1)");
    }
    u32(static_cast<std::uint32_t>(n));
  }
  void i32s(const std::vector<std::int32_t>& values, std::string_view what) {
    count(values.size(), what);
    for (const std::int32_t value : values) i32(value);
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void put(std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  }
  std::string out_;
};

void write_rows(Writer& w, const std::vector<AttnRow>& rows) {
  w.count(rows.size(), "attention rows");
  for (const AttnRow& row : rows) {
    w.i32(row.q);
    w.i32(row.out);
    w.flag(row.accumulate);
    w.count(row.kv.size(), "attention row kv entries");
    for (const AttnKv& kv : row.kv) {
      w.i32(kv.kv);
      w.i32(kv.mask);
      w.i32(kv.dkv);
      w.flag(kv.dkv_accumulate);
    }
  }
}

struct InstructionWriter {
  Writer& w;
  // Load, Keep and Restore: a slot and the value (block, head block) it takes or gives.
  template <typename Op>
  void slot_and_value(const Op& x) const {
    w.i32(x.slot);
    w.i32(x.block);
    w.i32(x.head_block);
  }
  void operator()(const Load& x) const { slot_and_value(x); }
  void operator()(const Store& x) const {
    w.i32(x.slot);
    w.u8(code(x.kind));
    w.i32(x.block);
    w.i32(x.head_block);
  }
  void operator()(const Launch& x) const {
    w.i32(x.id);
    w.count(x.ops.size(), "launch operations");
    for (const CommOp& op : x.ops) {
      w.u8(code(op.direction));
      w.i32(op.peer);
      w.i32(op.slot);
      w.i64(op.bytes);
    }
  }
  void operator()(const Wait& x) const { w.i32(x.launch); }
  void operator()(const AttnForward& x) const { write_rows(w, x.rows); }
  void operator()(const AttnBackward& x) const { write_rows(w, x.rows); }
  void operator()(const Merge& x) const {
    w.i32(x.dst);
    w.i32(x.src);
  }
  void operator()(const Sum& x) const {
    w.i32(x.dst);
    w.i32(x.src);
  }
  void operator()(const Free& x) const { w.i32s(x.slots, "freed slots"); }
  void operator()(const Keep& x) const { slot_and_value(x); }
  void operator()(const Restore& x) const { slot_and_value(x); }
};

std::string program_bytes(const Program& program) {
  Writer w;
  w.i32(program.device);
  w.u8(code(program.pass));
  w.i32(program.stages);
  w.i32s(program.owned, "owned blocks");
  w.count(program.blocks.size(), "blocks");
  for (const BlockInfo& block : program.blocks) {
    w.i32(block.id);
    w.i32(block.seq);
    w.i32(block.tokens);
    w.i64(block.begin);
  }
  w.count(program.outputs.size(), "outputs");
  for (const ExpectedOutput& output : program.outputs) {
    w.u8(code(output.kind));
    w.i32(output.block);
    w.i32(output.head_block);
    w.i32(output.contributions);
    w.i64(output.pairs);
  }
  w.count(program.kept.size(), "kept values");
  for (const KeptValue& kept : program.kept) {
    w.u8(code(kept.kind));
    w.i32(kept.block);
    w.i32(kept.head_block);
  }
  w.count(program.slots.size(), "slots");
  for (const Slot& slot : program.slots) {
    w.u8(code(slot.kind));
    w.i32(slot.tokens);
  }
  w.count(program.masks.size(), "masks");
  for (const TileMask& mask : program.masks) {
    w.i32(mask.q_tokens);
    w.i32(mask.kv_tokens);
    w.i32s(mask.row_offsets, "mask row offsets");
    w.i32s(mask.intervals, "mask intervals");
  }
  w.count(program.instructions.size(), "instructions");
  for (const Instruction& instruction : program.instructions) {
    w.u8(static_cast<std::uint8_t>(instruction.index()));
    std::visit(InstructionWriter{w}, instruction);
  }
  w.i32s(program.instruction_stage, "instruction stages");
  return w.take();
}

// The file from a header and section payloads; fills in the sections' offsets, sizes and
// checksums.
std::string assemble(const PlanHeader& header, std::vector<PlanSection> sections,
                     const std::vector<std::string_view>& payloads) {
  std::uint64_t offset = header_size(header.strategy.size(), sections.size());
  for (std::size_t i = 0; i < sections.size(); ++i) {
    sections[i].offset = offset;
    sections[i].bytes = payloads[i].size();
    sections[i].checksum = plan_checksum(payloads[i]);
    offset += payloads[i].size();
  }
  Writer w;
  w.bytes(std::string_view(kMagic, kMagicBytes));
  w.u32(kPlanFormatVersion);
  w.u64(header_size(header.strategy.size(), sections.size()));
  w.u64(header.seed);
  w.i32(header.cluster.nodes);
  w.i32(header.cluster.devices_per_node);
  w.i32(header.q_heads);
  w.i32(header.kv_heads);
  w.i32(header.head_dim);
  w.i32(header.head_block_size);
  w.i32(header.kv_heads_per_block);
  w.u8(code(header.dtype));
  w.u8(code(header.partial_dtype));
  w.u8(code(header.partial_routing));
  w.f64(header.softmax_scale);
  w.i64(header.total_tokens);
  w.i32(header.sequences);
  w.i32(header.token_blocks);
  w.i64(header.work_units);
  w.count(header.strategy.size(), "the strategy name");
  w.bytes(header.strategy);
  w.count(sections.size(), "the section table");
  for (const PlanSection& section : sections) {
    w.i32(section.device);
    w.u8(code(section.pass));
    w.u64(section.offset);
    w.u64(section.bytes);
    w.u64(section.checksum);
  }
  w.u64(plan_checksum(w.str()));
  std::string file = w.take();
  for (const std::string_view payload : payloads) file.append(payload);
  return file;
}

}  // namespace

std::uint64_t plan_checksum(std::string_view bytes) {
  std::uint64_t hash = 14695981039346656037ULL;  // FNV-1a 64 offset basis
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;  // FNV-1a 64 prime
  }
  return hash;
}

std::string serialize_plan(const Plan& plan) {
  std::vector<PlanSection> sections;
  std::vector<std::string> payloads;
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const std::vector<Program>& programs = plan.programs(pass);
    for (std::size_t i = 0; i < programs.size(); ++i) {
      PlanSection section;
      section.device = static_cast<std::int32_t>(i);
      section.pass = pass;
      sections.push_back(section);
      payloads.push_back(program_bytes(programs[i]));
    }
  }
  return assemble(plan.header, std::move(sections),
                  std::vector<std::string_view>(payloads.begin(), payloads.end()));
}

void write_plan_file(const std::string& path, const Plan& plan) {
  check_plan(plan, path);
  write_file_atomically(path, serialize_plan(plan));
}

std::string reseal_plan_bytes(std::string bytes) {
  if (bytes.size() < kFixedHeaderBytes || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0) {
    return bytes;
  }
  const std::uint64_t header_bytes = load_u64(bytes, kHeaderBytesAt);
  if (header_bytes < kMinHeaderBytes || header_bytes > bytes.size()) return bytes;
  const std::uint64_t body = header_bytes - kChecksumBytes;
  const std::uint64_t table_at = kFixedHeaderBytes + load_u32(bytes, kStrategyLengthAt) + 4;
  if (table_at <= body) {
    const std::uint64_t sections = load_u32(bytes, static_cast<std::size_t>(table_at - 4));
    for (std::uint64_t i = 0; i < sections; ++i) {
      const std::uint64_t entry = table_at + i * kSectionEntryBytes;
      if (entry + kSectionEntryBytes > body) break;
      const auto at = static_cast<std::size_t>(entry);
      const std::uint64_t offset = load_u64(bytes, at + 5);
      const std::uint64_t size = load_u64(bytes, at + 13);
      if (offset > bytes.size() || size > bytes.size() - offset) continue;
      store_u64(bytes, at + 21,
                plan_checksum(std::string_view(bytes).substr(static_cast<std::size_t>(offset),
                                                             static_cast<std::size_t>(size))));
    }
  }
  store_u64(bytes, static_cast<std::size_t>(body),
            plan_checksum(std::string_view(bytes).substr(0, static_cast<std::size_t>(body))));
  return bytes;
}

std::string replace_plan_section(std::string_view bytes, std::size_t index,
                                 std::string_view payload) {
  constexpr std::string_view kOrigin = "replace_plan_section";
  const PlanFileSummary summary = parse_plan_summary(bytes, kOrigin);
  if (index >= summary.sections.size()) {
    throw InvalidInput(std::string(kOrigin) + ": no section " + std::to_string(index) + " (" +
                       std::to_string(summary.sections.size()) + " sections)");
  }
  std::vector<std::string_view> payloads;
  for (std::size_t i = 0; i < summary.sections.size(); ++i) {
    const PlanSection& section = summary.sections[i];
    payloads.push_back(i == index ? payload
                                  : bytes.substr(static_cast<std::size_t>(section.offset),
                                                 static_cast<std::size_t>(section.bytes)));
  }
  return assemble(summary.header, summary.sections, payloads);
}

}  // namespace dcp
