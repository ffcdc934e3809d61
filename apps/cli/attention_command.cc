// SPDX-License-Identifier: Apache-2.0
// `dcp attention`: distributed attention forward and backward on a user's .npy arrays, under one
// mask or under each attention kind's.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/npy.h"
#include "dcp/core/parse.h"

#include "dcp/model/attention_kind.h"
#include "dcp/model/attention_shape.h"
#include "dcp/model/workload.h"

#include "dcp/comm/communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/model_plan.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/selection/model_plan_search.h"
#include "dcp/workload_builder.h"

#include "apps/cli/command_table.h"
#include "apps/cli/execution.h"
#include "apps/cli/plan_flags.h"
#include "apps/cli/workload_flags.h"

namespace dcp::cli {
namespace {

std::vector<FlagSpec> attention_specs() {
  std::vector<FlagSpec> specs = {
      {"--q", "FILE", "float32 .npy (total tokens, q heads, head dim)"},
      {"--k", "FILE", "float32 .npy (total tokens, kv heads, head dim)"},
      {"--v", "FILE", "float32 .npy (total tokens, kv heads, head dim)"},
      {"--do", "FILE", "float32 .npy (total tokens, q heads, head dim): the gradient of o"},
      {"--out-dir", "DIR",
       "where o.npy, lse.npy, dq.npy, dk.npy, dv.npy go (created if it does not exist)"},
      {"--check", "", "also compare with dense fp64 attention and print the errors"},
      {"--dtype", "T", "storage dtype the inputs are rounded to: fp32, bf16, fp16 [fp32]"},
  };
  for (const FlagSpec& flag : workload_flags()) {
    for (const char* name : {"--seqlens", "--seqlens-file", "--softmax-scale", "--block-size",
                             "--head-block-size", "--mask", "--layers", "--mask-file"}) {
      if (flag.name == name) specs.push_back(flag);
    }
  }
  specs.insert(specs.end(), plan_flags().begin(), plan_flags().end());
  specs.insert(specs.end(), execution_flags().begin(), execution_flags().end());
  specs.push_back({"--seed", "S", "planner seed [0]"});
  specs.push_back({"--help", "", "show this help"});
  return specs;
}

NpyArray read_array(const Args& args, const char* flag) {
  const auto path = args.get(flag);
  if (!path) throw UsageError(std::string(flag) + " is required");
  return with_flag(std::string(flag) + " " + dcp::quoted(*path), [&] {
    NpyArray array = read_npy(*path);
    expect_npy(array, "<f4", 3, std::string(flag) + " " + *path);
    return array;
  });
}

std::string dims(const NpyArray& array) {
  std::string text = "(";
  for (std::size_t i = 0; i < array.shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(array.shape[i]);
  }
  return text + ")";
}

// Rounds float32 array data to the storage type.
std::vector<std::byte> to_storage(const NpyArray& array, kernels::ElementType type) {
  const auto n = static_cast<std::size_t>(array.element_count());
  std::vector<float> values(n);
  std::memcpy(values.data(), array.data.data(), n * sizeof(float));
  std::vector<std::byte> bytes(n * kernels::element_size(type));
  kernels::from_float(type, values.data(), bytes.data(), n);
  return bytes;
}

std::vector<float> to_float32(kernels::ElementType type, const std::vector<std::byte>& data) {
  const std::size_t n = data.size() / kernels::element_size(type);
  std::vector<float> values(n);
  kernels::to_float(type, data.data(), values.data(), n);
  return values;
}

// One array to write, at `path` relative to --out-dir.
struct OutputFile {
  std::filesystem::path path;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// The five arrays of one run: o, lse, dq, dk, dv in `folder` (relative to --out-dir).
void add_outputs(std::vector<OutputFile>& files, const std::filesystem::path& folder,
                 const runtime::BatchShape& shape, const runtime::BatchOutputs& outputs) {
  const auto t = static_cast<std::int64_t>(shape.tokens);
  const std::int64_t hq = shape.q_heads, hk = shape.kv_heads, d = shape.head_dim;
  files.push_back({folder / "o.npy", {t, hq, d}, to_float32(shape.storage, outputs.o)});
  files.push_back({folder / "lse.npy", {hq, t}, outputs.lse});
  files.push_back({folder / "dq.npy", {t, hq, d}, to_float32(shape.storage, outputs.dq)});
  files.push_back({folder / "dk.npy", {t, hk, d}, to_float32(shape.storage, outputs.dk)});
  files.push_back({folder / "dv.npy", {t, hk, d}, to_float32(shape.storage, outputs.dv)});
}

// Writes every file under a temporary name first and renames them only when all are complete, so
// a failure leaves none of them behind, nor any directory this call created (--out-dir, its
// missing parents, a kind's folder).
void write_outputs(const std::string& out_dir, const std::vector<OutputFile>& files) {
  const std::filesystem::path dir(out_dir);
  // The outermost directory this call creates for --out-dir, and the folders it creates in it.
  std::filesystem::path created;
  for (std::filesystem::path p = std::filesystem::absolute(dir); !p.empty(); p = p.parent_path()) {
    if (std::filesystem::exists(p)) break;
    created = p;
    if (p == p.parent_path()) break;
  }
  std::vector<std::filesystem::path> created_folders;
  std::vector<std::filesystem::path> written;
  try {
    std::error_code create_error;
    std::filesystem::create_directories(dir, create_error);
    if (create_error || !std::filesystem::is_directory(dir)) {
      throw IoError("--out-dir " + dcp::quoted(out_dir) + ": cannot create the directory" +
                    (create_error ? " (" + create_error.message() + ")" : std::string()));
    }
    for (const OutputFile& file : files) {
      const std::filesystem::path folder = dir / file.path.parent_path();
      if (std::filesystem::is_directory(folder)) continue;
      if (!std::filesystem::create_directory(folder, create_error)) {
        throw IoError("--out-dir " + dcp::quoted(out_dir) + ": cannot create " +
                      dcp::quoted(folder.string()) +
                      (create_error ? " (" + create_error.message() + ")" : std::string()));
      }
      created_folders.push_back(folder);
    }
    for (const OutputFile& file : files) {
      const std::filesystem::path partial =
          dir / file.path.parent_path() / ("." + file.path.filename().string() + ".partial");
      write_npy(partial.string(), "<f4", file.shape, file.values.data(),
                file.values.size() * sizeof(float));
      written.push_back(partial);
    }
    for (std::size_t i = 0; i < files.size(); ++i) {
      std::filesystem::rename(written[i], dir / files[i].path);
    }
  } catch (...) {
    std::error_code ignored;
    for (const auto& path : written) std::filesystem::remove(path, ignored);
    for (const auto& folder : created_folders) std::filesystem::remove(folder, ignored);
    if (!created.empty()) std::filesystem::remove_all(created, ignored);
    throw;
  }
}

}  // namespace

int run_attention(std::span<const std::string> argv, std::ostream& out) {
  const std::vector<FlagSpec> specs = attention_specs();
  const Args args(specs, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp attention --q F --k F --v F --do F (--seqlens L,... | --seqlens-file F) "
        "--out-dir DIR [flags]",
        "Plans the packed batch, runs attention forward and backward distributed over nodes x "
        "devices ranks, and writes o.npy (tokens, q heads, head dim), lse.npy (q heads, tokens; "
        "natural log of the softmax normaliser of the scaled scores; -inf for a row that "
        "attends to nothing), dq.npy, dk.npy and dv.npy, all float32. With several attention "
        "kinds (--mask KIND=SPEC), every kind's Programs run on the same arrays and each kind's "
        "five files go to DIR/KIND/. The files appear together or not at all.",
        specs);
    return 0;
  }
  const auto out_dir = args.get("--out-dir");
  if (!out_dir) throw UsageError("--out-dir is required");
  if (std::filesystem::exists(*out_dir) && !std::filesystem::is_directory(*out_dir)) {
    throw UsageError("--out-dir " + dcp::quoted(*out_dir) + ": not a directory");
  }
  const NpyArray q = read_array(args, "--q");
  const NpyArray k = read_array(args, "--k");
  const NpyArray v = read_array(args, "--v");
  const NpyArray dout = read_array(args, "--do");
  if (k.shape != v.shape) {
    throw UsageError("--v has shape " + dims(v) + ", --k has " + dims(k) + "; they must match");
  }
  if (dout.shape != q.shape) {
    throw UsageError("--do has shape " + dims(dout) + ", --q has " + dims(q) + "; they must match");
  }
  if (k.shape[0] != q.shape[0] || k.shape[2] != q.shape[2]) {
    throw UsageError("--k has shape " + dims(k) + ", --q has " + dims(q) +
                     "; tokens and head dim must match");
  }
  AttentionShape shape;
  shape.q_heads = static_cast<std::int32_t>(q.shape[1]);
  shape.kv_heads = static_cast<std::int32_t>(k.shape[1]);
  shape.head_dim = static_cast<std::int32_t>(q.shape[2]);
  shape.dtype = DType::kFp32;
  dtype_and_scale_from_flags(args, shape);
  with_flag("--q " + dims(q) + " / --k " + dims(k), [&] { validate(shape); });

