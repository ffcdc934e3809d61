// SPDX-License-Identifier: Apache-2.0
// The executor: runs one rank's forward and backward Programs with a kernel set and a
// communicator.
//
// Usage from a training loop (docs/runtime.md):
//   Executor executor(communicator, kernels);
//   executor.prepare(plan);                        // once per batch: checks, allocates buffers
//   executor.forward(q, k, v, o, lse);             // local tensors, LocalLayout order
//   executor.backward(q, k, v, o, lse, dout, dq, dk, dv);
// Passes keep nothing between calls: backward takes what forward used and returned, so any number
// of layers may run forward and then backward in any order (autograd, activation checkpointing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dcp/comm/communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/program/program.h"
#include "dcp/runtime/local_layout.h"

namespace dcp::runtime {

// Where one pass's time went on this rank. Seconds are wall-clock, measured around instructions.
struct PassProfile {
  double seconds = 0;                 // the whole pass
  double kernel_seconds = 0;          // AttnForward, AttnBackward, Merge, Sum
  double wait_seconds = 0;            // blocked in Wait
  double copy_seconds = 0;            // Load and Store (with the backward's delta)
  std::vector<double> stage_seconds;  // per compute stage, then the epilogue
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
};

class Executor {
 public:
  // Both must outlive the executor.
  Executor(comm::Communicator& communicator, kernels::AttentionKernels& kernels);

  // Takes this rank's (communicator.rank()) Programs of `plan`. Throws InvalidInput if the plan is
  // for a different number of devices than the communicator has, is malformed
  // (check_plan_header, check_program_structure), uses a partial dtype other than fp32, or its
  // forward and backward Programs own different blocks. Allocates the buffer table of both passes.
  void prepare(const Plan& plan);
  // The same with one rank's Programs (as read_program gives them).
  void prepare(const PlanHeader& header, Program forward, Program backward);

  const LocalLayout& layout() const { return layout_; }
  const PlanHeader& header() const { return header_; }

  // q: LocalLayout::q_bytes(), k and v: kv_bytes(); writes o (q_bytes) and lse (lse_elements).
  // softmax_scale 0 means the plan's. Throws InvalidInput naming a tensor whose size is wrong,
  // comm::CommError if a peer fails or times out (or whatever the communicator throws), Error if
  // the Program turns out inconsistent while running (a value of the wrong size).
  void forward(std::span<const std::byte> q, std::span<const std::byte> k,
               std::span<const std::byte> v, std::span<std::byte> o, std::span<float> lse,
               double softmax_scale = 0);
  // The inputs and outputs of a forward call with the same plan, and dout (q_bytes) in; dq
  // (q_bytes), dk and dv (kv_bytes) out.
  void backward(std::span<const std::byte> q, std::span<const std::byte> k,
                std::span<const std::byte> v, std::span<const std::byte> o,
                std::span<const float> lse, std::span<const std::byte> dout,
                std::span<std::byte> dq, std::span<std::byte> dk, std::span<std::byte> dv,
                double softmax_scale = 0);

  // One pass's buffer table, which prepare allocates: a communicator that moves bytes by its own
  // means (torch.distributed) finds a transfer's slot in it.
  std::span<std::byte> arena(Pass pass) { return state(pass).arena; }
  // Bytes the pass's buffer table needs (after prepare).
  std::size_t arena_bytes(Pass pass) const;
  // Runs the pass in `memory` (at least arena_bytes, 64-byte aligned, owned by the caller until
  // the next prepare or the executor's end) instead of the table prepare allocated, which is
  // released: so a framework's allocator (PyTorch's) owns the memory. Throws InvalidInput if the
  // memory is too small or misaligned.
  void use_arena(Pass pass, std::span<std::byte> memory);

  const PassProfile& profile(Pass pass) const {
    return pass == Pass::kForward ? forward_.profile : backward_.profile;
  }

 private:
  struct PassState {
    Program program;
    std::vector<std::byte> owned_arena;  // empty when the caller lent the memory (use_arena)
    std::span<std::byte> arena;
    std::size_t arena_bytes = 0;
    std::vector<std::size_t> slot_offset;
    std::vector<std::int32_t> slot_tokens;    // tokens of the value a slot holds, -1 if none
    std::vector<comm::GroupId> launch_group;  // by LaunchId
    std::size_t waited = 0;                   // launches [0, waited) are complete
    PassProfile profile;
  };

  void prepare_pass(PassState& state, Program program);
  PassState& state(Pass pass) { return pass == Pass::kForward ? forward_ : backward_; }
  const PassState& state(Pass pass) const { return pass == Pass::kForward ? forward_ : backward_; }
  void run(PassState& state);
  void execute(PassState& state, std::size_t index);
  void load(PassState& state, const Load& load);
  void store(PassState& state, const Store& store);
  void launch(PassState& state, const Launch& launch);
  // Waits for launches [state.waited, end): a device's launches complete in issue order.
  void wait_through(PassState& state, std::size_t end);
  void attention_forward(PassState& state, const AttnForward& attention);
  void attention_backward(PassState& state, const AttnBackward& attention);
  void merge(PassState& state, const Merge& merge);
  void sum(PassState& state, const Sum& sum);

  std::byte* slot_data(PassState& state, SlotId slot);
  std::int32_t value_tokens(const PassState& state, SlotId slot) const;
  // Elements of one value's q-shaped part ([tokens][h][d]) and kv-shaped part ([tokens][hk][d]).
  std::size_t q_part(std::int32_t tokens) const;
  std::size_t kv_part(std::int32_t tokens) const;
  // An attention output of `tokens` tokens can go to `slot`: it fits, and adding to (merging
  // into) what the slot holds requires a value of the same size.
  void expect_output_fits(const PassState& state, SlotId slot, std::int32_t tokens,
                          bool accumulate) const;
  const BlockInfo& block_info(const PassState& state, BlockId id) const;
  std::int64_t local_offset(BlockId id) const;
  kernels::TileMaskView mask_view(const PassState& state, MaskId mask, std::int32_t q_tokens,
                                  std::int32_t kv_tokens) const;

  comm::Communicator& communicator_;
  kernels::AttentionKernels& kernels_;
  PlanHeader header_;
  kernels::AttentionParams params_;
  LocalLayout layout_;
  std::vector<std::pair<BlockId, std::int64_t>> block_offsets_;  // owned block -> local token
  PassState forward_;
  PassState backward_;
  bool prepared_ = false;
  void set_scale(double softmax_scale);

  // The local tensors of the pass that runs: inputs, and where outputs go. Null between calls.
  const std::byte* q_ = nullptr;
  const std::byte* k_ = nullptr;
  const std::byte* v_ = nullptr;
  const std::byte* o_ = nullptr;     // backward: the forward's o
  const std::byte* dout_ = nullptr;  // backward
  const float* lse_ = nullptr;       // backward: the forward's lse
  float* lse_out_ = nullptr;         // forward
  std::byte* out_q_ = nullptr;       // forward: o; backward: dq
  std::byte* out_k_ = nullptr;       // backward: dk
  std::byte* out_v_ = nullptr;       // backward: dv
  std::vector<float> scratch_;       // fp32 staging for stores
  std::vector<std::byte> scratch_o_;
};

}  // namespace dcp::runtime
