// SPDX-License-Identifier: Apache-2.0
// The device of host memory: the lowered calls run as copies, conversions and calls of a kernel
// set (cpu or reference) on the calling thread.
#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"

#include "dcp/runtime/device.h"

namespace dcp::runtime {

namespace {

// Copies heads [head, head + heads) of tokens [token, token + tokens) of a local tensor
// [*][all_heads][d] into a dense [tokens][heads][d] value, or back (to_local).
void copy_heads(const std::byte* from, std::byte* to, std::int64_t token, std::int32_t tokens,
                std::int32_t all_heads, std::int32_t head, std::int32_t heads, std::int32_t d,
                std::size_t element, bool to_local) {
  const std::size_t run = static_cast<std::size_t>(heads) * static_cast<std::size_t>(d) * element;
  for (std::int32_t i = 0; i < tokens; ++i) {
    const std::size_t local =
        ((to_size(token) + static_cast<std::size_t>(i)) * static_cast<std::size_t>(all_heads) +
         static_cast<std::size_t>(head)) *
        static_cast<std::size_t>(d) * element;
    const std::size_t dense = static_cast<std::size_t>(i) * run;
    if (to_local) {
      std::memcpy(to + local, from + dense, run);
    } else {
      std::memcpy(to + dense, from + local, run);
    }
  }
}

// Local lse [all_heads][local_tokens] <-> a value's lse [heads][tokens].
void copy_lse(const float* from, float* to, std::int64_t token, std::int32_t tokens,
              std::int64_t local_tokens, std::int32_t head, std::int32_t heads, bool to_local) {
  for (std::int32_t j = 0; j < heads; ++j) {
    const std::size_t local = to_size((head + j) * local_tokens + token);
    const std::size_t dense = static_cast<std::size_t>(j) * static_cast<std::size_t>(tokens);
    if (to_local) {
      std::memcpy(to + local, from + dense, static_cast<std::size_t>(tokens) * sizeof(float));
    } else {
      std::memcpy(to + dense, from + local, static_cast<std::size_t>(tokens) * sizeof(float));
    }
  }
}

class HostDevice final : public Device {
 public:
  explicit HostDevice(kernels::AttentionKernels& kernels) : kernels_(kernels) {}

  std::string_view name() const override { return kernels_.name(); }

  void prepare(const PlanHeader& header, const LocalLayout& layout, const LoweredPass& forward,
               const LoweredPass& backward) override {
    header_ = header;
    params_.q_heads = header.head_block_size;
    params_.kv_heads = header.kv_heads_per_block;
    params_.head_dim = header.head_dim;
    params_.storage = element_type(header.dtype);
    element_ = kernels::element_size(params_.storage);
    partial_ = element_type(header.partial_dtype);
    layout_ = layout;
    forward_ = &forward;
    backward_ = &backward;
  }

  void begin(Pass pass, std::span<std::byte> arena, const PassTensors& tensors,
             float softmax_scale) override {
    pass_ = pass == Pass::kForward ? forward_ : backward_;
    arena_ = arena.data();
    t_ = tensors;
    params_.softmax_scale = softmax_scale;
    const std::size_t q_bytes = layout_.q_bytes();
    if (pass == Pass::kForward) {
      std::fill_n(t_.out_q, q_bytes, std::byte{0});
      std::fill_n(t_.lse_out, layout_.lse_elements(), -std::numeric_limits<float>::infinity());
    } else {
      std::fill_n(t_.out_q, q_bytes, std::byte{0});
      std::fill_n(t_.out_k, layout_.kv_bytes(), std::byte{0});
      std::fill_n(t_.out_v, layout_.kv_bytes(), std::byte{0});
    }
  }

  void end() override { t_ = PassTensors{}; }

  // One load or store per row, in order.
  void copy_run(const CopyRun& run, std::span<const std::int64_t> rows) override {
    for (std::size_t i = 0; i + kCopyFields <= rows.size(); i += kCopyFields) {
      const std::int64_t* row = rows.data() + i;
      const auto tokens = static_cast<std::int32_t>(row[kCopyTokens]);
      const auto head_block = static_cast<std::int32_t>(row[kCopyHeadBlock]);
      if (run.store) {
        store(StoreCall{run.kind, row[kCopySlot], row[kCopyToken], tokens, head_block});
      } else {
        load(LoadCall{run.kind, row[kCopySlot], row[kCopyToken], tokens, head_block});
      }
    }
  }

