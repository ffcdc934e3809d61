// SPDX-License-Identifier: Apache-2.0
// The executor for dcp.torch: the C++ Executor (the one interpreter of Programs) with either the
// CPU kernels on host memory or a Python device (the Triton kernels of python/dcp/torch/
// _device.py, on CUDA or under Triton's interpreter), moving bytes through a Python transport over
// torch.distributed (python/dcp/torch/transport.py). The executor runs with the GIL released; it
// takes the GIL for one Python call per Launch, Wait and, with a Python device, per device call.
#include "dcp/runtime/executor.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dcp/core/error.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/sequence_batch.h"

#include "dcp/comm/communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/program/program.h"
#include "dcp/program/program_stats.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/runtime/local_layout.h"

#include "python/src/bindings.h"
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

namespace nb = nanobind;

namespace dcp::python {
namespace {

using Tensor = nb::ndarray<nb::c_contig>;

// A Communicator whose transfers a Python object carries out: start(ops) -> group id, where ops
// is a list of (is_send, peer, buffer, byte offset, bytes) with the buffer and offset as the
// lowering placed the value (buffer: a LOWERING_SCHEMA["buffers"] value, the running pass's arena
// or kept tensor), and wait(group), barrier(), abort(reason). Zero-byte transfers are never handed
// over.
class TransportCommunicator final : public comm::Communicator {
 public:
  TransportCommunicator(nb::object transport, std::int32_t rank, std::int32_t size)
      : transport_(std::move(transport)), rank_(rank), size_(size) {}

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
      list.append(nb::make_tuple(op.kind == comm::TransferOp::Kind::kSend, op.peer, op.buffer,
                                 op.offset, op.bytes));
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
  nb::object transport_;
  std::int32_t rank_;
  std::int32_t size_;
};

template <typename T>
nb::ndarray<nb::numpy, T> numpy_copy(const std::vector<T>& values, std::size_t columns) {
  auto* copy = new std::vector<T>(values);
  nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const std::size_t rows = columns == 0 ? copy->size() : copy->size() / columns;
  if (columns == 0) {
    return nb::ndarray<nb::numpy, T>(copy->data(), {rows}, owner);
  }
  return nb::ndarray<nb::numpy, T>(copy->data(), {rows, columns}, owner);
}

// A pass's tables by name: those of runtime::kLoweredTables ([rows, columns] each), then the
// attention tables' members and masks (1-D).
nb::dict tables_dict(const runtime::LoweredPass& pass) {
  const runtime::AttentionTables& t = pass.tables;
  nb::dict d;
  for (const runtime::LoweredTableSchema& table : runtime::kLoweredTables) {
    d[nb::str(table.name.data(), table.name.size())] =
        numpy_copy(runtime::lowered_rows(pass, table.table), table.columns.size());
  }
  d["members"] = numpy_copy(t.members, 0);
  d["mask_rows"] = numpy_copy(t.mask_rows, 0);
  d["mask_intervals"] = numpy_copy(t.mask_intervals, 0);
  return d;
}

// The lowering's schema (runtime/lowering_schema.h) for Python: every table's columns by name
// (their count is the row width), the slot kinds, the buffers a value lies in, the memory run
// kinds and the slot alignment, each name to its value.
nb::dict lowering_schema() {
  const auto name = [](std::string_view s) { return nb::str(s.data(), s.size()); };
  const auto numbered = [&](const auto& names) {
    nb::dict d;
    for (std::size_t i = 0; i < names.size(); ++i) d[name(names[i])] = i;
    return d;
  };
  nb::dict tables;
  for (const runtime::LoweredTableSchema& table : runtime::kLoweredTables) {
    tables[name(table.name)] = numbered(table.columns);
  }
  nb::dict slot_kinds;
  for (int kind = 0; kind < kSlotKindCount; ++kind) {
    slot_kinds[name(to_string(static_cast<SlotKind>(kind)))] = kind;
  }
  nb::dict d;
  d["tables"] = tables;
  d["slot_kinds"] = slot_kinds;
  d["buffers"] = numbered(runtime::kBufferKindNames);
  d["memory_runs"] = numbered(runtime::kMemoryRunKindNames);
  d["slot_alignment"] = runtime::kSlotAlignment;
  return d;
}

// A Device whose calls a Python object makes (python/dcp/torch/_device.py), one per run as the
// lowering groups them: prepare(forward tables, backward tables: tables_dict's), begin(pass,
// scale), copy_run(store, slot kind, row begin, row end, max tokens), memory_run(memory run kind,
// row begin, row end, max count), convert_partials(narrow, row begin, row end, max values),
// attention(q group begin, end, kv group begin, end, max q tokens, max kv tokens), end(); kinds
// are LOWERING_SCHEMA's values. The Python object holds the tensors (the kept tensor among them:
// entries whose kv_buffer is "kept" read their kv value there).
class PythonDevice final : public runtime::Device {
 public:
  explicit PythonDevice(nb::object device) : device_(std::move(device)) {}

