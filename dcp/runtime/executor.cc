// SPDX-License-Identifier: Apache-2.0
// The executor: runs one rank's forward and backward Programs with a device and a communicator.
#include "dcp/runtime/executor.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/timing.h"

#include "dcp/program/plan_file/plan_file.h"

namespace dcp::runtime {

namespace {

std::string instruction_context(const Program& program, std::size_t index) {
  return "device " + std::to_string(program.device) + ", " + std::string(to_string(program.pass)) +
         " instruction " + std::to_string(index) + " (" +
         std::string(opcode_name(program.instructions[index])) + ")";
}

void expect_size(std::size_t got, std::size_t want, const char* name, const char* unit) {
  if (got != want) {
    throw InvalidInput(std::string("local tensor ") + name + " has " + std::to_string(got) + " " +
                       unit + ", the plan's layout needs " + std::to_string(want));
  }
}

}  // namespace

Executor::Executor(comm::Communicator& communicator, kernels::AttentionKernels& kernels)
    : communicator_(communicator),
      host_device_(make_host_device(kernels)),
      device_(*host_device_) {}

Executor::Executor(comm::Communicator& communicator, Device& device)
    : communicator_(communicator), device_(device) {}

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
  if (forward.kept != backward.kept) {
    throw InvalidInput("device " + std::to_string(forward.device) +
                       ": the forward and backward Programs keep different values");
  }
  header_ = header;
  layout_ = local_layout(header, forward);
  prepare_pass(forward_, std::move(forward));
  prepare_pass(backward_, std::move(backward));
  device_.prepare(header_, layout_, forward_.lowered, backward_.lowered);
  prepared_ = true;
}

void Executor::prepare_pass(PassState& state, Program program) {
  state.program = std::move(program);
  state.lowered = lower_pass(header_, state.program, layout_);
  // The buffer table is allocated by the first pass unless the caller lends memory first
  // (use_arena): a device with memory of its own never pays for a host copy.
  state.owned_arena = std::vector<std::byte>();
  state.arena = {};
  LaunchId launches = 0;
  for (const LoweredCall& call : state.lowered.calls) {
    if (const auto* l = std::get_if<LaunchCall>(&call)) {
      launches = std::max(launches, l->id + 1);
    }
  }
  state.launch_group.assign(to_size(launches), -1);
  state.launch_calls.assign(to_size(launches), nullptr);
  state.profile = PassProfile{};
}

std::size_t Executor::arena_bytes(Pass pass) const {
  return to_size(state(pass).lowered.arena_bytes);
}

std::size_t Executor::kept_bytes() const { return to_size(forward_.lowered.kept_bytes); }

void Executor::use_arena(Pass pass, std::span<std::byte> memory) {
  PassState& s = state(pass);
  const std::size_t bytes = arena_bytes(pass);
  if (memory.size() < bytes) {
    throw InvalidInput("the " + std::string(to_string(pass)) + " buffer table needs " +
                       std::to_string(bytes) + " bytes, the memory given has " +
                       std::to_string(memory.size()));
  }
  if (reinterpret_cast<std::uintptr_t>(memory.data()) %
          static_cast<std::uintptr_t>(kSlotAlignment) !=
      0) {
    throw InvalidInput("the memory given for the " + std::string(to_string(pass)) +
                       " buffer table is not " + std::to_string(kSlotAlignment) + "-byte aligned");
  }
  s.arena = memory.first(bytes);
  s.owned_arena = std::vector<std::byte>();
}

float Executor::scale(double softmax_scale) const {
  if (!std::isfinite(softmax_scale) || softmax_scale < 0) {
    throw InvalidInput("softmax scale " + std::to_string(softmax_scale) +
                       " is not a finite non-negative number");
  }
  return static_cast<float>(softmax_scale > 0 ? softmax_scale : header_.softmax_scale);
}

namespace {

// Forgets the kept tensor however the pass ends.
struct KeptEnd {
  std::span<std::byte>& kept;
  ~KeptEnd() { kept = {}; }
};

}  // namespace