  const auto seed = static_cast<std::uint64_t>(args.get_int("--seed", 0, 0));
  const PlanOptions plan_options = plan_options_from_flags(args, seed);
  const ExecutionOptions execution = execution_options_from_flags(args);
  const BuiltKinds kinds = kinds_from_flags(args, shape, plan_options.cluster.shape.devices());
  const Workload& first = kinds.kinds.front().workload;
  if (first.batch().total_tokens() != q.shape[0]) {
    throw UsageError("the sequence lengths sum to " + std::to_string(first.batch().total_tokens()) +
                     " tokens but --q has " + std::to_string(q.shape[0]));
  }
  // Each kind's arrays go to a folder of its name under --out-dir.
  for (const KindWorkload& kind : kinds.kinds) {
    if (kind.name == "." || kind.name == "..") {
      throw UsageError("--mask: attention kind '" + kind.name +
                       "' cannot name a folder under --out-dir");
    }
  }

  runtime::BatchInputs inputs;
  inputs.shape = runtime::batch_shape_of(first);
  inputs.q = to_storage(q, inputs.shape.storage);
  inputs.k = to_storage(k, inputs.shape.storage);
  inputs.v = to_storage(v, inputs.shape.storage);
  inputs.dout = to_storage(dout, inputs.shape.storage);