  std::string_view name() const override { return "python"; }

  void prepare(const PlanHeader&, const runtime::LocalLayout&, const runtime::LoweredPass& forward,
               const runtime::LoweredPass& backward) override {
    call("prepare", [&] { return std::make_tuple(tables_dict(forward), tables_dict(backward)); });
  }
  void begin(Pass pass, std::span<std::byte>, const runtime::PassTensors&,
             float softmax_scale) override {
    call("begin", [&] { return std::make_tuple(pass == Pass::kForward ? 0 : 1, softmax_scale); });
  }
  void copy_run(const runtime::CopyRun& run, std::span<const std::int64_t>) override {
    call("copy_run", [&] {
      return std::make_tuple(run.store, static_cast<int>(run.kind), run.row_begin, run.row_end,
                             run.max_tokens);
    });
  }
  void memory_run(const runtime::MemoryRun& run, std::span<const runtime::LoweredCall>) override {
    call("memory_run", [&] {
      return std::make_tuple(static_cast<int>(run.kind), run.row_begin, run.row_end, run.max_count);
    });
  }
  void attention(const runtime::AttentionCall& c) override {
    call("attention", [&] {
      return std::make_tuple(c.q_group_begin, c.q_group_end, c.kv_group_begin, c.kv_group_end,
                             c.max_q_tokens, c.max_kv_tokens);
    });
  }
  void convert_partials(std::span<const runtime::WireCall> calls, std::int32_t first_row) override {
    std::int64_t most = 0;  // items of the largest row: its elements, its tail's 2-byte halves
    for (const runtime::WireCall& c : calls) most = std::max(most, c.elements + c.tail_bytes / 2);
    call("convert_partials", [&] {
      return std::make_tuple(calls.front().narrow, first_row,
                             first_row + static_cast<std::int32_t>(calls.size()), most);
    });
  }
  void end() override {
    try {
      call("end", [] { return std::make_tuple(); });
    } catch (...) {  // end runs while a pass unwinds too; its own failure must not mask that
    }
  }

 private:
  // Calls device.<name>(*args()) with the GIL; a Python exception becomes an Error, which the
  // executor reports with the instruction that failed.
  template <typename Args>
  void call(const char* name, Args&& args) {
    nb::gil_scoped_acquire gil;
    try {
      std::apply([&](auto&&... a) { device_.attr(name)(a...); }, args());
    } catch (nb::python_error& error) {
      throw Error(std::string("the device's ") + name + " failed: " + error.what());
    }
  }

  nb::object device_;
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

// What the executors of a model plan's kinds share: the transport and the cpu kernels' threads.
// The kinds' passes run one at a time, so one transport and one kernel set serve them all.
struct SharedRuntime {
  SharedRuntime(nb::object transport, std::int32_t rank, std::int32_t size, std::int32_t threads)
      : communicator(std::move(transport), rank, size),
        kernels(kernels::make_kernels(kernels::KernelKind::kCpu, threads)) {}
  TransportCommunicator communicator;
  std::unique_ptr<kernels::AttentionKernels> kernels;
};

class TorchExecutor {
 public:
  // device None: the CPU kernels on host memory, `threads` of them; else a Python device.
  TorchExecutor(nb::object transport, std::int32_t rank, std::int32_t size, std::int32_t threads,
                nb::object device)
      : TorchExecutor(std::make_shared<SharedRuntime>(std::move(transport), rank, size, threads),
                      std::move(device)) {}
  TorchExecutor(std::shared_ptr<SharedRuntime> shared, nb::object device)
      : shared_(std::move(shared)),
        device_(device.is_none() ? runtime::make_host_device(*shared_->kernels)
                                 : std::make_unique<PythonDevice>(std::move(device))),
        on_host_(dynamic_cast<PythonDevice*>(device_.get()) == nullptr),
        executor_(shared_->communicator, *device_) {}

  // An executor for another kind of the same model plan: this one's transport and kernel threads,
  // with `device` (None: the host device).
  std::unique_ptr<TorchExecutor> sibling(nb::object device) const {
    return std::make_unique<TorchExecutor>(shared_, std::move(device));
  }

