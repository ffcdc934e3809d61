// SPDX-License-Identifier: Apache-2.0
// The executor for dcp.torch: the C++ Executor (the one interpreter of Programs) with the CPU
// kernels, moving bytes through a Python transport over torch.distributed (python/dcp/torch/
// _transport.py). The executor runs with the GIL released; it takes the GIL only to start and wait
// for a Launch's transfers, one Python call each.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "python/src/bindings.h"
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

namespace nb = nanobind;

namespace dcp::python {
namespace {

using Tensor = nb::ndarray<nb::c_contig, nb::device::cpu>;

// A Communicator whose transfers a Python object carries out: start(ops) -> group id, where ops
// is a list of (is_send, peer, arena (0 forward, 1 backward), byte offset, bytes), and wait(group),
// barrier(), abort(reason). Zero-byte transfers are never handed over.
class TransportCommunicator final : public comm::Communicator {
 public:
  TransportCommunicator(nb::object transport, std::int32_t rank, std::int32_t size)
      : transport_(std::move(transport)), rank_(rank), size_(size) {}

  void attach(runtime::Executor* executor) { executor_ = executor; }

  template <typename F>
  auto call(F&& f) {
    try {
      return f();
    } catch (nb::python_error& error) {
      // The transport's exception, as a CommError: the executor stops at once and the caller
      // sees a RuntimeError naming this rank and what the transport said.
      throw comm::CommError("rank " + std::to_string(rank_) + ": " + error.what());
    }
  }

  std::string_view name() const override { return "torch.distributed"; }
  std::int32_t rank() const override { return rank_; }
  std::int32_t size() const override { return size_; }

  comm::GroupId start(std::span<const comm::TransferOp> ops) override {
    nb::gil_scoped_acquire gil;
    nb::list list;
    for (const comm::TransferOp& op : ops) {
      if (op.bytes == 0) continue;
      const auto [arena, offset] = locate(op.data, op.bytes);
      list.append(nb::make_tuple(op.kind == comm::TransferOp::Kind::kSend, op.peer, arena, offset,
                                 op.bytes));
    }
    return call([&] { return nb::cast<comm::GroupId>(transport_.attr("start")(list)); });
  }
  void wait(comm::GroupId group) override {
    nb::gil_scoped_acquire gil;
    call([&] {
      transport_.attr("wait")(group);
      return 0;
    });
  }
  void barrier() override {
    nb::gil_scoped_acquire gil;
    call([&] {
      transport_.attr("barrier")();
      return 0;
    });
  }
  void abort(std::string_view reason) noexcept override {
    try {
      nb::gil_scoped_acquire gil;
      transport_.attr("abort")(std::string(reason));
    } catch (...) {  // abort must not throw; the caller is failing already
    }
  }

 private:
  std::pair<int, std::size_t> locate(const void* data, std::size_t bytes) const {
    const auto* p = static_cast<const std::byte*>(data);
    for (const int arena : {0, 1}) {
      const std::span<std::byte> span =
          executor_->arena(arena == 0 ? Pass::kForward : Pass::kBackward);
      if (!span.empty() && p >= span.data() && p + bytes <= span.data() + span.size()) {
        return {arena, static_cast<std::size_t>(p - span.data())};
      }
    }
    throw Error("a transfer of " + std::to_string(bytes) +
                " bytes lies outside the executor's "
                "buffer tables");
  }

  nb::object transport_;
  std::int32_t rank_;
  std::int32_t size_;
  runtime::Executor* executor_ = nullptr;
};

std::string dtype_name(const nb::dlpack::dtype& dtype) {
  const char* code =
      dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)    ? "float"
      : dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
      : dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)    ? "int"
                                                                                : "other";
  return std::string(code) + std::to_string(dtype.bits);
}

nb::dlpack::dtype storage_dtype(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
    case DType::kFp16:
      return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kFp32:
      break;
  }
  return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 32, 1};
}

void expect_dtype(const Tensor& tensor, const nb::dlpack::dtype& want, const char* name) {
  if (tensor.dtype() != want) {
    throw InvalidInput(std::string("tensor ") + name + " is " + dtype_name(tensor.dtype()) +
                       ", the plan needs " + dtype_name(want));
  }
}

std::span<const std::byte> in(const Tensor& t) {
  return {static_cast<const std::byte*>(t.data()), t.nbytes()};
}
std::span<std::byte> out(Tensor& t) { return {static_cast<std::byte*>(t.data()), t.nbytes()}; }
std::span<float> out_floats(Tensor& t) { return {static_cast<float*>(t.data()), t.size()}; }
std::span<const float> in_floats(const Tensor& t) {
  return {static_cast<const float*>(t.data()), t.size()};
}

class TorchExecutor {
 public:
  TorchExecutor(nb::object transport, std::int32_t rank, std::int32_t size, std::int32_t threads)
      : communicator_(std::move(transport), rank, size),
        kernels_(kernels::make_kernels(kernels::KernelKind::kCpu, threads)),
        executor_(communicator_, *kernels_) {
    communicator_.attach(&executor_);
  }