void Executor::forward(std::span<const std::byte> q, std::span<const std::byte> k,
                       std::span<const std::byte> v, std::span<std::byte> o, std::span<float> lse,
                       double softmax_scale, std::span<std::byte> kept) {
  if (!prepared_) {
    throw Error("Executor::forward called before prepare()");
  }
  expect_size(q.size(), layout_.q_bytes(), "q", "bytes");
  expect_size(k.size(), layout_.kv_bytes(), "k", "bytes");
  expect_size(v.size(), layout_.kv_bytes(), "v", "bytes");
  expect_size(o.size(), layout_.q_bytes(), "o", "bytes");
  expect_size(lse.size(), layout_.lse_elements(), "lse", "elements");
  expect_size(kept.size(), kept_bytes(), "kept", "bytes");
  PassTensors tensors;
  tensors.q = q.data();
  tensors.k = k.data();
  tensors.v = v.data();
  tensors.out_q = o.data();
  tensors.lse_out = lse.data();
  tensors.kept_out = kept.data();
  kept_ = kept;
  const KeptEnd kept_end{kept_};
  run(forward_, tensors, scale(softmax_scale));
}

void Executor::backward(std::span<const std::byte> q, std::span<const std::byte> k,
                        std::span<const std::byte> v, std::span<const std::byte> o,
                        std::span<const float> lse, std::span<const std::byte> dout,
                        std::span<std::byte> dq, std::span<std::byte> dk, std::span<std::byte> dv,
                        double softmax_scale, std::span<const std::byte> kept) {
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
  expect_size(kept.size(), kept_bytes(), "kept", "bytes");
  PassTensors tensors;
  tensors.kept = kept.data();
  tensors.q = q.data();
  tensors.k = k.data();
  tensors.v = v.data();
  tensors.o = o.data();
  tensors.lse = lse.data();
  tensors.dout = dout.data();
  tensors.out_q = dq.data();
  tensors.out_k = dk.data();
  tensors.out_v = dv.data();
  // Only sent from: the lowering never receives into the kept tensor in the backward pass.
  kept_ = std::span<std::byte>(const_cast<std::byte*>(kept.data()), kept.size());
  const KeptEnd kept_end{kept_};
  run(backward_, tensors, scale(softmax_scale));
}

namespace {

// Ends the device's pass however the pass ends.
struct PassEnd {
  Device& device;
  ~PassEnd() { device.end(); }
};

}  // namespace

void Executor::run(PassState& state, const PassTensors& tensors, float softmax_scale) {
  if (state.arena.size() < to_size(state.lowered.arena_bytes)) {
    // Slot offsets are multiples of 64 from the arena's start; a vector of max_align_t-aligned
    // bytes is enough for the fp32 and 16-bit element accesses the host kernels make.
    state.owned_arena.assign(to_size(state.lowered.arena_bytes), std::byte{0});
    state.arena = state.owned_arena;
  }
  std::fill(state.launch_group.begin(), state.launch_group.end(), -1);
  std::fill(state.launch_calls.begin(), state.launch_calls.end(), nullptr);
  state.waited = 0;
  PassProfile& profile = state.profile;
  profile = PassProfile{};
  profile.stage_seconds.assign(to_size(state.program.stages) + 1, 0.0);
  const auto pass_start = Clock::now();
  const Program& program = state.program;
  device_.begin(program.pass, state.arena, tensors, softmax_scale);
  const PassEnd end{device_};
  const std::span<const LoweredCall> calls = state.lowered.calls;
  for (std::size_t i = 0, next = 1; i < program.instructions.size(); i = next, next = i + 1) {
    const auto start = Clock::now();
    const LoweredCall& lowered = calls[i];
    const std::int32_t span = state.lowered.span_starting[i];
    const std::int32_t memory = state.lowered.memory_run_starting[i];
    try {
      if (memory >= 0) {  // Merges or Sums: one call for the run
        const MemoryRun& run = state.lowered.memory_runs[to_size(memory)];
        next = to_size(run.end);
        device_.memory_run(run, calls.subspan(i, next - i));
      } else if (span >= 0) {  // Loads and Stores: one call per run of one kind
        const CopySpan& copies = state.lowered.copy_spans[to_size(span)];
        next = to_size(copies.end);
        for (std::int32_t r = copies.run_begin; r < copies.run_end; ++r) {
          const CopyRun& run = state.lowered.copy_runs[to_size(r)];
          device_.copy_run(run, std::span<const std::int64_t>(state.lowered.copy_rows)
                                    .subspan(to_size(run.row_begin) * kCopyFields,
                                             to_size(run.row_end - run.row_begin) * kCopyFields));
        }
      } else {
        call(state, lowered);
      }
    } catch (const comm::CommError&) {
      throw;
    } catch (const Error& error) {
      // A run's call names its first instruction and the run's extent.
      std::string run;
      if (next > i + 1) {
        run = " (a run of instructions ";
        run += std::to_string(i);
        run += "..";
        run += std::to_string(next - 1);
        run += ")";
      }
      throw Error(instruction_context(program, i) + run + ": " + error.what());
    }
    const double seconds = ms_since(start) / 1000.0;
    profile.stage_seconds[to_size(program.instruction_stage[i])] += seconds;
    if (std::holds_alternative<AttentionCall>(lowered) ||
        std::holds_alternative<MergeCall>(lowered) || std::holds_alternative<SumCall>(lowered)) {
      profile.kernel_seconds += seconds;
    } else if (std::holds_alternative<WaitCall>(lowered)) {
      profile.wait_seconds += seconds;
    } else if (std::holds_alternative<LoadCall>(lowered) ||
               std::holds_alternative<StoreCall>(lowered)) {
      profile.copy_seconds += seconds;
    }
  }
  // A Program waits for all its launches; if one did not, its buffers must not be released while
  // a peer still writes into them.
  wait_through(state, state.launch_group.size());
  profile.seconds = ms_since(pass_start) / 1000.0;
}

