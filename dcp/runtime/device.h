// SPDX-License-Identifier: Apache-2.0
// The device seam: what the executor asks of the memory and processors that run a pass. The
// executor interprets the Program (lowered once per prepare, lowering.h) and talks to the
// communicator; a device runs the lowered calls that touch tensors, a run of them per call where
// the lowering groups them (copies, merges and sums, conversions): the CPU device (host memory,
// an AttentionKernels set) here, the Triton device of dcp.torch on CUDA (python/dcp/torch/
// _device.py), which runs each call as one launch. A device may run its calls asynchronously (a
// CUDA stream); the communicator then orders transfers against it (the torch transport does,
// with events).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "dcp/kernels/attention_kernels.h"
#include "dcp/runtime/lowering.h"

namespace dcp::runtime {

// The local tensors of the pass that runs (LocalLayout order). Forward: q, k, v in, o and
// lse_out out. Backward: q, k, v, o, lse, dout in; out_q (dq), out_k, out_v out. The pointers are
// the device's memory: the executor never reads them.
struct PassTensors {
  const std::byte* q = nullptr;
  const std::byte* k = nullptr;
  const std::byte* v = nullptr;
  const std::byte* o = nullptr;     // backward
  const std::byte* dout = nullptr;  // backward
  const float* lse = nullptr;       // backward
  float* lse_out = nullptr;         // forward
  std::byte* out_q = nullptr;       // forward: o; backward: dq
  std::byte* out_k = nullptr;       // backward: dk
  std::byte* out_v = nullptr;       // backward: dv
  // The kept tensor (LoweredPass::kept_bytes): the forward pass receives into kept_out, the
  // backward pass reads kept (what its forward filled). Attention entries whose kEntryKvBuffer
  // is BufferKind::kKept read their kv value there.
  std::byte* kept_out = nullptr;
  const std::byte* kept = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string_view name() const = 0;

  // After each Executor::prepare: the plan's shape, this rank's local layout and both lowered
  // passes, which stay valid until the next prepare.
  virtual void prepare(const PlanHeader& header, const LocalLayout& layout,
                       const LoweredPass& forward, const LoweredPass& backward) = 0;
  // A pass starts in `arena` (its buffer table) with these tensors and softmax scale. The device
  // sets the outputs to the value of no contribution: o = 0, lse = -inf; dq = dk = dv = 0.
  virtual void begin(Pass pass, std::span<std::byte> arena, const PassTensors& tensors,
                     float softmax_scale) = 0;
  // A run of copies (LoweredPass::copy_runs), its rows of copy_rows (kCopyFields each): every
  // Load and Store of a pass is in one such run, so the executor makes no other copy calls.
  virtual void copy_run(const CopyRun& run, std::span<const std::int64_t> rows) = 0;
  virtual void attention(const AttentionCall& call) = 0;  // of the pass begun
  // A run of Merges or Sums (LoweredPass::memory_runs): its rows of memory_rows, and `calls`,
  // its instructions' lowered calls (Frees, Keeps and Restores among them, as NoCalls). Every
  // Merge and Sum of a pass is in one such run.
  virtual void memory_run(const MemoryRun& run, std::span<const LoweredCall> calls) = 0;
  // A launch's narrow or widen calls (partials between their fp32 slots and their wire buffers
  // in the plan header's partial dtype), which are rows [first_row, first_row + calls.size()) of
  // LoweredPass::wire_rows.
  virtual void convert_partials(std::span<const WireCall> calls, std::int32_t first_row) = 0;
  // The pass's calls are all made (the executor calls it however the pass ends).
  virtual void end() {}
};

// The device of host memory: copies, conversions and the given kernel set (cpu or reference).
std::unique_ptr<Device> make_host_device(kernels::AttentionKernels& kernels);

}  // namespace dcp::runtime