  void attention(const AttentionCall& call) override {
    if (pass_->pass == Pass::kForward) {
      forward(call);
    } else {
      backward(call);
    }
  }

  // One merge or sum per instruction, in order.
  void memory_run(const MemoryRun&, std::span<const LoweredCall> calls) override {
    for (const LoweredCall& call : calls) {
      if (const auto* merge_call = std::get_if<MergeCall>(&call)) {
        merge(*merge_call);
      } else if (const auto* sum_call = std::get_if<SumCall>(&call)) {
        sum(*sum_call);
      }
    }
  }

  void convert_partials(std::span<const WireCall> calls, std::int32_t) override {
    for (const WireCall& call : calls) convert_partial(call);
  }

 private:
  void load(const LoadCall& call) {
    std::byte* data = arena_ + call.slot_offset;
    const std::int32_t t = call.tokens;
    const std::int32_t d = header_.head_dim;
    const std::int32_t h = header_.head_block_size;
    const std::int32_t hk = header_.kv_heads_per_block;
    const std::size_t q_value = q_part(t) * element_;
    switch (call.kind) {
      case SlotKind::kQ:
        copy_heads(t_.q, data, call.token, t, header_.q_heads, call.head_block * h, h, d, element_,
                   false);
        break;
      case SlotKind::kKV: {
        const std::size_t k_value = kv_part(t) * element_;
        copy_heads(t_.k, data, call.token, t, header_.kv_heads, call.head_block * hk, hk, d,
                   element_, false);
        copy_heads(t_.v, data + k_value, call.token, t, header_.kv_heads, call.head_block * hk, hk,
                   d, element_, false);
        break;
      }
      case SlotKind::kQGrad: {
        // q, do, lse, delta = rowsum(do * o): delta from the stored o (storage dtype), as the
        // forward pass returned it.
        const std::int32_t head = call.head_block * h;
        copy_heads(t_.q, data, call.token, t, header_.q_heads, head, h, d, element_, false);
        copy_heads(t_.dout, data + q_value, call.token, t, header_.q_heads, head, h, d, element_,
                   false);
        auto* lse = reinterpret_cast<float*>(data + 2 * q_value);
        copy_lse(t_.lse, lse, call.token, t, layout_.tokens(), head, h, false);
        scratch_o_.resize(q_value);
        copy_heads(t_.o, scratch_o_.data(), call.token, t, header_.q_heads, head, h, d, element_,
                   false);
        kernels_.delta(params_.storage, scratch_o_.data(), data + q_value, t, h, d,
                       lse + static_cast<std::size_t>(h) * static_cast<std::size_t>(t));
        break;
      }
      default:
        throw Error("cannot load a " + std::string(to_string(call.kind)) + " slot");
    }
  }

  void convert_partial(const WireCall& call) {
    auto* slot = reinterpret_cast<float*>(arena_ + call.slot_offset);
    std::byte* wire = arena_ + call.wire_offset;
    const std::size_t elements = to_size(call.elements);
    const std::size_t converted = elements * to_size(bytes_of(header_.partial_dtype));
    const auto tail = reinterpret_cast<std::byte*>(slot + elements);
    if (call.narrow) {
      kernels::from_float(partial_, slot, wire, elements);
      std::memcpy(wire + converted, tail, to_size(call.tail_bytes));
    } else {
      kernels::to_float(partial_, wire, slot, elements);
      std::memcpy(tail, wire + converted, to_size(call.tail_bytes));
    }
  }

  void store(const StoreCall& call) {
    const std::int32_t t = call.tokens;
    const bool kv = call.kind == SlotKind::kDKV;
    const std::int32_t heads = kv ? header_.kv_heads_per_block : header_.head_block_size;
    const std::int32_t head = call.head_block * heads;
    const std::int32_t all_heads = kv ? header_.kv_heads : header_.q_heads;
    const std::size_t value = kv ? kv_part(t) : q_part(t);
    const auto* data = reinterpret_cast<const float*>(arena_ + call.slot_offset);
    scratch_.resize(value * element_ / sizeof(float) + 1);
    auto* converted = reinterpret_cast<std::byte*>(scratch_.data());
    const int parts = kv ? 2 : 1;
    for (int part = 0; part < parts; ++part) {
      std::byte* out = kv ? (part == 0 ? t_.out_k : t_.out_v) : t_.out_q;
      kernels::from_float(params_.storage, data + static_cast<std::size_t>(part) * value, converted,
                          value);
      copy_heads(converted, out, call.token, t, all_heads, head, heads, header_.head_dim, element_,
                 true);
    }
    if (call.kind == SlotKind::kOut) {
      copy_lse(data + value, t_.lse_out, call.token, t, layout_.tokens(), head, heads, true);
    }
  }

