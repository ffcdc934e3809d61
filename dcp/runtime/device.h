// SPDX-License-Identifier: Apache-2.0
// The device seam: what the executor asks of the memory and processors that run a pass. The
// executor interprets the Program (lowered once per prepare, lowering.h) and talks to the
// communicator; a device runs the lowered calls that touch tensors: the CPU device (host memory,
// an AttentionKernels set) here, the Triton device of dcp.torch on CUDA (python/dcp/torch/
// _device.py). A device may run its calls asynchronously (a CUDA stream); the communicator then
// orders transfers against it (the torch transport does, with events).
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
  // backward pass reads kept (what its forward filled). Attention entries with kEntryKvKept read
  // their kv value there.
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
  virtual void load(const LoadCall& call) = 0;
  virtual void store(const StoreCall& call) = 0;
  // A run of copies (LoweredPass::copy_runs): its rows of copy_rows (slot offset, first local
  // token, tokens, head block each). By default one load or store per row; a GPU device runs a
  // run as one launch.
  virtual void copy_run(const CopyRun& run, std::span<const std::int64_t> rows) {
    for (std::size_t i = 0; i + CopyRun::kFields <= rows.size(); i += CopyRun::kFields) {
      const auto tokens = static_cast<std::int32_t>(rows[i + 2]);
      const auto head_block = static_cast<std::int32_t>(rows[i + 3]);
      if (run.store) {
        store(StoreCall{run.kind, rows[i], rows[i + 1], tokens, head_block});
      } else {
        load(LoadCall{run.kind, rows[i], rows[i + 1], tokens, head_block});
      }
    }
  }
  virtual void attention(const AttentionCall& call) = 0;  // of the pass begun
  virtual void merge(const MergeCall& call) = 0;
  virtual void sum(const SumCall& call) = 0;
  // A run of Merges or Sums (LoweredPass::memory_runs); `calls` are its instructions' lowered
  // calls, Frees, Keeps and Restores among them (NoCalls). By default one merge or sum each; a
  // GPU device runs the run's rows of memory_rows as one launch.
  virtual void memory_run(const MemoryRun& run, std::span<const LoweredCall> calls) {
    (void)run;
    for (const LoweredCall& call : calls) {
      if (const auto* merge_call = std::get_if<MergeCall>(&call)) {
        merge(*merge_call);
      } else if (const auto* sum_call = std::get_if<SumCall>(&call)) {
        sum(*sum_call);
      }
    }
  }
  // A partial between its fp32 slot and its wire buffer in the partial dtype (the plan header's).
  virtual void convert_partial(const WireCall& call) = 0;
  // A launch's narrow or widen calls, which are rows [first_row, first_row + calls.size()) of
  // LoweredPass::wire_rows. By default one convert_partial each; a GPU device runs them as one
  // launch.
  virtual void convert_partials(std::span<const WireCall> calls, std::int32_t first_row) {
    (void)first_row;
    for (const WireCall& call : calls) convert_partial(call);
  }
  // The pass's calls are all made (the executor calls it however the pass ends).
  virtual void end() {}
};

// The device of host memory: copies, conversions and the given kernel set (cpu or reference).
std::unique_ptr<Device> make_host_device(kernels::AttentionKernels& kernels);

}  // namespace dcp::runtime
