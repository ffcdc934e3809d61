// SPDX-License-Identifier: Apache-2.0
// The executor on the hand-built sample plan (every instruction), with both kernel sets, and its
// errors: wrong world, wrong tensor sizes, a peer that fails.
#include "dcp/runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "dcp/model/mask_builder.h"

#include "dcp/comm/local/local_communicator.h"

#include "tests/runtime/run_fixtures.h"
#include "tests/testing/sample_plan.h"

namespace dcp {
namespace {

// The batch sample_plan() describes: an 8-token causal sequence and 2 tokens attending nothing.
Workload sample_workload() {
  AttentionShape shape;
  shape.q_heads = 2;
  shape.kv_heads = 1;
  shape.head_dim = 8;
  shape.dtype = DType::kBf16;
  const SequenceBatch batch({8, 2});
  std::vector<SequenceMask> masks = build_batch_mask(MaskSpec{}, SequenceBatch({8}));
  MaskBuilder nothing(2);
  nothing.add(0, 2, {});
  masks.push_back(std::move(nothing).finish());
  return Workload(shape, batch, masks, 4, 1);
}

runtime::OutputErrors run_sample(kernels::KernelKind kind) {
  const Plan plan = testing::sample_plan();
  const Workload workload = sample_workload();
  const runtime::BatchInputs inputs = runtime::random_inputs(testing::batch_shape(workload), 17);
  runtime::RunOptions options;
  options.kernels = kind;
  const std::span<const TokenCount> offsets = workload.batch().offsets();
  const runtime::RunResult result = runtime::run_plan_locally(plan, offsets, inputs, options);
  EXPECT_EQ(result.forward.size(), 2u);
  EXPECT_GT(result.forward[1].bytes_received, 0);  // the kv of block 0 travelled
  const runtime::DenseReference reference =
      runtime::dense_reference(workload, inputs, plan.header.softmax_scale, 1);
  return runtime::compare_outputs(inputs.shape, result.outputs, reference);
}

TEST(Executor, RunsTheSamplePlanWithEveryInstructionCorrectly) {
  for (const kernels::KernelKind kind :
       {kernels::KernelKind::kReference, kernels::KernelKind::kCpu}) {
    const runtime::OutputErrors errors = run_sample(kind);
    EXPECT_EQ(errors.non_finite, 0);
    EXPECT_EQ(errors.lse_mismatches, 0);  // sequence 1's rows: -inf on both sides
    // bf16 storage of o and the gradients: a few bf16 ulps of max |reference|.
    EXPECT_LT(errors.worst_relative(), 2e-2) << kernels::to_string(kind);
    EXPECT_GT(errors.dk.max_reference, 0);
  }
}

// Keeping the kv of block 0 from the forward pass gives the same outputs, bit for bit, with one
// transfer fewer in the backward pass.
TEST(Executor, KvKeptFromTheForwardPassGivesTheSameOutputs) {
  const Workload workload = sample_workload();
  const runtime::BatchInputs inputs = runtime::random_inputs(testing::batch_shape(workload), 17);
  const std::span<const TokenCount> offsets = workload.batch().offsets();
  const runtime::RunOptions options;
  const runtime::RunResult sent =
      runtime::run_plan_locally(testing::sample_plan(), offsets, inputs, options);
  const runtime::RunResult kept =
      runtime::run_plan_locally(testing::sample_plan_with_kept_kv(), offsets, inputs, options);
  EXPECT_EQ(kept.outputs.o, sent.outputs.o);
  EXPECT_EQ(kept.outputs.lse, sent.outputs.lse);
  EXPECT_EQ(kept.outputs.dq, sent.outputs.dq);
  EXPECT_EQ(kept.outputs.dk, sent.outputs.dk);
  EXPECT_EQ(kept.outputs.dv, sent.outputs.dv);
  EXPECT_GT(sent.backward[1].bytes_received, 0);
  EXPECT_EQ(kept.backward[1].bytes_received, 0);
  EXPECT_EQ(kept.backward[0].bytes_sent, 0);
}

// Partials in bf16: the only partial that travels in the sample plan is device 1's dk, dv of
// block 0, so o, lse and dq are bit for bit those of fp32 partials, dk and dv differ by at most the
// rounding of that partial (a bf16 ulp of its magnitude) plus the output's own rounding, and the
// message is half as long.
TEST(Executor, PartialsInBf16AreRoundedOnceOnTheWire) {
  const Workload workload = sample_workload();
  const runtime::BatchInputs inputs = runtime::random_inputs(testing::batch_shape(workload), 17);
  const std::span<const TokenCount> offsets = workload.batch().offsets();
  const runtime::RunOptions options;
  const runtime::RunResult wide =
      runtime::run_plan_locally(testing::sample_plan(DType::kFp32), offsets, inputs, options);
  const runtime::RunResult narrow =
      runtime::run_plan_locally(testing::sample_plan(DType::kBf16), offsets, inputs, options);
  EXPECT_EQ(narrow.outputs.o, wide.outputs.o);
  EXPECT_EQ(narrow.outputs.lse, wide.outputs.lse);
  EXPECT_EQ(narrow.outputs.dq, wide.outputs.dq);
  const auto storage = inputs.shape.storage;
  for (const auto& [got_bytes, want_bytes] :
       {std::pair{&narrow.outputs.dk, &wide.outputs.dk}, {&narrow.outputs.dv, &wide.outputs.dv}}) {
    const std::vector<double> got = runtime::to_doubles(storage, *got_bytes);
    const std::vector<double> want = runtime::to_doubles(storage, *want_bytes);
    ASSERT_EQ(got.size(), want.size());
    double scale = 0;
    for (const double x : want) scale = std::max(scale, std::abs(x));
    ASSERT_GT(scale, 0);
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE(std::abs(got[i] - want[i]), 2 * scale / 256) << i;  // two bf16 ulps
    }
  }
  EXPECT_EQ(2 * narrow.backward[1].bytes_sent, wide.backward[1].bytes_sent);
  EXPECT_EQ(2 * narrow.backward[0].bytes_received, wide.backward[0].bytes_received);
  const runtime::DenseReference reference =
      runtime::dense_reference(workload, inputs, testing::sample_plan().header.softmax_scale, 1);
  EXPECT_LT(runtime::compare_outputs(inputs.shape, narrow.outputs, reference).worst_relative(),
            2e-2);
}

TEST(Executor, RejectsAKeptTensorOfTheWrongSize) {
  const Plan plan = testing::sample_plan_with_kept_kv();
  comm::LocalWorld world(2, {});
  auto kernel_set = kernels::make_kernels(kernels::KernelKind::kCpu, 1);
  runtime::Executor executor(world.communicator(1), *kernel_set);
  executor.prepare(plan);
  EXPECT_EQ(executor.kept_bytes(),
            static_cast<std::size_t>(value_bytes(plan.header, SlotKind::kKV, 4)));
  const runtime::LocalLayout& layout = executor.layout();
  std::vector<std::byte> q(layout.q_bytes()), kv(layout.kv_bytes()), o(layout.q_bytes());
  std::vector<float> lse(layout.lse_elements());
  try {
    executor.forward(q, kv, kv, o, lse);  // no kept tensor
    FAIL() << "a forward pass without the kept tensor the plan fills";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("kept"), std::string::npos) << error.what();
  }
  std::vector<std::byte> short_kept(executor.kept_bytes() - 1);
  EXPECT_THROW(executor.backward(q, kv, kv, o, lse, q, q, kv, kv, 0, short_kept), InvalidInput);
}