  void prepare(const PlanHandle& plan) {
    plan_ = plan;  // keeps the plan alive while its Programs run
    executor_.prepare(plan.plan());
  }
  runtime::Executor& executor() { return executor_; }
  const PlanHeader& header() const { return executor_.header(); }

  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, Tensor& lse,
               double scale) {
    expect_storage({{&q, "q"}, {&k, "k"}, {&v, "v"}, {&o, "o"}}, lse);
    executor_.forward(in(q), in(k), in(v), out(o), out_floats(lse), scale);
  }

  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv,
                double scale) {
    expect_storage({{&q, "q"},
                    {&k, "k"},
                    {&v, "v"},
                    {&o, "o"},
                    {&dout, "do"},
                    {&dq, "dq"},
                    {&dk, "dk"},
                    {&dv, "dv"}},
                   lse);
    executor_.backward(in(q), in(k), in(v), in(o), in_floats(lse), in(dout), out(dq), out(dk),
                       out(dv), scale);
  }

 private:
  // The tensors in the plan's storage dtype, lse in fp32.
  void expect_storage(std::initializer_list<std::pair<const Tensor*, const char*>> tensors,
                      const Tensor& lse) const {
    const nb::dlpack::dtype storage = storage_dtype(header().dtype);
    for (const auto& [tensor, name] : tensors) expect_dtype(*tensor, storage, name);
    expect_dtype(lse, nb::dtype<float>(), "lse");
  }

  TransportCommunicator communicator_;
  std::unique_ptr<kernels::AttentionKernels> kernels_;
  runtime::Executor executor_;
  PlanHandle plan_;
};

nb::dict profile_dict(const runtime::PassProfile& p) {
  nb::dict d;
  d["seconds"] = p.seconds;
  d["kernel_seconds"] = p.kernel_seconds;
  d["wait_seconds"] = p.wait_seconds;
  d["copy_seconds"] = p.copy_seconds;
  d["bytes_sent"] = p.bytes_sent;
  d["bytes_received"] = p.bytes_received;
  nb::list stages;
  for (const double s : p.stage_seconds) stages.append(s);
  d["stage_seconds"] = stages;
  return d;
}

}  // namespace

void bind_executor(nb::module_& m) {
  nb::class_<TorchExecutor>(m, "Executor")
      .def(nb::init<nb::object, std::int32_t, std::int32_t, std::int32_t>(), nb::arg("transport"),
           nb::arg("rank"), nb::arg("size"), nb::arg("threads"))
      .def("prepare", &TorchExecutor::prepare, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "arena_bytes",
          [](TorchExecutor& e, int pass) {
            return e.executor().arena_bytes(pass == 0 ? Pass::kForward : Pass::kBackward);
          },
          nb::arg("pass_index"))
      .def(
          "use_arena",
          [](TorchExecutor& e, int pass, Tensor& memory) {
            e.executor().use_arena(pass == 0 ? Pass::kForward : Pass::kBackward, out(memory));
          },
          nb::arg("pass_index"), nb::arg("memory").noconvert())
      .def_prop_ro("local_tokens", [](TorchExecutor& e) { return e.executor().layout().tokens(); })
      .def("forward", &TorchExecutor::forward, nb::arg("q").noconvert(), nb::arg("k").noconvert(),
           nb::arg("v").noconvert(), nb::arg("o").noconvert(), nb::arg("lse").noconvert(),
           nb::arg("softmax_scale"), nb::call_guard<nb::gil_scoped_release>())
      .def("backward", &TorchExecutor::backward, nb::arg("q").noconvert(), nb::arg("k").noconvert(),
           nb::arg("v").noconvert(), nb::arg("o").noconvert(), nb::arg("lse").noconvert(),
           nb::arg("dout").noconvert(), nb::arg("dq").noconvert(), nb::arg("dk").noconvert(),
           nb::arg("dv").noconvert(), nb::arg("softmax_scale"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("profile", [](TorchExecutor& e, int pass) {
        return profile_dict(e.executor().profile(pass == 0 ? Pass::kForward : Pass::kBackward));
      });
  // The C++ executor on its own: the plan run on local ranks (threads of this process, the local
  // communicator) with random inputs; what benchmarks compare the torch path with.
  m.def(
      "run_locally",
      [](const PlanHandle& handle, std::uint64_t seed, std::int32_t kernel_threads) {
        const Plan& plan = handle.plan();
        runtime::RunResult result;
        {
          nb::gil_scoped_release release;
          const SequenceBatch batch(runtime::plan_sequence_lengths(plan));
          runtime::BatchShape shape;
          shape.tokens = batch.total_tokens();
          shape.q_heads = plan.header.q_heads;
          shape.kv_heads = plan.header.kv_heads;
          shape.head_dim = plan.header.head_dim;
          shape.storage = runtime::element_type(plan.header.dtype);
          runtime::RunOptions options;
          options.kernel_threads = kernel_threads;
          result = runtime::run_plan_locally(plan, batch.offsets(),
                                             runtime::random_inputs(shape, seed), options);
        }
        nb::dict d;
        d["forward_seconds"] = result.forward_seconds;
        d["backward_seconds"] = result.backward_seconds;
        nb::list forward, backward;
        for (const auto& p : result.forward) forward.append(profile_dict(p));
        for (const auto& p : result.backward) backward.append(profile_dict(p));
        d["forward"] = forward;
        d["backward"] = backward;
        return d;
      },
      nb::arg("plan"), nb::arg("seed"), nb::arg("kernel_threads"));
}

}  // namespace dcp::python
