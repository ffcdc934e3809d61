// SPDX-License-Identifier: Apache-2.0
// The executor: runs one rank's forward and backward Programs with a kernel set and a
// communicator.
#include "dcp/runtime/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/program/plan_file.h"

namespace dcp::runtime {

namespace {

constexpr std::size_t kSlotAlignment = 64;

std::size_t to_size(std::int64_t value) { return static_cast<std::size_t>(value); }

std::string instruction_context(const Program& program, std::size_t index) {
  return "device " + std::to_string(program.device) + ", " + std::string(to_string(program.pass)) +
         " instruction " + std::to_string(index) + " (" +
         std::string(opcode_name(program.instructions[index])) + ")";
}

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

void expect_size(std::size_t got, std::size_t want, const char* name, const char* unit) {
  if (got != want) {
    throw InvalidInput(std::string("local tensor ") + name + " has " + std::to_string(got) + " " +
                       unit + ", the plan's layout needs " + std::to_string(want));
  }
}

}  // namespace

Executor::Executor(comm::Communicator& communicator, kernels::AttentionKernels& kernels)
    : communicator_(communicator), kernels_(kernels) {}

void Executor::prepare(const Plan& plan) {
  const std::int32_t world = plan.header.cluster.devices();
  if (world != communicator_.size() || plan.forward.size() != to_size(world) ||
      plan.backward.size() != to_size(world)) {
    throw InvalidInput("the plan is for " + std::to_string(world) + " devices (" +
                       std::to_string(plan.header.cluster.nodes) + " x " +
                       std::to_string(plan.header.cluster.devices_per_node) + ") but the " +
                       std::string(communicator_.name()) + " communicator has " +
                       std::to_string(communicator_.size()) + " ranks");
  }
  const auto rank = to_size(communicator_.rank());
  prepare(plan.header, plan.forward[rank], plan.backward[rank]);
}

void Executor::prepare(const PlanHeader& header, Program forward, Program backward) {
  prepared_ = false;
  check_plan_header(header, "");
  if (header.cluster.devices() != communicator_.size()) {
    throw InvalidInput("the plan is for " + std::to_string(header.cluster.devices()) +
                       " devices but the " + std::string(communicator_.name()) +
                       " communicator has " + std::to_string(communicator_.size()) + " ranks");
  }
  if (header.partial_dtype != DType::kFp32) {
    throw InvalidInput("the runtime keeps partials in fp32; the plan asks for " +
                       std::string(to_string(header.partial_dtype)));
  }
  for (const Program* program : {&forward, &backward}) {
    check_program_structure(header, *program, "");
    if (program->device != communicator_.rank()) {
      throw InvalidInput("the " + std::string(to_string(program->pass)) + " Program is device " +
                         std::to_string(program->device) + "'s, but this is rank " +
                         std::to_string(communicator_.rank()));
    }
  }
  if (forward.pass != Pass::kForward || backward.pass != Pass::kBackward) {
    throw InvalidInput("prepare() takes a forward and a backward Program, in that order");
  }
  if (forward.owned != backward.owned) {
    throw InvalidInput("device " + std::to_string(forward.device) +
                       ": the forward and backward Programs own different blocks");
  }
  header_ = header;
  params_.q_heads = header.head_block_size;
  params_.kv_heads = header.kv_heads_per_block;
  params_.head_dim = header.head_dim;
  params_.storage = element_type(header.dtype);
  params_.softmax_scale = static_cast<float>(header.softmax_scale);
  layout_ = local_layout(header, forward);
  block_offsets_.clear();
  for (std::size_t i = 0; i < layout_.blocks.size(); ++i) {
    block_offsets_.emplace_back(layout_.blocks[i].id, layout_.offsets[i]);
  }
  std::sort(block_offsets_.begin(), block_offsets_.end());
  prepare_pass(forward_, std::move(forward));
  prepare_pass(backward_, std::move(backward));
  prepared_ = true;
}

void Executor::prepare_pass(PassState& state, Program program) {
  state.program = std::move(program);
  state.slot_offset.clear();
  std::size_t total = 0;
  for (const Slot& slot : state.program.slots) {
    state.slot_offset.push_back(total);
    const auto bytes = to_size(value_bytes(header_, slot.kind, slot.tokens));
    total += (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  }
  // Slot offsets are multiples of 64 from the arena's start; a vector of max_align_t-aligned
  // bytes is enough for the fp32 and 16-bit element accesses the kernels make.
  state.owned_arena.assign(total, std::byte{0});
  state.arena = state.owned_arena;
  state.arena_bytes = total;
  state.slot_tokens.assign(state.program.slots.size(), -1);
  LaunchId launches = 0;
  for (const Instruction& instruction : state.program.instructions) {
    if (const auto* l = std::get_if<Launch>(&instruction)) {
      launches = std::max(launches, l->id + 1);
    }
  }
  state.launch_group.assign(to_size(launches), -1);
  state.profile = PassProfile{};
}

std::size_t Executor::arena_bytes(Pass pass) const { return state(pass).arena_bytes; }

void Executor::use_arena(Pass pass, std::span<std::byte> memory) {
  PassState& s = state(pass);
  if (memory.size() < s.arena_bytes) {
    throw InvalidInput("the " + std::string(to_string(pass)) + " buffer table needs " +
                       std::to_string(s.arena_bytes) + " bytes, the memory given has " +
                       std::to_string(memory.size()));
  }
  if (reinterpret_cast<std::uintptr_t>(memory.data()) % kSlotAlignment != 0) {
    throw InvalidInput("the memory given for the " + std::string(to_string(pass)) +
                       " buffer table is not " + std::to_string(kSlotAlignment) + "-byte aligned");
  }
  s.arena = memory.first(s.arena_bytes);
  s.owned_arena = std::vector<std::byte>();
}

void Executor::set_scale(double softmax_scale) {
  if (!std::isfinite(softmax_scale) || softmax_scale < 0) {
    throw InvalidInput("softmax scale " + std::to_string(softmax_scale) +
                       " is not a finite non-negative number");
  }
  params_.softmax_scale =
      static_cast<float>(softmax_scale > 0 ? softmax_scale : header_.softmax_scale);
}

namespace {

// Clears the executor's view of a call's tensors when the call ends, however it ends.
template <typename F>
struct OnExit {
  F f;
  ~OnExit() { f(); }
};
template <typename F>
OnExit(F) -> OnExit<F>;

}  // namespace

void Executor::forward(std::span<const std::byte> q, std::span<const std::byte> k,
                       std::span<const std::byte> v, std::span<std::byte> o, std::span<float> lse,
                       double softmax_scale) {
  if (!prepared_) {
    throw Error("Executor::forward called before prepare()");
  }
  expect_size(q.size(), layout_.q_bytes(), "q", "bytes");
  expect_size(k.size(), layout_.kv_bytes(), "k", "bytes");
  expect_size(v.size(), layout_.kv_bytes(), "v", "bytes");
  expect_size(o.size(), layout_.q_bytes(), "o", "bytes");
  expect_size(lse.size(), layout_.lse_elements(), "lse", "elements");
  set_scale(softmax_scale);
  // An output no Store writes keeps the value of no contribution: o = 0, lse = -inf.
  std::fill(o.begin(), o.end(), std::byte{0});
  std::fill(lse.begin(), lse.end(), -std::numeric_limits<float>::infinity());
  const OnExit clear{[this] { q_ = k_ = v_ = nullptr, out_q_ = nullptr, lse_out_ = nullptr; }};
  q_ = q.data();
  k_ = k.data();
  v_ = v.data();
  out_q_ = o.data();
  lse_out_ = lse.data();
  run(forward_);
}

void Executor::backward(std::span<const std::byte> q, std::span<const std::byte> k,
                        std::span<const std::byte> v, std::span<const std::byte> o,
                        std::span<const float> lse, std::span<const std::byte> dout,
                        std::span<std::byte> dq, std::span<std::byte> dk, std::span<std::byte> dv,
                        double softmax_scale) {
  if (!prepared_) {
    throw Error("Executor::backward called before prepare()");
  }
  expect_size(q.size(), layout_.q_bytes(), "q", "bytes");
  expect_size(k.size(), layout_.kv_bytes(), "k", "bytes");
  expect_size(v.size(), layout_.kv_bytes(), "v", "bytes");
  expect_size(o.size(), layout_.q_bytes(), "o", "bytes");
  expect_size(lse.size(), layout_.lse_elements(), "lse", "elements");
  expect_size(dout.size(), layout_.q_bytes(), "do", "bytes");
  expect_size(dq.size(), layout_.q_bytes(), "dq", "bytes");
  expect_size(dk.size(), layout_.kv_bytes(), "dk", "bytes");
  expect_size(dv.size(), layout_.kv_bytes(), "dv", "bytes");
  set_scale(softmax_scale);
  std::fill(dq.begin(), dq.end(), std::byte{0});
  std::fill(dk.begin(), dk.end(), std::byte{0});
  std::fill(dv.begin(), dv.end(), std::byte{0});
  const OnExit clear{[this] {
    q_ = k_ = v_ = o_ = dout_ = nullptr;
    lse_ = nullptr;
    out_q_ = out_k_ = out_v_ = nullptr;
  }};
  q_ = q.data();
  k_ = k.data();
  v_ = v.data();
  o_ = o.data();
  lse_ = lse.data();
  dout_ = dout.data();
  out_q_ = dq.data();
  out_k_ = dk.data();
  out_v_ = dv.data();
  run(backward_);
}

void Executor::run(PassState& state) {
  std::fill(state.slot_tokens.begin(), state.slot_tokens.end(), -1);
  std::fill(state.launch_group.begin(), state.launch_group.end(), -1);
  state.waited = 0;
  PassProfile& profile = state.profile;
  profile = PassProfile{};
  profile.stage_seconds.assign(to_size(state.program.stages) + 1, 0.0);
  const auto pass_start = Clock::now();
  const Program& program = state.program;
  for (std::size_t i = 0; i < program.instructions.size(); ++i) {
    const auto start = Clock::now();
    try {
      execute(state, i);
    } catch (const comm::CommError&) {
      throw;
    } catch (const Error& error) {
      throw Error(instruction_context(program, i) + ": " + error.what());
    }
    const double seconds = ms_since(start) / 1000.0;
    profile.stage_seconds[to_size(program.instruction_stage[i])] += seconds;
    const Instruction& instruction = program.instructions[i];
    if (std::holds_alternative<AttnForward>(instruction) ||
        std::holds_alternative<AttnBackward>(instruction) ||
        std::holds_alternative<Merge>(instruction) || std::holds_alternative<Sum>(instruction)) {
      profile.kernel_seconds += seconds;
    } else if (std::holds_alternative<Wait>(instruction)) {
      profile.wait_seconds += seconds;
    } else if (std::holds_alternative<Load>(instruction) ||
               std::holds_alternative<Store>(instruction)) {
      profile.copy_seconds += seconds;
    }
  }
  // A Program waits for all its launches; if one did not, its buffers must not be released while
  // a peer still writes into them.
  wait_through(state, state.launch_group.size());
  profile.seconds = ms_since(pass_start) / 1000.0;
}

void Executor::execute(PassState& state, std::size_t index) {
  const Instruction& instruction = state.program.instructions[index];
  std::visit(
      [&](const auto& op) {
        using Op = std::decay_t<decltype(op)>;
        if constexpr (std::is_same_v<Op, Load>) {
          load(state, op);
        } else if constexpr (std::is_same_v<Op, Store>) {
          store(state, op);
        } else if constexpr (std::is_same_v<Op, Launch>) {
          launch(state, op);
        } else if constexpr (std::is_same_v<Op, Wait>) {
          // Launches complete in issue order, so this also waits for every earlier one.
          wait_through(state, to_size(op.launch) + 1);
        } else if constexpr (std::is_same_v<Op, AttnForward>) {
          attention_forward(state, op);
        } else if constexpr (std::is_same_v<Op, AttnBackward>) {
          attention_backward(state, op);
        } else if constexpr (std::is_same_v<Op, Merge>) {
          merge(state, op);
        } else if constexpr (std::is_same_v<Op, Sum>) {
          sum(state, op);
        } else {
          static_assert(std::is_same_v<Op, Free>);
          for (const SlotId slot : op.slots) {
            state.slot_tokens[to_size(slot)] = -1;
          }
        }
      },
      instruction);
}

std::byte* Executor::slot_data(PassState& state, SlotId slot) {
  return state.arena.data() + state.slot_offset[to_size(slot)];
}

std::int32_t Executor::value_tokens(const PassState& state, SlotId slot) const {
  const std::int32_t tokens = state.slot_tokens[to_size(slot)];
  if (tokens < 0) {
    throw Error("slot " + std::to_string(slot) + " holds no value");
  }
  return tokens;
}

const BlockInfo& Executor::block_info(const PassState& state, BlockId id) const {
  const auto& blocks = state.program.blocks;
  const auto it =
      std::lower_bound(blocks.begin(), blocks.end(), id,
                       [](const BlockInfo& b, BlockId wanted) { return b.id < wanted; });
  if (it == blocks.end() || it->id != id) {
    throw Error("block " + std::to_string(id) + " is not in the Program's block list");
  }
  return *it;
}

std::int64_t Executor::local_offset(BlockId id) const {
  const auto it = std::lower_bound(block_offsets_.begin(), block_offsets_.end(), id,
                                   [](const std::pair<BlockId, std::int64_t>& entry,
                                      BlockId wanted) { return entry.first < wanted; });
  if (it == block_offsets_.end() || it->first != id) {
    throw Error("block " + std::to_string(id) + " is not owned by this device");
  }
  return it->second;
}

kernels::TileMaskView Executor::mask_view(const PassState& state, MaskId mask,
                                          std::int32_t q_tokens, std::int32_t kv_tokens) const {
  if (mask == kFullTile) {
    return {};
  }
  const TileMask& tile = state.program.masks[to_size(mask)];
  if (tile.q_tokens != q_tokens || tile.kv_tokens != kv_tokens) {
    throw Error("mask " + std::to_string(mask) + " is for a " + std::to_string(tile.q_tokens) +
                " x " + std::to_string(tile.kv_tokens) + " tile, the values are " +
                std::to_string(q_tokens) + " x " + std::to_string(kv_tokens));
  }
  return {tile.row_offsets.data(), tile.intervals.data()};
}

void Executor::load(PassState& state, const Load& load) {
  const BlockInfo& block = block_info(state, load.block);
  const std::int64_t token = local_offset(load.block);
  const Slot& slot = state.program.slots[to_size(load.slot)];
  if (block.tokens > slot.tokens) {
    throw Error("block " + std::to_string(block.id) + " has " + std::to_string(block.tokens) +
                " tokens, slot " + std::to_string(load.slot) + " holds " +
                std::to_string(slot.tokens));
  }
  std::byte* data = slot_data(state, load.slot);
  const std::int32_t t = block.tokens;
  const std::int32_t d = header_.head_dim;
  const std::int32_t h = header_.head_block_size;
  const std::int32_t hk = header_.kv_heads_per_block;
  const std::size_t element = kernels::element_size(params_.storage);
  const std::size_t q_value = q_part(t) * element;
  switch (slot.kind) {
    case SlotKind::kQ:
      copy_heads(q_, data, token, t, header_.q_heads, load.head_block * h, h, d, element, false);
      break;
    case SlotKind::kKV: {
      const std::size_t k_value = kv_part(t) * element;
      copy_heads(k_, data, token, t, header_.kv_heads, load.head_block * hk, hk, d, element, false);
      copy_heads(v_, data + k_value, token, t, header_.kv_heads, load.head_block * hk, hk, d,
                 element, false);
      break;
    }
    case SlotKind::kQGrad: {
      if (dout_ == nullptr) {
        throw Error("a kQGrad load in the forward pass");
      }
      // q, do, lse, delta = rowsum(do * o): delta from the stored o (storage dtype), as the
      // forward pass returned it.
      copy_heads(q_, data, token, t, header_.q_heads, load.head_block * h, h, d, element, false);
      copy_heads(dout_, data + q_value, token, t, header_.q_heads, load.head_block * h, h, d,
                 element, false);
      auto* lse = reinterpret_cast<float*>(data + 2 * q_value);
      copy_lse(lse_, lse, token, t, layout_.tokens(), load.head_block * h, h, false);
      scratch_o_.resize(q_value);
      copy_heads(o_, scratch_o_.data(), token, t, header_.q_heads, load.head_block * h, h, d,
                 element, false);
      kernels_.delta(params_.storage, scratch_o_.data(), data + q_value, t, h, d,
                     lse + static_cast<std::size_t>(h) * static_cast<std::size_t>(t));
      break;
    }
    case SlotKind::kOut:
    case SlotKind::kDQ:
    case SlotKind::kDKV:
      throw Error("cannot load an output slot (" + std::string(to_string(slot.kind)) + ")");
  }
  state.slot_tokens[to_size(load.slot)] = t;
}

void Executor::store(PassState& state, const Store& store) {
  const BlockInfo& block = block_info(state, store.block);
  const std::int64_t token = local_offset(store.block);
  const std::int32_t t = block.tokens;
  const std::int32_t d = header_.head_dim;
  const std::int32_t h = header_.head_block_size;
  const std::int32_t hk = header_.kv_heads_per_block;
  const std::size_t element = kernels::element_size(params_.storage);
  const bool kv = store.kind == SlotKind::kDKV;
  const std::int32_t heads = kv ? hk : h;
  const std::int32_t head = store.head_block * heads;
  const std::int32_t all_heads = kv ? header_.kv_heads : header_.q_heads;
  const std::size_t value = kv ? kv_part(t) : q_part(t);
  std::byte* out_a = kv ? out_k_ : out_q_;
  if (out_a == nullptr || (kv && out_v_ == nullptr) ||
      (store.kind == SlotKind::kOut) != (state.program.pass == Pass::kForward)) {
    throw Error("a " + std::string(to_string(store.kind)) + " store in the " +
                std::string(to_string(state.program.pass)) + " pass");
  }
  if (store.slot == kNoSlot) {
    // The value of no contribution is what forward() and backward() initialised the outputs to.
    return;
  }
  if (value_tokens(state, store.slot) != t) {
    throw Error("slot " + std::to_string(store.slot) + " holds " +
                std::to_string(value_tokens(state, store.slot)) + " tokens, block " +
                std::to_string(block.id) + " has " + std::to_string(t));
  }
  const auto* data = reinterpret_cast<const float*>(slot_data(state, store.slot));
  scratch_.resize(value * element / sizeof(float) + 1);
  auto* converted = reinterpret_cast<std::byte*>(scratch_.data());
  const int parts = kv ? 2 : 1;
  for (int part = 0; part < parts; ++part) {
    std::byte* out = part == 0 ? out_a : out_v_;
    kernels::from_float(params_.storage, data + static_cast<std::size_t>(part) * value, converted,
                        value);
    copy_heads(converted, out, token, t, all_heads, head, heads, d, element, true);
  }
  if (store.kind == SlotKind::kOut) {
    copy_lse(data + value, lse_out_, token, t, layout_.tokens(), head, heads, true);
  }
}

void Executor::launch(PassState& state, const Launch& launch) {
  std::vector<comm::TransferOp> ops;
  ops.reserve(launch.ops.size());
  for (const CommOp& op : launch.ops) {
    const Slot& slot = state.program.slots[to_size(op.slot)];
    const std::int64_t per_token = value_bytes(header_, slot.kind, 1);
    comm::TransferOp transfer;
    transfer.peer = op.peer;
    transfer.data = slot_data(state, op.slot);
    transfer.bytes = to_size(op.bytes);
    if (op.direction == CommOp::Direction::kSend) {
      const std::int32_t tokens = value_tokens(state, op.slot);
      if (op.bytes != per_token * tokens) {
        throw Error("send of slot " + std::to_string(op.slot) + " to device " +
                    std::to_string(op.peer) + " says " + std::to_string(op.bytes) +
                    " bytes, its value has " + std::to_string(per_token * tokens));
      }
      transfer.kind = comm::TransferOp::Kind::kSend;
      state.profile.bytes_sent += op.bytes;
    } else {
      if (op.bytes % per_token != 0 || op.bytes / per_token > slot.tokens) {
        throw Error("receive of " + std::to_string(op.bytes) + " bytes from device " +
                    std::to_string(op.peer) + " into slot " + std::to_string(op.slot) +
                    " is not a whole " + std::string(to_string(slot.kind)) + " value of at most " +
                    std::to_string(slot.tokens) + " tokens");
      }
      transfer.kind = comm::TransferOp::Kind::kRecv;
      state.slot_tokens[to_size(op.slot)] = static_cast<std::int32_t>(op.bytes / per_token);
      state.profile.bytes_received += op.bytes;
    }
    ops.push_back(transfer);
  }
  state.launch_group[to_size(launch.id)] = communicator_.start(ops);
}

void Executor::wait_through(PassState& state, std::size_t end) {
  for (; state.waited < end; ++state.waited) {
    if (state.launch_group[state.waited] >= 0) {
      communicator_.wait(state.launch_group[state.waited]);
    }
  }
}

std::size_t Executor::q_part(std::int32_t tokens) const {
  return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(header_.head_block_size) *
         static_cast<std::size_t>(header_.head_dim);
}

std::size_t Executor::kv_part(std::int32_t tokens) const {
  return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(header_.kv_heads_per_block) *
         static_cast<std::size_t>(header_.head_dim);
}

void Executor::expect_output_fits(const PassState& state, SlotId slot, std::int32_t tokens,
                                  bool accumulate) const {
  if (accumulate && value_tokens(state, slot) != tokens) {
    throw Error("adding a value of " + std::to_string(tokens) + " tokens into slot " +
                std::to_string(slot) + ", which holds " +
                std::to_string(value_tokens(state, slot)));
  }
  if (tokens > state.program.slots[to_size(slot)].tokens) {
    throw Error("slot " + std::to_string(slot) + " is too small for " + std::to_string(tokens) +
                " tokens");
  }
}

namespace {

std::size_t entry_count(const std::vector<AttnRow>& rows) {
  std::size_t entries = 0;
  for (const AttnRow& row : rows) entries += row.kv.size();
  return entries;
}

}  // namespace

void Executor::attention_forward(PassState& state, const AttnForward& attention) {
  const std::size_t element = kernels::element_size(params_.storage);
  // Rows point into `tiles`: it must not reallocate while they are built.
  std::vector<kernels::ForwardTile> tiles;
  tiles.reserve(entry_count(attention.rows));
  std::vector<kernels::ForwardRow> rows;
  std::vector<SlotId> wave_outputs;
  auto flush = [&] {
    if (!rows.empty()) {
      kernels_.forward(params_, rows);
    }
    rows.clear();
    wave_outputs.clear();
  };
  for (const AttnRow& row : attention.rows) {
    // Rows of one kernel call must write distinct outputs; a row that merges into the partial of
    // an earlier row starts a new call.
    if (std::find(wave_outputs.begin(), wave_outputs.end(), row.out) != wave_outputs.end()) {
      flush();
    }
    const std::int32_t q_tokens = value_tokens(state, row.q);
    const std::size_t first = tiles.size();
    for (const AttnKv& entry : row.kv) {
      const std::int32_t kv_tokens = value_tokens(state, entry.kv);
      std::byte* kv = slot_data(state, entry.kv);
      kernels::ForwardTile tile;
      tile.k = kv;
      tile.v = kv + kv_part(kv_tokens) * element;
      tile.kv_tokens = kv_tokens;
      tile.mask = mask_view(state, entry.mask, q_tokens, kv_tokens);
      tiles.push_back(tile);
    }
    expect_output_fits(state, row.out, q_tokens, row.accumulate);
    auto* out = reinterpret_cast<float*>(slot_data(state, row.out));
    kernels::ForwardRow kernel_row;
    kernel_row.q = slot_data(state, row.q);
    kernel_row.q_tokens = q_tokens;
    kernel_row.tiles = std::span<const kernels::ForwardTile>(tiles).subspan(first, row.kv.size());
    kernel_row.o = out;
    kernel_row.lse = out + q_part(q_tokens);
    kernel_row.accumulate = row.accumulate;
    rows.push_back(kernel_row);
    wave_outputs.push_back(row.out);
    state.slot_tokens[to_size(row.out)] = q_tokens;
  }
  flush();
}

void Executor::attention_backward(PassState& state, const AttnBackward& attention) {
  const std::size_t element = kernels::element_size(params_.storage);
  // Rows point into `tiles`: it must not reallocate while they are built.
  std::vector<kernels::BackwardTile> tiles;
  tiles.reserve(entry_count(attention.rows));
  std::vector<kernels::BackwardRow> rows;
  std::vector<SlotId> written;  // every slot the current call writes
  auto flush = [&] {
    if (!rows.empty()) {
      kernels_.backward(params_, rows);
    }
    rows.clear();
    written.clear();
  };
  auto writes = [&](SlotId slot) {
    return std::find(written.begin(), written.end(), slot) != written.end();
  };
  for (const AttnRow& row : attention.rows) {
    const std::int32_t q_tokens = value_tokens(state, row.q);
    std::byte* q = slot_data(state, row.q);
    const std::size_t q_value = q_part(q_tokens) * element;
    const auto* stats = reinterpret_cast<const float*>(q + 2 * q_value);
    expect_output_fits(state, row.out, q_tokens, row.accumulate);
    // A row becomes one or more kernel rows ("pieces"): a piece never writes a slot twice, and a
    // call never holds two pieces writing the same slot; later pieces of a row add to its dq.
    bool accumulate = row.accumulate;
    std::size_t entry = 0;
    do {
      if (writes(row.out) || (entry < row.kv.size() && writes(row.kv[entry].dkv))) {
        flush();
      }
      written.push_back(row.out);
      const std::size_t first = tiles.size();
      for (; entry < row.kv.size(); ++entry) {
        const AttnKv& kv_entry = row.kv[entry];
        if (writes(kv_entry.dkv)) {
          break;
        }
        const std::int32_t kv_tokens = value_tokens(state, kv_entry.kv);
        expect_output_fits(state, kv_entry.dkv, kv_tokens, kv_entry.dkv_accumulate);
        const std::size_t kv_value = kv_part(kv_tokens);
        std::byte* kv = slot_data(state, kv_entry.kv);
        auto* dkv = reinterpret_cast<float*>(slot_data(state, kv_entry.dkv));
        kernels::BackwardTile tile;
        tile.k = kv;
        tile.v = kv + kv_value * element;
        tile.kv_tokens = kv_tokens;
        tile.mask = mask_view(state, kv_entry.mask, q_tokens, kv_tokens);
        tile.dk = dkv;
        tile.dv = dkv + kv_value;
        tile.accumulate = kv_entry.dkv_accumulate;
        tiles.push_back(tile);
        written.push_back(kv_entry.dkv);
        state.slot_tokens[to_size(kv_entry.dkv)] = kv_tokens;
      }
      kernels::BackwardRow kernel_row;
      kernel_row.q = q;
      kernel_row.dout = q + q_value;
      kernel_row.lse = stats;
      kernel_row.delta = stats + static_cast<std::size_t>(q_tokens) *
                                     static_cast<std::size_t>(header_.head_block_size);
      kernel_row.q_tokens = q_tokens;
      kernel_row.tiles =
          std::span<const kernels::BackwardTile>(tiles).subspan(first, tiles.size() - first);
      kernel_row.dq = reinterpret_cast<float*>(slot_data(state, row.out));
      kernel_row.accumulate = accumulate;
      rows.push_back(kernel_row);
      accumulate = true;
      state.slot_tokens[to_size(row.out)] = q_tokens;
    } while (entry < row.kv.size());
  }
  flush();
}

void Executor::merge(PassState& state, const Merge& merge) {
  const std::int32_t tokens = value_tokens(state, merge.dst);
  if (value_tokens(state, merge.src) != tokens) {
    throw Error("merging a value of " + std::to_string(value_tokens(state, merge.src)) +
                " tokens into one of " + std::to_string(tokens));
  }
  const std::size_t o_elements = q_part(tokens);
  auto* dst = reinterpret_cast<float*>(slot_data(state, merge.dst));
  const auto* src = reinterpret_cast<const float*>(slot_data(state, merge.src));
  kernels_.merge(dst, dst + o_elements, src, src + o_elements, tokens, header_.head_block_size,
                 header_.head_dim);
}

void Executor::sum(PassState& state, const Sum& sum) {
  const std::int32_t tokens = value_tokens(state, sum.dst);
  if (value_tokens(state, sum.src) != tokens) {
    throw Error("adding a value of " + std::to_string(value_tokens(state, sum.src)) +
                " tokens to one of " + std::to_string(tokens));
  }
  const SlotKind kind = state.program.slots[to_size(sum.dst)].kind;
  const auto elements = to_size(value_bytes(header_, kind, tokens)) / sizeof(float);
  kernels_.add(reinterpret_cast<float*>(slot_data(state, sum.dst)),
               reinterpret_cast<const float*>(slot_data(state, sum.src)), elements);
}

}  // namespace dcp::runtime
