// SPDX-License-Identifier: Apache-2.0
// Reading binary plan files (docs/plan_format.md): every field bounds-checked, every fault an
// InvalidInput naming the file, the part and the byte offset.
#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "dcp/core/error.h"

#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/plan_file/plan_file_detail.h"

namespace dcp {
namespace {

using namespace plan_file_detail;

// Smallest encodings of list items, so that a count can be checked against the bytes left
// before anything is allocated for it.
constexpr std::size_t kBlockInfoBytes = 20;
constexpr std::size_t kOutputBytes = 21;
constexpr std::size_t kKeptValueBytes = 9;
constexpr std::size_t kSlotBytes = 5;
constexpr std::size_t kMinMaskBytes = 16;
constexpr std::size_t kMinInstructionBytes = 5;
constexpr std::size_t kCommOpBytes = 17;
constexpr std::size_t kMinRowBytes = 13;
constexpr std::size_t kAttnKvBytes = 13;

// Bounds-checked little-endian reads from `data`, which starts at byte `base` of the file.
// Every failure names the file, the part being read, the field and the byte offset.
class Reader {
 public:
  Reader(std::string_view data, std::uint64_t base, std::string context)
      : data_(data), base_(base), context_(std::move(context)) {}

  std::uint8_t u8(std::string_view what) { return static_cast<std::uint8_t>(take_int(1, what)); }
  std::uint32_t u32(std::string_view what) { return static_cast<std::uint32_t>(take_int(4, what)); }
  std::uint64_t u64(std::string_view what) { return take_int(8, what); }
  std::int32_t i32(std::string_view what) { return static_cast<std::int32_t>(u32(what)); }
  std::int64_t i64(std::string_view what) { return static_cast<std::int64_t>(u64(what)); }
  double f64(std::string_view what) { return std::bit_cast<double>(u64(what)); }

  bool flag(std::string_view what) {
    const std::uint64_t at = offset();
    const std::uint8_t value = u8(what);
    if (value > 1) {
      fail("byte " + std::to_string(at) + ": " + std::string(what) + " is " +
           std::to_string(value) + ", expected 0 or 1");
    }
    return value == 1;
  }

  template <typename E>
  E enumeration(std::string_view what, int count) {
    const std::uint64_t at = offset();
    const std::uint8_t value = u8(what);
    if (value >= count) {
      fail("byte " + std::to_string(at) + ": " + std::string(what) + " " + std::to_string(value) +
           " is out of range [0, " + std::to_string(count - 1) + "]");
    }
    return static_cast<E>(value);
  }

  // A 32-bit count of items of at least `item_bytes` bytes each, checked against the bytes left.
  std::size_t count(std::string_view what, std::size_t item_bytes) {
    const std::uint64_t at = offset();
    const std::uint32_t n = u32(what);
    if (n > remaining() / item_bytes) {
      fail("byte " + std::to_string(at) + ": " + std::string(what) + " " + std::to_string(n) +
           " needs at least " + std::to_string(static_cast<std::uint64_t>(n) * item_bytes) +
           " bytes, only " + std::to_string(remaining()) + " are left");
    }
    return n;
  }

  std::vector<std::int32_t> i32s(std::string_view what) {
    const std::size_t n = count(what, 4);
    std::vector<std::int32_t> values(n);
    for (std::int32_t& value : values) value = i32(what);
    return values;
  }

  std::string_view bytes(std::size_t n, std::string_view what) {
    need(n, what);
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  void expect_end(std::string_view what) const {
    if (remaining() != 0) {
      fail(std::to_string(remaining()) + " unexpected bytes after " + std::string(what) +
           " at byte " + std::to_string(offset()));
    }
  }

  std::size_t remaining() const { return data_.size() - pos_; }
  std::uint64_t offset() const { return base_ + pos_; }

  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidInput(context_ + ": " + why);
  }

 private:
  void need(std::size_t n, std::string_view what) const {
    if (remaining() < n) {
      fail("truncated at byte " + std::to_string(offset()) + " reading " + std::string(what) +
           " (" + std::to_string(n) + " bytes needed, " + std::to_string(remaining()) + " left)");
    }
  }