  void merge(const MergeCall& call) {
    const std::size_t o_elements = q_part(call.tokens);
    auto* dst = reinterpret_cast<float*>(arena_ + call.dst);
    const auto* src = reinterpret_cast<const float*>(arena_ + call.src);
    kernels_.merge(dst, dst + o_elements, src, src + o_elements, call.tokens,
                   header_.head_block_size, header_.head_dim);
  }

  void sum(const SumCall& call) {
    kernels_.add(reinterpret_cast<float*>(arena_ + call.dst),
                 reinterpret_cast<const float*>(arena_ + call.src), to_size(call.elements));
  }

  std::size_t q_part(std::int64_t tokens) const {
    return to_size(tokens) * to_size(header_.head_block_size) * to_size(header_.head_dim);
  }
  std::size_t kv_part(std::int64_t tokens) const {
    return to_size(tokens) * to_size(header_.kv_heads_per_block) * to_size(header_.head_dim);
  }
  kernels::TileMaskView mask_view(std::int64_t row_start) const {
    if (row_start < 0) return {};
    const AttentionTables& t = pass_->tables;
    return {t.mask_rows.data() + row_start, t.mask_intervals.data()};
  }

  // The entries of the instruction's q groups: each becomes one kernel tile.
  std::size_t member_count(const AttentionCall& call) const {
    std::size_t members = 0;
    for (std::int32_t g = call.q_group_begin; g < call.q_group_end; ++g) {
      const std::int64_t* group = pass_->tables.q_group(to_size(g));
      members += to_size(group[kGroupEnd] - group[kGroupBegin]);
    }
    return members;
  }

  // An entry's kv value: in its slot, or in the kept tensor (kEntryKvBuffer).
  const std::byte* kv_of(const std::int64_t* e) const {
    if (e[kEntryKvBuffer] == static_cast<std::int64_t>(BufferKind::kArena)) {
      return arena_ + e[kEntryKv];
    }
    return (pass_ == forward_ ? t_.kept_out : t_.kept) + e[kEntryKv];
  }

  // One kernel row per q group (groups write distinct outputs), one call per instruction.
  void forward(const AttentionCall& call) {
    const AttentionTables& t = pass_->tables;
    std::vector<kernels::ForwardTile> tiles;
    tiles.reserve(member_count(call));  // rows point into it: it must not reallocate
    std::vector<kernels::ForwardRow> rows;
    for (std::int32_t g = call.q_group_begin; g < call.q_group_end; ++g) {
      const std::int64_t* group = t.q_group(to_size(g));
      const std::size_t first = tiles.size();
      for (std::int64_t m = group[kGroupBegin]; m < group[kGroupEnd]; ++m) {
        const std::int64_t* e = t.entry(to_size(t.members[to_size(m)]));
        const std::byte* kv = kv_of(e);
        kernels::ForwardTile tile;
        tile.k = kv;
        tile.v = kv + kv_part(e[kEntryKvTokens]) * element_;
        tile.kv_tokens = static_cast<std::int32_t>(e[kEntryKvTokens]);
        tile.mask = mask_view(e[kEntryMask]);
        tiles.push_back(tile);
      }
      auto* out = reinterpret_cast<float*>(arena_ + group[kGroupOut]);
      kernels::ForwardRow row;
      row.q = arena_ + group[kGroupInput];
      row.q_tokens = static_cast<std::int32_t>(group[kGroupTokens]);
      row.tiles = std::span<const kernels::ForwardTile>(tiles).subspan(first, tiles.size() - first);
      row.o = out;
      row.lse = out + q_part(group[kGroupTokens]);
      row.accumulate = group[kGroupAccumulate] != 0;
      rows.push_back(row);
    }
    if (!rows.empty()) kernels_.forward(params_, rows);
  }

