// SPDX-License-Identifier: Apache-2.0
// The executor: runs one rank's forward and backward Programs with a device (a kernel set on host
// memory, or dcp.torch's CUDA device) and a communicator. It is the one interpreter of Programs:
// it lowers them once per prepare (lowering.h), hands the calls that touch tensors to the device
// and the transfers to the communicator, in the Program's order.
//
// Usage from a training loop (docs/runtime.md):
//   Executor executor(communicator, kernels);
//   executor.prepare(plan);                        // once per batch: checks, lowers
//   executor.forward(q, k, v, o, lse, 0, kept);    // local tensors, LocalLayout order
//   executor.backward(q, k, v, o, lse, dout, dq, dk, dv, 0, kept);
// Passes keep nothing between calls: backward takes what forward used and returned (with the kv
// values the plan keeps from the forward pass in `kept`), so any number of layers may run forward
// and then backward in any order (autograd, activation checkpointing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dcp/comm/communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/program/program.h"
#include "dcp/runtime/device.h"
#include "dcp/runtime/local_layout.h"
#include "dcp/runtime/lowering.h"

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
  // Both must outlive the executor. The kernels run on the host device (host memory).
  Executor(comm::Communicator& communicator, kernels::AttentionKernels& kernels);
  // Runs the calls that touch tensors on `device` (dcp.torch's CUDA device).
  Executor(comm::Communicator& communicator, Device& device);

  // Takes this rank's (communicator.rank()) Programs of `plan`. Throws InvalidInput if the plan is
  // for a different number of devices than the communicator has, is malformed
  // (check_plan_header, check_program_structure), or its forward and backward Programs own
  // different blocks, and Error naming the instruction if a
  // Program's values are inconsistent (lowering.h). Lowers both passes.
  void prepare(const Plan& plan);
  // The same with one rank's Programs (as read_program gives them).
  void prepare(const PlanHeader& header, Program forward, Program backward);

  const LocalLayout& layout() const { return layout_; }
  const PlanHeader& header() const { return header_; }
  const LoweredPass& lowered(Pass pass) const { return state(pass).lowered; }

  // q: LocalLayout::q_bytes(), k and v: kv_bytes(); writes o (q_bytes), lse (lse_elements) and
  // kept (kept_bytes(): the kv values received that the plan keeps for the backward pass; empty
  // when it keeps none). softmax_scale 0 means the plan's. Throws InvalidInput naming a tensor
  // whose size is wrong, comm::CommError if a peer fails or times out (or whatever the
  // communicator throws).
  void forward(std::span<const std::byte> q, std::span<const std::byte> k,
               std::span<const std::byte> v, std::span<std::byte> o, std::span<float> lse,
               double softmax_scale = 0, std::span<std::byte> kept = {});
  // The inputs and outputs of a forward call with the same plan (kept included), and dout
  // (q_bytes) in; dq (q_bytes), dk and dv (kv_bytes) out.
  void backward(std::span<const std::byte> q, std::span<const std::byte> k,
                std::span<const std::byte> v, std::span<const std::byte> o,
                std::span<const float> lse, std::span<const std::byte> dout,
                std::span<std::byte> dq, std::span<std::byte> dk, std::span<std::byte> dv,
                double softmax_scale = 0, std::span<const std::byte> kept = {});
  // Bytes of the kept tensor a forward call fills and its backward call reads (after prepare).
  std::size_t kept_bytes() const;

  // Bytes the pass's buffer table needs (after prepare).
  std::size_t arena_bytes(Pass pass) const;
  // Runs the pass in `memory` (at least arena_bytes, 64-byte aligned, owned by the caller until
  // the next prepare or the executor's end) instead of a table of the executor's own: so a
  // framework's allocator (PyTorch's, on the device's memory) owns it. Throws InvalidInput if the
  // memory is too small or misaligned.
  void use_arena(Pass pass, std::span<std::byte> memory);

  // Seconds are measured around the calls on the host: with an asynchronous device they time
  // the launches, not the kernels.
  const PassProfile& profile(Pass pass) const { return state(pass).profile; }

 private:
  struct PassState {
    Program program;
    LoweredPass lowered;
    std::vector<std::byte> owned_arena;  // empty when the caller lent the memory (use_arena)
    std::span<std::byte> arena;
    std::vector<comm::GroupId> launch_group;      // by LaunchId
    std::vector<const LaunchCall*> launch_calls;  // by LaunchId, once started
    std::size_t waited = 0;                       // launches [0, waited) are complete
    PassProfile profile;
  };

  PassState& state(Pass pass) { return pass == Pass::kForward ? forward_ : backward_; }
  const PassState& state(Pass pass) const { return pass == Pass::kForward ? forward_ : backward_; }
  void prepare_pass(PassState& state, Program program);
  float scale(double softmax_scale) const;
  void run(PassState& state, const PassTensors& tensors, float softmax_scale);
  void call(PassState& state, const LoweredCall& call);
  void launch(PassState& state, const LaunchCall& launch);
  // Waits for launches [state.waited, end): a device's launches complete in issue order.
  void wait_through(PassState& state, std::size_t end);

  comm::Communicator& communicator_;
  std::unique_ptr<Device> host_device_;  // when constructed with kernels
  Device& device_;
  PlanHeader header_;
  LocalLayout layout_;
  PassState forward_;
  PassState backward_;
  // The kept tensor of the pass that runs (empty between passes): the forward pass receives the
  // values it keeps into it, both passes send kept values on from it (never writing it in the
  // backward pass).
  std::span<std::byte> kept_;
  bool prepared_ = false;
};

}  // namespace dcp::runtime