  std::uint64_t take_int(std::size_t n, std::string_view what) {
    need(n, what);
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < n; ++i) {
      value |= static_cast<std::uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += n;
    return value;
  }

  std::string_view data_;
  std::size_t pos_ = 0;
  std::uint64_t base_;
  std::string context_;
};

std::vector<AttnRow> read_rows(Reader& r) {
  const std::size_t n = r.count("attention row count", kMinRowBytes);
  std::vector<AttnRow> rows;
  rows.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    AttnRow row;
    row.q = r.i32("rows[].q");
    row.out = r.i32("rows[].out");
    row.accumulate = r.flag("rows[].accumulate");
    const std::size_t entries = r.count("rows[].kv count", kAttnKvBytes);
    row.kv.reserve(entries);
    for (std::size_t k = 0; k < entries; ++k) {
      AttnKv kv;
      kv.kv = r.i32("rows[].kv[].kv");
      kv.mask = r.i32("rows[].kv[].mask");
      kv.dkv = r.i32("rows[].kv[].dkv");
      kv.dkv_accumulate = r.flag("rows[].kv[].dkv_accumulate");
      row.kv.push_back(kv);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

Instruction read_instruction(Reader& r) {
  const int opcode = r.enumeration<int>("instructions[].opcode", kOpcodeCount);
  switch (opcode) {
    case 0: {
      Load x;
      x.slot = r.i32("load.slot");
      x.block = r.i32("load.block");
      x.head_block = r.i32("load.head_block");
      return x;
    }
    case 1: {
      Store x;
      x.slot = r.i32("store.slot");
      x.kind = r.enumeration<SlotKind>("store.kind", kSlotKindCount);
      x.block = r.i32("store.block");
      x.head_block = r.i32("store.head_block");
      return x;
    }
    case 2: {
      Launch x;
      x.id = r.i32("launch.id");
      const std::size_t n = r.count("launch.ops count", kCommOpBytes);
      x.ops.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        CommOp op;
        op.direction = r.enumeration<CommOp::Direction>("launch.ops[].direction", 2);
        op.peer = r.i32("launch.ops[].peer");
        op.slot = r.i32("launch.ops[].slot");
        op.bytes = r.i64("launch.ops[].bytes");
        x.ops.push_back(op);
      }
      return x;
    }
    case 3: {
      Wait x;
      x.launch = r.i32("wait.launch");
      return x;
    }
    case 4:
      return AttnForward{read_rows(r)};
    case 5:
      return AttnBackward{read_rows(r)};
    case 6: {
      Merge x;
      x.dst = r.i32("merge.dst");
      x.src = r.i32("merge.src");
      return x;
    }
    case 7: {
      Sum x;
      x.dst = r.i32("sum.dst");
      x.src = r.i32("sum.src");
      return x;
    }
    case 8:
      return Free{r.i32s("free.slots")};
    case 9: {
      Keep x;
      x.slot = r.i32("keep.slot");
      x.block = r.i32("keep.block");
      x.head_block = r.i32("keep.head_block");
      return x;
    }
    default: {  // opcode 10
      Restore x;
      x.slot = r.i32("restore.slot");
      x.block = r.i32("restore.block");
      x.head_block = r.i32("restore.head_block");
      return x;
    }
  }
}

Program read_program_fields(Reader& r) {
  Program p;
  p.device = r.i32("device");
  p.pass = r.enumeration<Pass>("pass", 2);
  p.stages = r.i32("stages");
  p.owned = r.i32s("owned");
  const std::size_t blocks = r.count("blocks count", kBlockInfoBytes);
  p.blocks.reserve(blocks);
  for (std::size_t i = 0; i < blocks; ++i) {
    BlockInfo block;
    block.id = r.i32("blocks[].id");
    block.seq = r.i32("blocks[].seq");
    block.tokens = r.i32("blocks[].tokens");
    block.begin = r.i64("blocks[].begin");
    p.blocks.push_back(block);
  }
  const std::size_t outputs = r.count("outputs count", kOutputBytes);
  p.outputs.reserve(outputs);
  for (std::size_t i = 0; i < outputs; ++i) {
    ExpectedOutput output;
    output.kind = r.enumeration<SlotKind>("outputs[].kind", kSlotKindCount);
    output.block = r.i32("outputs[].block");
    output.head_block = r.i32("outputs[].head_block");
    output.contributions = r.i32("outputs[].contributions");
    output.pairs = r.i64("outputs[].pairs");
    p.outputs.push_back(output);
  }
  const std::size_t kept = r.count("kept count", kKeptValueBytes);
  p.kept.reserve(kept);
  for (std::size_t i = 0; i < kept; ++i) {
    KeptValue value;
    value.kind = r.enumeration<SlotKind>("kept[].kind", kSlotKindCount);
    value.block = r.i32("kept[].block");
    value.head_block = r.i32("kept[].head_block");
    p.kept.push_back(value);
  }
  const std::size_t slots = r.count("slots count", kSlotBytes);
  p.slots.reserve(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    Slot slot;
    slot.kind = r.enumeration<SlotKind>("slots[].kind", kSlotKindCount);
    slot.tokens = r.i32("slots[].tokens");
    p.slots.push_back(slot);
  }
  const std::size_t masks = r.count("masks count", kMinMaskBytes);
  p.masks.reserve(masks);
  for (std::size_t i = 0; i < masks; ++i) {
    TileMask mask;
    mask.q_tokens = r.i32("masks[].q_tokens");
    mask.kv_tokens = r.i32("masks[].kv_tokens");
    mask.row_offsets = r.i32s("masks[].row_offsets");
    mask.intervals = r.i32s("masks[].intervals");
    p.masks.push_back(std::move(mask));
  }
  const std::size_t instructions = r.count("instructions count", kMinInstructionBytes);
  p.instructions.reserve(instructions);
  for (std::size_t i = 0; i < instructions; ++i) p.instructions.push_back(read_instruction(r));
  p.instruction_stage = r.i32s("instruction_stage");
  return p;
}

// Magic, version and header size, from the first bytes of a file of `file_bytes` bytes. Returns
// the header size, checked to lie inside the file.
std::uint64_t read_preamble(std::string_view first, std::uint64_t file_bytes,
                            std::string_view origin) {
  const std::string where = origin_prefix(origin);
  if (file_bytes == 0) throw InvalidInput(where + "empty file, not a dcp plan file");
  if (std::memcmp(first.data(), kMagic, std::min(first.size(), kMagicBytes)) != 0) {
    throw InvalidInput(where + "not a dcp plan file (it does not start with \"DCPPLAN\\0\")");
  }
  Reader r(first, 0, where + "header");
  r.bytes(kMagicBytes, "the magic");
  const std::uint32_t version = r.u32("the format version");
  if (version != kPlanFormatVersion) {
    throw InvalidInput(where + "plan format version " + std::to_string(version) +
                       ", this dcp reads version " + std::to_string(kPlanFormatVersion));
  }
  const std::uint64_t header_bytes = r.u64("the header size");
  if (header_bytes < kMinHeaderBytes || header_bytes > kMaxHeaderBytes) {
    r.fail("header size " + std::to_string(header_bytes) + " is outside [" +
           std::to_string(kMinHeaderBytes) + ", " + std::to_string(kMaxHeaderBytes) + "]");
  }
  if (header_bytes > file_bytes) {
    r.fail("truncated: the header needs " + std::to_string(header_bytes) + " bytes, the file has " +
           std::to_string(file_bytes));
  }
  return header_bytes;
}

// The header and section table: `bytes` is the file's first header_bytes bytes (read_preamble).
PlanFileSummary read_header(std::string_view bytes, std::uint64_t file_bytes,
                            std::string_view origin) {
  const std::string where = origin_prefix(origin);
  const std::size_t body = bytes.size() - kChecksumBytes;
  const std::uint64_t stored = load_u64(bytes, body);
  const std::uint64_t computed = plan_checksum(bytes.substr(0, body));
  if (stored != computed) {
    throw InvalidInput(where + "header checksum mismatch (the file is damaged)");
  }

  PlanFileSummary summary;
  summary.file_bytes = file_bytes;
  summary.header_bytes = bytes.size();
  PlanHeader& h = summary.header;
  Reader r(bytes.substr(0, body), 0, where + "header");
  r.bytes(kPreambleBytes, "the preamble");
  h.seed = r.u64("seed");
  h.cluster.nodes = r.i32("nodes");
  h.cluster.devices_per_node = r.i32("devices_per_node");
  h.q_heads = r.i32("q_heads");
  h.kv_heads = r.i32("kv_heads");
  h.head_dim = r.i32("head_dim");
  h.head_block_size = r.i32("head_block_size");
  h.kv_heads_per_block = r.i32("kv_heads_per_block");
  h.dtype = r.enumeration<DType>("dtype", kDTypeCount);
  h.partial_dtype = r.enumeration<DType>("partial_dtype", kDTypeCount);
  h.partial_routing = r.enumeration<PartialRouting>("partial_routing", kPartialRoutingCount);
  h.softmax_scale = r.f64("softmax_scale");
  h.total_tokens = r.i64("total_tokens");
  h.sequences = r.i32("sequences");
  h.token_blocks = r.i32("token_blocks");
  h.work_units = r.i64("work_units");
  const std::size_t strategy_bytes = r.count("strategy length", 1);
  if (strategy_bytes > kMaxStrategyBytes) {
    r.fail("strategy name of " + std::to_string(strategy_bytes) + " bytes, at most " +
           std::to_string(kMaxStrategyBytes) + " allowed");
  }
  h.strategy = std::string(r.bytes(strategy_bytes, "strategy"));
  const std::size_t sections = r.count("section count", kSectionEntryBytes);
  summary.sections.reserve(sections);
  for (std::size_t i = 0; i < sections; ++i) {
    PlanSection section;
    section.device = r.i32("sections[].device");
    section.pass = r.enumeration<Pass>("sections[].pass", 2);
    section.offset = r.u64("sections[].offset");
    section.bytes = r.u64("sections[].bytes");
    section.checksum = r.u64("sections[].checksum");
    summary.sections.push_back(section);
  }
  r.expect_end("the section table");
  check_plan_header(h, origin);

  const auto devices = static_cast<std::size_t>(h.cluster.devices());
  if (sections != 2 * devices) {
    r.fail(std::to_string(sections) + " sections, expected " + std::to_string(2 * devices) +
           " (forward and backward for " + std::to_string(devices) + " devices)");
  }
  std::uint64_t next = summary.header_bytes;
  for (std::size_t i = 0; i < sections; ++i) {
    const PlanSection& section = summary.sections[i];
    const auto device = static_cast<std::int32_t>(i % devices);
    const Pass pass = i < devices ? Pass::kForward : Pass::kBackward;
    const std::string name = "section " + std::to_string(i);
    if (section.device != device || section.pass != pass) {
      r.fail(name + " is listed as the " + program_name(section.pass, section.device) +
             ", expected the " + program_name(pass, device));
    }
    if (section.offset != next) {
      r.fail(name + " (" + program_name(pass, device) + ") starts at byte " +
             std::to_string(section.offset) + ", expected " + std::to_string(next));
    }
    if (section.bytes > file_bytes - section.offset) {
      throw InvalidInput(where + "truncated: the " + program_name(pass, device) + " ends at byte " +
                         std::to_string(section.offset) + " + " + std::to_string(section.bytes) +
                         ", the file has " + std::to_string(file_bytes) + " bytes");
    }
    next = section.offset + section.bytes;
  }
  if (next != file_bytes) {
    throw InvalidInput(where + std::to_string(file_bytes - next) +
                       " unexpected bytes after the last section at byte " + std::to_string(next));
  }
  return summary;
}

// One section's Program, checked against its table entry and the header.
Program read_section(std::string_view payload, const PlanSection& section, const PlanHeader& header,
                     std::string_view origin) {
  const std::string name = program_name(section.pass, section.device);
  if (plan_checksum(payload) != section.checksum) {
    throw InvalidInput(origin_prefix(origin) + "checksum mismatch in the " + name +
                       " (the file is damaged)");
  }
  Reader r(payload, section.offset, origin_prefix(origin) + name);
  Program program = read_program_fields(r);
  r.expect_end("the program");
  if (program.device != section.device) {
    r.fail("device field is " + std::to_string(program.device) + ", the section table says " +
           std::to_string(section.device));
  }
  if (program.pass != section.pass) {
    r.fail("pass field is " + std::string(to_string(program.pass)) + ", the section table says " +
           std::string(to_string(section.pass)));
  }
  check_program_structure(header, program, origin);
  return program;
}

// A directory opens as a stream on Linux and fails only at the first read.
void expect_not_directory(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw IoError(path + ": is a directory, not a plan file");
  }
}

}  // namespace

std::string read_whole_file(const std::string& path) {
  expect_not_directory(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open for reading");
  std::string bytes;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    bytes.append(buffer, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw IoError(path + ": read error");
  return bytes;
}

namespace {

// An open plan file that is read in pieces.
class PlanFileReader {
 public:
  explicit PlanFileReader(const std::string& path) : path_(path) {
    expect_not_directory(path);
    in_.open(path, std::ios::binary);
    if (!in_) throw IoError(path + ": cannot open for reading");
    in_.seekg(0, std::ios::end);
    const std::streamoff end = in_.tellg();
    if (!in_ || end < 0) throw IoError(path + ": cannot determine the file size");
    size_ = static_cast<std::uint64_t>(end);
  }

  std::string read(std::uint64_t offset, std::uint64_t bytes) {
    std::string out(static_cast<std::size_t>(bytes), '\0');
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(out.data(), static_cast<std::streamsize>(bytes));
    if (!in_ || static_cast<std::uint64_t>(in_.gcount()) != bytes) {
      throw IoError(path_ + ": read error at byte " + std::to_string(offset));
    }
    return out;
  }

  PlanFileSummary summary() {
    const std::string first = read(0, std::min<std::uint64_t>(size_, kPreambleBytes));
    const std::uint64_t header_bytes = read_preamble(first, size_, path_);
    return read_header(read(0, header_bytes), size_, path_);
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

}  // namespace

Plan parse_plan(std::string_view bytes, std::string_view origin) {
  const PlanFileSummary summary = parse_plan_summary(bytes, origin);
  Plan plan;
  plan.header = summary.header;
  const std::size_t devices = summary.sections.size() / 2;
  plan.forward.reserve(devices);
  plan.backward.reserve(devices);
  for (const PlanSection& section : summary.sections) {
    const std::string_view payload = bytes.substr(static_cast<std::size_t>(section.offset),
                                                  static_cast<std::size_t>(section.bytes));
    std::vector<Program>& programs = section.pass == Pass::kForward ? plan.forward : plan.backward;
    programs.push_back(read_section(payload, section, plan.header, origin));
  }
  return plan;
}

Plan read_plan_file(const std::string& path) { return parse_plan(read_whole_file(path), path); }

PlanFileSummary read_plan_summary(const std::string& path) {
  return PlanFileReader(path).summary();
}

PlanFileSummary parse_plan_summary(std::string_view bytes, std::string_view origin) {
  const std::uint64_t header_bytes =
      read_preamble(bytes.substr(0, kPreambleBytes), bytes.size(), origin);
  return read_header(bytes.substr(0, static_cast<std::size_t>(header_bytes)), bytes.size(), origin);
}

PlanHeader read_plan_header(const std::string& path) { return read_plan_summary(path).header; }

Program read_program(const std::string& path, std::int32_t device, Pass pass, PlanHeader* header) {
  PlanFileReader file(path);
  const PlanFileSummary summary = file.summary();
  const std::int32_t devices = summary.header.cluster.devices();
  if (device < 0 || device >= devices) {
    throw InvalidInput("plan " + path + " is for " + std::to_string(devices) + " devices, device " +
                       std::to_string(device) + " requested");
  }
  if (code(pass) > 1) throw InvalidInput("read_program: pass " + std::to_string(code(pass)));
  const std::size_t index = static_cast<std::size_t>(device) +
                            (pass == Pass::kForward ? 0 : static_cast<std::size_t>(devices));
  const PlanSection& section = summary.sections[index];
  Program program =
      read_section(file.read(section.offset, section.bytes), section, summary.header, path);
  if (header != nullptr) *header = summary.header;
  return program;
}

}  // namespace dcp
