// SPDX-License-Identifier: Apache-2.0
// The kinds file: magic, version, table size, the kinds (name, layers, where its plan lies), a
// checksum of all that, then each kind's plan file in table order.
#include "dcp/program/plan_file/model_plan_file.h"

#include <cstring>

#include "dcp/core/error.h"
#include "dcp/core/npy.h"

#include "dcp/program/plan_file/plan_checks.h"
#include "dcp/program/plan_file/plan_file_detail.h"

namespace dcp {
namespace {

using plan_file_detail::load_u32;
using plan_file_detail::load_u64;

inline constexpr char kKindsMagic[] = {'D', 'C', 'P', 'K', 'I', 'N', 'D', '\0'};
inline constexpr std::size_t kKindsPreamble = 24;  // magic, version, table size, kind count
inline constexpr std::size_t kEntryFixedBytes = 4 + 4 + 8 + 8;  // name length, layers, offset, size

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void put_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

bool is_kinds_file(std::string_view bytes) {
  return bytes.size() >= sizeof(kKindsMagic) &&
         std::memcmp(bytes.data(), kKindsMagic, sizeof(kKindsMagic)) == 0;
}

std::string serialize_model_plan(const ModelPlan& plan) {
  if (plan.is_single_plan()) return serialize_plan(plan.kinds.front().plan);
  std::vector<std::string> plans;
  std::uint64_t table = kKindsPreamble + 8;
  for (const KindPlan& kind : plan.kinds) {
    plans.push_back(serialize_plan(kind.plan));
    table += kEntryFixedBytes + kind.name.size();
  }
  std::string out(kKindsMagic, sizeof(kKindsMagic));
  put_u32(out, kKindsFormatVersion);
  put_u64(out, table);
  put_u32(out, static_cast<std::uint32_t>(plan.kinds.size()));
  std::uint64_t offset = table;
  for (std::size_t k = 0; k < plan.kinds.size(); ++k) {
    const KindPlan& kind = plan.kinds[k];
    put_u32(out, static_cast<std::uint32_t>(kind.name.size()));
    out += kind.name;
    put_u32(out, static_cast<std::uint32_t>(kind.layers));
    put_u64(out, offset);
    put_u64(out, plans[k].size());
    offset += plans[k].size();
  }
  put_u64(out, plan_checksum(out));
  for (const std::string& bytes : plans) out += bytes;
  return out;
}

void write_model_plan_file(const std::string& path, const ModelPlan& plan) {
  check_model_plan(plan, path);
  write_file_atomically(path, serialize_model_plan(plan));
}

ModelPlan parse_model_plan(std::string_view bytes, std::string_view origin) {
  if (!is_kinds_file(bytes)) return single_kind(parse_plan(bytes, origin));
  const std::string at = origin_prefix(origin);
  const auto fail = [&](const std::string& what) { throw InvalidInput(at + what); };
  if (bytes.size() < kKindsPreamble + 8) fail("truncated attention kinds table");
  const std::uint32_t version = load_u32(bytes, 8);
  if (version != kKindsFormatVersion) {
    fail("attention kinds format version " + std::to_string(version) + ", this dcp reads version " +
         std::to_string(kKindsFormatVersion));
  }
  const std::uint64_t table = load_u64(bytes, 12);
  const std::uint32_t count = load_u32(bytes, 20);
  if (count < 1 || count > kMaxKinds) {
    fail(std::to_string(count) + " attention kinds; a plan has 1 to " + std::to_string(kMaxKinds));
  }
  const std::uint64_t max_table =
      kKindsPreamble + 8 + count * (kEntryFixedBytes + kMaxKindNameBytes);
  if (table < kKindsPreamble + 8 || table > max_table || table > bytes.size()) {
    fail("attention kinds table of " + std::to_string(table) + " bytes does not fit (file " +
         std::to_string(bytes.size()) + " bytes)");
  }
  const std::uint64_t checksum = load_u64(bytes, static_cast<std::size_t>(table - 8));
  if (plan_checksum(bytes.substr(0, static_cast<std::size_t>(table - 8))) != checksum) {
    fail("attention kinds table checksum mismatch (the file is damaged)");
  }
  ModelPlan plan;
  std::size_t at_byte = kKindsPreamble;
  std::uint64_t expected_offset = table;
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::string entry = "attention kind " + std::to_string(k) + ": ";
    if (at_byte + 4 > table - 8) fail(entry + "truncated entry");
    const std::uint32_t name_bytes = load_u32(bytes, at_byte);
    if (name_bytes > kMaxKindNameBytes || at_byte + 4 + name_bytes + 20 > table - 8) {
      fail(entry + "name of " + std::to_string(name_bytes) + " bytes does not fit the table");
    }
    KindPlan kind;
    kind.name = std::string(bytes.substr(at_byte + 4, name_bytes));
    at_byte += 4 + name_bytes;
    kind.layers = static_cast<std::int32_t>(load_u32(bytes, at_byte));
    const std::uint64_t offset = load_u64(bytes, at_byte + 4);
    const std::uint64_t size = load_u64(bytes, at_byte + 12);
    at_byte += 20;
    if (offset != expected_offset || size > bytes.size() || offset > bytes.size() - size) {
      fail(entry + "its plan at byte " + std::to_string(offset) + " (" + std::to_string(size) +
           " bytes) is not where the table says kinds follow one another");
    }
    expected_offset = offset + size;
    const std::string kind_origin =
        std::string(origin.empty() ? "" : std::string(origin) + ": ") + "kind '" + kind.name + "'";
    kind.plan =
        parse_plan(bytes.substr(static_cast<std::size_t>(offset), static_cast<std::size_t>(size)),
                   kind_origin);
    plan.kinds.push_back(std::move(kind));
  }
  if (at_byte != table - 8) fail("attention kinds table has trailing bytes");
  if (plan.is_single_plan()) {
    fail("a kinds file holding one unnamed kind of one layer; such a plan is a plain plan file");
  }
  if (expected_offset != bytes.size()) {
    fail(std::to_string(bytes.size() - expected_offset) + " bytes after the last kind's plan");
  }
  check_model_plan(plan, origin);
  return plan;
}

ModelPlan read_model_plan_file(const std::string& path) {
  return parse_model_plan(read_whole_file(path), path);
}

}  // namespace dcp