  // The cpu kernels want distinct dk, dv per tile within a call: a q group's entries are cut
  // into pieces, and a call ends before a piece would write a kv group's output a second time.
  void backward(const AttentionCall& call) {
    const AttentionTables& t = pass_->tables;
    std::vector<kernels::BackwardTile> tiles;
    tiles.reserve(member_count(call));  // rows point into it: it must not reallocate
    std::vector<kernels::BackwardRow> rows;
    std::vector<bool> kv_written(to_size(call.kv_group_end - call.kv_group_begin), false);
    std::vector<std::int64_t> in_call;  // kv groups the current call writes
    auto flush = [&] {
      if (!rows.empty()) kernels_.backward(params_, rows);
      rows.clear();
      in_call.clear();
    };
    for (std::int32_t g = call.q_group_begin; g < call.q_group_end; ++g) {
      const std::int64_t* group = t.q_group(to_size(g));
      std::byte* q = arena_ + group[kGroupInput];
      const std::int64_t q_tokens = group[kGroupTokens];
      const auto* stats = reinterpret_cast<const float*>(q + 2 * q_part(q_tokens) * element_);
      bool accumulate = group[kGroupAccumulate] != 0;
      std::int64_t m = group[kGroupBegin];
      do {
        if (m < group[kGroupEnd]) {
          const std::int64_t next = t.entry(to_size(t.members[to_size(m)]))[kEntryKvGroup];
          if (std::find(in_call.begin(), in_call.end(), next) != in_call.end()) flush();
        }
        const std::size_t first = tiles.size();
        for (; m < group[kGroupEnd]; ++m) {
          const std::int64_t* e = t.entry(to_size(t.members[to_size(m)]));
          const std::int64_t kv_group = e[kEntryKvGroup];
          if (std::find(in_call.begin(), in_call.end(), kv_group) != in_call.end()) break;
          const std::int64_t* dkv_group = t.kv_group(to_size(kv_group));
          const std::size_t kv_value = kv_part(e[kEntryKvTokens]);
          const std::byte* kv = kv_of(e);
          auto* dkv = reinterpret_cast<float*>(arena_ + dkv_group[kGroupOut]);
          const std::size_t local_group = to_size(kv_group - call.kv_group_begin);
          kernels::BackwardTile tile;
          tile.k = kv;
          tile.v = kv + kv_value * element_;
          tile.kv_tokens = static_cast<std::int32_t>(e[kEntryKvTokens]);
          tile.mask = mask_view(e[kEntryMask]);
          tile.dk = dkv;
          tile.dv = dkv + kv_value;
          tile.accumulate = kv_written[local_group] || dkv_group[kGroupAccumulate] != 0;
          kv_written[local_group] = true;
          tiles.push_back(tile);
          in_call.push_back(kv_group);
        }
        kernels::BackwardRow row;
        row.q = q;
        row.dout = q + q_part(q_tokens) * element_;
        row.lse = stats;
        row.delta = stats + q_part(q_tokens) / to_size(header_.head_dim);
        row.q_tokens = static_cast<std::int32_t>(q_tokens);
        row.tiles =
            std::span<const kernels::BackwardTile>(tiles).subspan(first, tiles.size() - first);
        row.dq = reinterpret_cast<float*>(arena_ + group[kGroupOut]);
        row.accumulate = accumulate;
        rows.push_back(row);
        accumulate = true;
        // A row's next piece adds to the same dq: it goes to the next call.
        if (m < group[kGroupEnd]) flush();
      } while (m < group[kGroupEnd]);
    }
    flush();
  }

  kernels::AttentionKernels& kernels_;
  PlanHeader header_;
  kernels::AttentionParams params_;
  std::size_t element_ = 4;
  kernels::ElementType partial_ = kernels::ElementType::kFp32;
  LocalLayout layout_;
  const LoweredPass* forward_ = nullptr;
  const LoweredPass* backward_ = nullptr;
  const LoweredPass* pass_ = nullptr;
  std::byte* arena_ = nullptr;
  PassTensors t_;
  std::vector<float> scratch_;  // fp32 staging for stores
  std::vector<std::byte> scratch_o_;
};

}  // namespace

std::unique_ptr<Device> make_host_device(kernels::AttentionKernels& kernels) {
  return std::make_unique<HostDevice>(kernels);
}

}  // namespace dcp::runtime