  std::string report;
  const bool reporter = with_communicator(execution, [&](comm::Communicator* communicator) {
    const BuiltModelPlan built =
        with_flag("--strategy " + std::string(to_string(plan_options.strategy)),
                  [&] { return build_model_plan(kinds.kinds, plan_options); });
    const bool talk = communicator == nullptr || communicator->rank() == 0;
    std::ostringstream text;
    std::vector<OutputFile> files;
    std::vector<std::string> wrote;
    for (std::size_t kind_index = 0; kind_index < built.plan.kinds.size(); ++kind_index) {
      const KindPlan& kind = built.plan.kinds[kind_index];
      const Workload& workload = built.kinds[kind_index].workload;
      const runtime::RunResult result =
          execute_plan(communicator, kind.plan, workload.batch(), inputs, execution.run);
      if (!talk) continue;
      const std::string folder = kinds.single() ? std::string() : kind.name;
      if (args.flag("--check")) {
        const runtime::DenseReference reference = runtime::dense_reference(
            workload, inputs, kind.plan.header.softmax_scale,
            static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency())));
        const runtime::OutputErrors errors =
            runtime::compare_outputs(inputs.shape, result.outputs, reference);
        text << "error vs dense fp64 attention"
             << (folder.empty() ? "" : " of kind '" + folder + "'") << ":\n";
        print_errors(text, errors);
      }
      add_outputs(files, folder, inputs.shape, result.outputs);
      std::ostringstream line;
      line << "wrote      o.npy lse.npy dq.npy dk.npy dv.npy to "
           << (folder.empty() ? *out_dir : (std::filesystem::path(*out_dir) / folder).string())
           << " (" << kind.plan.header.strategy << " on " << kind.plan.header.cluster.devices()
           << " ranks; forward " << result.forward_seconds * 1e3 << " ms, backward "
           << result.backward_seconds * 1e3 << " ms)\n";
      wrote.push_back(line.str());
    }
    if (!talk) return;
    write_outputs(*out_dir, files);
    for (const std::string& line : wrote) text << line;
    report = text.str();
  });
  if (reporter) out << report;
  return 0;
}

}  // namespace dcp::cli