TEST(Executor, RejectsAPlanForAnotherWorldSize) {
  const Plan plan = testing::sample_plan();  // 2 devices
  comm::LocalWorld world(3, {});
  auto kernel_set = kernels::make_kernels(kernels::KernelKind::kCpu, 1);
  runtime::Executor executor(world.communicator(0), *kernel_set);
  try {
    executor.prepare(plan);
    FAIL() << "a 2-device plan prepared on 3 ranks";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("2 devices"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("3 ranks"), std::string::npos) << error.what();
  }
}

TEST(Executor, RejectsLocalTensorsOfTheWrongSize) {
  const Plan plan = testing::sample_plan();
  comm::LocalWorld world(2, {});
  auto kernel_set = kernels::make_kernels(kernels::KernelKind::kCpu, 1);
  runtime::Executor executor(world.communicator(0), *kernel_set);
  executor.prepare(plan);
  const runtime::LocalLayout& layout = executor.layout();
  EXPECT_EQ(layout.tokens(), 6);  // blocks 0 (4 tokens) and 2 (2 tokens)
  std::vector<std::byte> q(layout.q_bytes()), kv(layout.kv_bytes()), short_q(layout.q_bytes() - 2);
  std::vector<float> lse(layout.lse_elements());
  std::vector<std::byte> o(layout.q_bytes());
  EXPECT_THROW(executor.forward(short_q, kv, kv, o, lse), InvalidInput);
  EXPECT_THROW(executor.backward(q, kv, kv, o, lse, short_q, q, kv, kv), InvalidInput);
  EXPECT_THROW(executor.backward(q, kv, kv, short_q, lse, q, q, kv, kv), InvalidInput);
  EXPECT_THROW(executor.forward(q, kv, kv, o, lse, -1.0), InvalidInput);
}