void Executor::call(PassState& state, const LoweredCall& lowered) {
  std::visit(
      [&](const auto& call) {
        using Call = std::decay_t<decltype(call)>;
        if constexpr (std::is_same_v<Call, LaunchCall>) {
          launch(state, call);
        } else if constexpr (std::is_same_v<Call, WaitCall>) {
          // Launches complete in issue order, so this also waits for every earlier one.
          wait_through(state, to_size(call.launch) + 1);
        } else if constexpr (std::is_same_v<Call, AttentionCall>) {
          device_.attention(call);
        } else if constexpr (std::is_same_v<Call, NoCall>) {
          // A Free, Keep, Restore or Store of no contribution: nothing to run.
        } else {
          // Loads and Stores run in copy runs, Merges and Sums in memory runs (run() above).
          static_assert(std::is_same_v<Call, LoadCall> || std::is_same_v<Call, StoreCall> ||
                        std::is_same_v<Call, MergeCall> || std::is_same_v<Call, SumCall>);
          throw Error("a copy, merge or sum outside the lowering's runs");
        }
      },
      lowered);
}

void Executor::launch(PassState& state, const LaunchCall& launch) {
  if (!launch.narrow.empty()) device_.convert_partials(launch.narrow, launch.narrow_row);
  std::vector<comm::TransferOp> ops;
  ops.reserve(launch.transfers.size());
  for (const TransferCall& transfer : launch.transfers) {
    comm::TransferOp op;
    op.peer = transfer.peer;
    const bool kept = transfer.buffer == BufferKind::kKept;
    op.data = (kept ? kept_.data() : state.arena.data()) + transfer.offset;
    op.buffer = static_cast<std::int32_t>(transfer.buffer);
    op.offset = transfer.offset;
    op.bytes = to_size(transfer.bytes);
    op.kind = transfer.send ? comm::TransferOp::Kind::kSend : comm::TransferOp::Kind::kRecv;
    (transfer.send ? state.profile.bytes_sent : state.profile.bytes_received) += transfer.bytes;
    ops.push_back(op);
  }
  state.launch_group[to_size(launch.id)] = communicator_.start(ops);
  state.launch_calls[to_size(launch.id)] = &launch;
}

void Executor::wait_through(PassState& state, std::size_t end) {
  for (; state.waited < end; ++state.waited) {
    if (state.launch_group[state.waited] >= 0) {
      communicator_.wait(state.launch_group[state.waited]);
    }
    if (const LaunchCall* launch = state.launch_calls[state.waited]) {
      if (!launch->widen.empty()) device_.convert_partials(launch->widen, launch->widen_row);
    }
  }
}

}  // namespace dcp::runtime