  // The Programs of the handle's kind number `kind` (0: its first, for a handle of one kind its
  // only one).
  void prepare(const PlanHandle& plan, std::size_t kind) {
    const std::size_t held = plan.kind ? 1 : plan.model().kinds.size();
    if (kind >= held) {
      throw InvalidInput("kind " + std::to_string(kind) + " is not a kind of the plan (it has " +
                         std::to_string(held) + ")");
    }
    plan_ = plan;  // keeps the plan alive while its Programs run
    executor_.prepare(plan.model().kinds[plan.kind.value_or(kind)].plan);
  }
  runtime::Executor& executor() { return executor_; }
  const PlanHeader& header() const { return executor_.header(); }

  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, Tensor& lse,
               Tensor& kept, double scale) {
    expect_storage({{&q, "q"}, {&k, "k"}, {&v, "v"}, {&o, "o"}}, lse);
    expect_kept(kept);
    executor_.forward(in(q), in(k), in(v), out(o), out_floats(lse), scale, out(kept));
  }

  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv,
                const Tensor& kept, double scale) {
    expect_storage({{&q, "q"},
                    {&k, "k"},
                    {&v, "v"},
                    {&o, "o"},
                    {&dout, "do"},
                    {&dq, "dq"},
                    {&dk, "dk"},
                    {&dv, "dv"}},
                   lse);
    expect_kept(kept);
    executor_.backward(in(q), in(k), in(v), in(o), in_floats(lse), in(dout), out(dq), out(dk),
                       out(dv), scale, in(kept));
  }

 private:
  // The kept tensor: uint8 bytes where the other tensors live.
  void expect_kept(const Tensor& kept) const {
    expect_dtype(kept, nb::dtype<std::uint8_t>(), "kept");
    expect_device(kept, "kept");
  }
  // The tensors in the plan's storage dtype, lse in fp32.
  void expect_storage(std::initializer_list<std::pair<const Tensor*, const char*>> tensors,
                      const Tensor& lse) const {
    const nb::dlpack::dtype storage = storage_dtype(header().dtype);
    for (const auto& [tensor, name] : tensors) {
      expect_dtype(*tensor, storage, name);
      expect_device(*tensor, name);
    }
    expect_dtype(lse, nb::dtype<float>(), "lse");
    expect_device(lse, "lse");
  }
  // The host device reads and writes the tensors: they must be in host memory.
  void expect_device(const Tensor& tensor, const char* name) const {
    if (on_host_ && tensor.device_type() != nb::device::cpu::value) {
      throw InvalidInput(std::string("tensor ") + name +
                         " is not in host memory; the cpu kernels run on the CPU");
    }
  }

  std::shared_ptr<SharedRuntime> shared_;
  std::unique_ptr<runtime::Device> device_;
  bool on_host_;
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
  m.attr("LOWERING_SCHEMA") = lowering_schema();
  nb::class_<TorchExecutor>(m, "Executor")
      .def(nb::init<nb::object, std::int32_t, std::int32_t, std::int32_t, nb::object>(),
           nb::arg("transport"), nb::arg("rank"), nb::arg("size"), nb::arg("threads"),
           nb::arg("device").none())
      .def("sibling", &TorchExecutor::sibling, nb::arg("device").none(),
           "An executor for another kind of a model plan, sharing this one's transport and "
           "kernel threads, with its own device (None: the host device)")
      .def("prepare", &TorchExecutor::prepare, nb::arg("plan"), nb::arg("kind") = 0,
           nb::call_guard<nb::gil_scoped_release>())
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
      .def_prop_ro("kept_bytes", [](TorchExecutor& e) { return e.executor().kept_bytes(); })
      .def("forward", &TorchExecutor::forward, nb::arg("q").noconvert(), nb::arg("k").noconvert(),
           nb::arg("v").noconvert(), nb::arg("o").noconvert(), nb::arg("lse").noconvert(),
           nb::arg("kept").noconvert(), nb::arg("softmax_scale"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("backward", &TorchExecutor::backward, nb::arg("q").noconvert(), nb::arg("k").noconvert(),
           nb::arg("v").noconvert(), nb::arg("o").noconvert(), nb::arg("lse").noconvert(),
           nb::arg("dout").noconvert(), nb::arg("dq").noconvert(), nb::arg("dk").noconvert(),
           nb::arg("dv").noconvert(), nb::arg("kept").noconvert(), nb::arg("softmax_scale"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("profile", [](TorchExecutor& e, int pass) {
        return profile_dict(e.executor().profile(pass == 0 ? Pass::kForward : Pass::kBackward));
      });
  // The C++ executor on its own: the plan (of one attention kind) run on local ranks (threads of
  // this process, the local communicator) with random inputs; what benchmarks compare the torch
  // path with.
  m.def(
      "run_locally",
      [](const PlanHandle& handle, std::uint64_t seed, std::int32_t kernel_threads) {
        if (!handle.kind && handle.model().kinds.size() > 1) {
          throw InvalidInput("run_locally runs one attention kind; the plan has " +
                             std::to_string(handle.model().kinds.size()) +
                             ": pass plan.kind(name)");
        }
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
