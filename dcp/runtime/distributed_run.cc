// SPDX-License-Identifier: Apache-2.0
// Runs a plan's forward and backward passes over a whole batch on every rank of a communicator,
// and gathers the outputs and each rank's profile on rank 0.
#include "dcp/runtime/distributed_run.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"

#include "dcp/comm/local/local_communicator.h"

namespace dcp::runtime {

namespace {

std::vector<double> pack(const PassProfile& profile) {
  std::vector<double> packed = {profile.seconds,
                                profile.kernel_seconds,
                                profile.wait_seconds,
                                profile.copy_seconds,
                                static_cast<double>(profile.bytes_sent),
                                static_cast<double>(profile.bytes_received)};
  packed.insert(packed.end(), profile.stage_seconds.begin(), profile.stage_seconds.end());
  return packed;
}

PassProfile unpack(const std::vector<double>& packed) {
  PassProfile profile;
  profile.seconds = packed[0];
  profile.kernel_seconds = packed[1];
  profile.wait_seconds = packed[2];
  profile.copy_seconds = packed[3];
  profile.bytes_sent = static_cast<std::int64_t>(packed[4]);
  profile.bytes_received = static_cast<std::int64_t>(packed[5]);
  profile.stage_seconds.assign(packed.begin() + 6, packed.end());
  return profile;
}

std::size_t packed_size(const Program& program) { return 6 + to_size(program.stages) + 1; }

template <typename T>
comm::TransferOp op(comm::TransferOp::Kind kind, std::int32_t peer, std::vector<T>& data) {
  return {kind, peer, data.data(), data.size() * sizeof(T)};
}

std::int32_t threads_per_rank(const RunOptions& options, std::int32_t ranks_here) {
  if (options.kernel_threads > 0) {
    return options.kernel_threads;
  }
  const auto hardware =
      static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hardware / std::max(1, ranks_here));
}

RunResult run_rank(comm::Communicator& communicator, const Plan& plan,
                   std::span<const TokenCount> sequence_offsets, const BatchInputs& inputs,
                   const RunOptions& options, std::int32_t ranks_here) {
  const auto kernel_set =
      kernels::make_kernels(options.kernels, threads_per_rank(options, ranks_here));
  Executor executor(communicator, *kernel_set);
  executor.prepare(plan);
  const LocalLayout& layout = executor.layout();
  LocalTensors local = gather_local_inputs(inputs, layout, sequence_offsets);
  std::vector<std::byte> o(layout.q_bytes()), dq(layout.q_bytes()), dk(layout.kv_bytes()),
      dv(layout.kv_bytes());
  std::vector<float> lse(layout.lse_elements());
  std::vector<std::byte> kept(executor.kept_bytes());

  communicator.barrier();
  executor.forward(local.q, local.k, local.v, o, lse, 0, kept);
  communicator.barrier();
  executor.backward(local.q, local.k, local.v, o, lse, local.dout, dq, dk, dv, 0, kept);

  // Gather on rank 0: every other rank sends its outputs and profiles; rank 0 knows each rank's
  // layout from the plan.
  const std::int32_t rank = communicator.rank();
  const std::int32_t size = communicator.size();
  std::vector<double> forward_profile = pack(executor.profile(Pass::kForward));
  std::vector<double> backward_profile = pack(executor.profile(Pass::kBackward));
  if (rank != 0) {
    constexpr auto kSend = comm::TransferOp::Kind::kSend;
    const std::vector<comm::TransferOp> ops = {op(kSend, 0, o),
                                               op(kSend, 0, lse),
                                               op(kSend, 0, dq),
                                               op(kSend, 0, dk),
                                               op(kSend, 0, dv),
                                               op(kSend, 0, forward_profile),
                                               op(kSend, 0, backward_profile)};
    communicator.wait(communicator.start(ops));
    return {};
  }
  RunResult result;
  result.outputs = empty_outputs(inputs.shape);
  result.forward.resize(to_size(size));
  result.backward.resize(to_size(size));
  scatter_local_outputs(inputs.shape, layout, sequence_offsets, o, lse, dq, dk, dv, result.outputs);
  result.forward[0] = executor.profile(Pass::kForward);
  result.backward[0] = executor.profile(Pass::kBackward);
  for (std::int32_t peer = 1; peer < size; ++peer) {
    const LocalLayout peer_layout = local_layout(plan.header, plan.forward[to_size(peer)]);
    std::vector<std::byte> po(peer_layout.q_bytes()), pdq(peer_layout.q_bytes()),
        pdk(peer_layout.kv_bytes()), pdv(peer_layout.kv_bytes());
    std::vector<float> plse(peer_layout.lse_elements());
    std::vector<double> pf(packed_size(plan.forward[to_size(peer)]));
    std::vector<double> pb(packed_size(plan.backward[to_size(peer)]));
    constexpr auto kRecv = comm::TransferOp::Kind::kRecv;
    const std::vector<comm::TransferOp> ops = {
        op(kRecv, peer, po),  op(kRecv, peer, plse), op(kRecv, peer, pdq), op(kRecv, peer, pdk),
        op(kRecv, peer, pdv), op(kRecv, peer, pf),   op(kRecv, peer, pb)};
    communicator.wait(communicator.start(ops));
    scatter_local_outputs(inputs.shape, peer_layout, sequence_offsets, po, plse, pdq, pdk, pdv,
                          result.outputs);
    result.forward[to_size(peer)] = unpack(pf);
    result.backward[to_size(peer)] = unpack(pb);
  }
  for (std::int32_t r = 0; r < size; ++r) {
    result.forward_seconds = std::max(result.forward_seconds, result.forward[to_size(r)].seconds);
    result.backward_seconds =
        std::max(result.backward_seconds, result.backward[to_size(r)].seconds);
  }
  return result;
}

}  // namespace

RunResult run_plan(comm::Communicator& communicator, const Plan& plan,
                   std::span<const TokenCount> sequence_offsets, const BatchInputs& inputs,
                   const RunOptions& options) {
  // Without knowing how ranks share machines, assume they share this one.
  return run_rank(communicator, plan, sequence_offsets, inputs, options, communicator.size());
}

RunResult run_plan_locally(const Plan& plan, std::span<const TokenCount> sequence_offsets,
                           const BatchInputs& inputs, const RunOptions& options) {
  const std::int32_t ranks = plan.header.cluster.devices();
  RunResult result;
  comm::run_local_ranks(ranks, options.comm, [&](comm::Communicator& communicator) {
    RunResult mine = run_rank(communicator, plan, sequence_offsets, inputs, options, ranks);
    if (communicator.rank() == 0) {
      result = std::move(mine);
    }
  });
  return result;
}

}  // namespace dcp::runtime