struct LayerOutputs {
  std::vector<std::byte> o, dq, dk, dv;
  std::vector<float> lse;
  friend bool operator==(const LayerOutputs&, const LayerOutputs&) = default;
};

// Passes keep nothing between calls: two layers' forwards, then their backwards in reverse order
// (as autograd runs them), give each layer what it gets when run alone.
TEST(Executor, PassesAreStatelessAcrossInterleavedLayers) {
  const Plan plan = testing::sample_plan();
  const Workload workload = sample_workload();
  const std::span<const TokenCount> offsets = workload.batch().offsets();
  const runtime::BatchShape shape = testing::batch_shape(workload);
  const runtime::BatchInputs a = runtime::random_inputs(shape, 3);
  const runtime::BatchInputs b = runtime::random_inputs(shape, 4);
  std::vector<LayerOutputs> alone(4), interleaved(4);  // [rank * 2 + layer]
  comm::run_local_ranks(2, {}, [&](comm::Communicator& communicator) {
    auto kernel_set = kernels::make_kernels(kernels::KernelKind::kCpu, 1);
    runtime::Executor executor(communicator, *kernel_set);
    executor.prepare(plan);
    const runtime::LocalLayout& layout = executor.layout();
    const runtime::LocalTensors la = runtime::gather_local_inputs(a, layout, offsets);
    const runtime::LocalTensors lb = runtime::gather_local_inputs(b, layout, offsets);
    auto fresh = [&] {
      return LayerOutputs{
          std::vector<std::byte>(layout.q_bytes()), std::vector<std::byte>(layout.q_bytes()),
          std::vector<std::byte>(layout.kv_bytes()), std::vector<std::byte>(layout.kv_bytes()),
          std::vector<float>(layout.lse_elements())};
    };
    auto forward = [&](const runtime::LocalTensors& in, LayerOutputs& out) {
      executor.forward(in.q, in.k, in.v, out.o, out.lse);
    };
    auto backward = [&](const runtime::LocalTensors& in, LayerOutputs& out) {
      executor.backward(in.q, in.k, in.v, out.o, out.lse, in.dout, out.dq, out.dk, out.dv);
    };
    const auto rank = static_cast<std::size_t>(communicator.rank());
    LayerOutputs& alone_a = alone[rank * 2] = fresh();
    LayerOutputs& alone_b = alone[rank * 2 + 1] = fresh();
    forward(la, alone_a);
    backward(la, alone_a);
    forward(lb, alone_b);
    backward(lb, alone_b);
    LayerOutputs& layer_a = interleaved[rank * 2] = fresh();
    LayerOutputs& layer_b = interleaved[rank * 2 + 1] = fresh();
    forward(la, layer_a);
    forward(lb, layer_b);
    backward(lb, layer_b);
    backward(la, layer_a);
  });
  EXPECT_NE(alone[0], alone[1]);  // the two layers differ
  EXPECT_EQ(alone, interleaved);
}

TEST(Executor, FailsPromptlyWhenAPeerFails) {
  const Plan plan = testing::sample_plan();
  const Workload workload = sample_workload();
  const runtime::BatchInputs inputs = runtime::random_inputs(testing::batch_shape(workload), 1);
  const std::span<const TokenCount> offsets = workload.batch().offsets();
  comm::CommOptions options;
  options.timeout_seconds = 30;
  const auto start = std::chrono::steady_clock::now();
  // Rank 0 dies before sending block 0's kv; rank 1 must not wait for it until the timeout.
  EXPECT_THROW(comm::run_local_ranks(2, options,
                                     [&](comm::Communicator& communicator) {
                                       if (communicator.rank() == 0) {
                                         throw std::runtime_error("rank 0 lost its device");
                                       }
                                       runtime::RunOptions run;
                                       run.comm = options;
                                       runtime::run_plan(communicator, plan, offsets, inputs, run);
                                     }),
               std::runtime_error);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

TEST(Executor, TimesOutWhenAPeerStopsAnswering) {
  const Plan plan = testing::sample_plan();
  const Workload workload = sample_workload();
  const runtime::BatchInputs inputs = runtime::random_inputs(testing::batch_shape(workload), 1);
  const std::span<const TokenCount> offsets = workload.batch().offsets();
  comm::CommOptions options;
  options.timeout_seconds = 0.3;
  try {
    comm::run_local_ranks(2, options, [&](comm::Communicator& communicator) {
      if (communicator.rank() == 0) {
        // Stops answering: never sends, returns only after rank 1 has given up.
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return;
      }
      runtime::RunOptions run;
      run.comm = options;
      runtime::run_plan(communicator, plan, offsets, inputs, run);
    });
    FAIL() << "rank 1 did not time out";
  } catch (const comm::CommError& error) {
    EXPECT_NE(std::string(error.what()).find("timed out"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace dcp
