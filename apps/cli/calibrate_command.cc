// SPDX-License-Identifier: Apache-2.0
// `dcp calibrate`: measures the cost model's constants, on local ranks of this machine (the
// `cpu-local` cluster) or between the ranks of an MPI job (`--comm mpi`), and prints (or writes)
// the cluster file.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "dcp/core/npy.h"
#include "dcp/core/parse.h"

#include "dcp/model/cluster.h"
#include "dcp/model/cluster_file.h"

#include "dcp/calibration/calibration.h"
#include "dcp/calibration/cluster_calibration.h"
#include "dcp/comm/comm_kind.h"

#include "apps/cli/args.h"
#include "apps/cli/command_table.h"

#if defined(DCP_WITH_MPI)
#include "dcp/comm/mpi/mpi_communicator.h"
#endif

namespace dcp::cli {
namespace {

constexpr FlagSpec kFlags[] = {
    {"--comm", "NAME",
     "local (ranks are threads of this process: the cpu-local cluster) | mpi (ranks are the "
     "processes mpirun started, rank r being device r) [local]"},
    {"--nodes", "N", "mpi: nodes of the job [from OMPI_COMM_WORLD_LOCAL_SIZE]"},
    {"--devices-per-node", "N", "mpi: ranks per node [OMPI_COMM_WORLD_LOCAL_SIZE]"},
    {"--devices", "N", "local: ranks (threads) measured at the same time, one per core [2]"},
    {"--repeats", "R",
     "repeats of each timing; kernels keep the median, mpi links the fastest [5]"},
    {"--timing-seconds", "S", "each timing loops at least S seconds per repeat [0.05]"},
    {"--tile-tokens", "T", "q tokens of the big tiles; full tiles have 2T keys [512]"},
    {"--copy-bytes", "B", "bytes each rank copies for the memory bandwidth [67108864]"},
    {"--message-bytes", "B",
     "local: bytes each rank sends (and receives) for the link bandwidth [16777216]"},
    {"--min-bytes", "B", "mpi: smallest message of the size sweep [4096]"},
    {"--max-bytes", "B", "mpi: largest message of the size sweep (x4 steps) [67108864]"},
    {"--group-peers", "K", "mpi: groups of 1..K peers for the launch set-up [8]"},
    {"--name", "NAME", "mpi: the cluster's name in the file [calibrated]"},
    {"--timeout", "SECONDS", "mpi: a rank waiting longer than this for a peer fails [60]"},
    {"--out", "FILE", "also write the cluster file (dcp plan --cluster FILE reads it)", "-o"},
    {"--help", "", "show this help"},
};

void print_report(std::ostream& out, const calibration::CalibrationReport& report,
                  const std::optional<std::string>& path) {
  char line[256];
  std::snprintf(line, sizeof line, "%-52s %12s  %-24s %12s\n", "measurement", "seconds", "constant",
                "value");
  out << line;
  for (const calibration::CalibrationMeasurement& m : report.measurements) {
    std::snprintf(line, sizeof line, "%-52s %12.4e  %-24s %12.4g %s\n", m.name.c_str(), m.seconds,
                  m.derives.c_str(), m.value, m.unit.c_str());
    out << line;
  }
  for (const std::string& note : report.notes) out << "note: " << note << "\n";
  out << "\n# cluster file";
  if (path) out << " (written to " << *path << ")";
  out << "\n" << to_cluster_text(report.spec);
}

// Empty if `path` can be written (a file in an existing directory), else the error.
std::string out_problem(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (path.empty() || std::filesystem::is_directory(path) ||
      (!parent.empty() && !std::filesystem::is_directory(parent))) {
    return "--out " + dcp::quoted(path) + ": not a file in an existing directory";
  }
  return "";
}

std::int32_t environment_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return -1;
  try {
    return static_cast<std::int32_t>(parse_int(text, name));
  } catch (const InvalidInput&) {
    return -1;
  }
}

int run_local(const Args& args, std::ostream& out, const std::optional<std::string>& path) {
  for (const char* flag : {"--nodes", "--devices-per-node", "--min-bytes", "--max-bytes",
                           "--group-peers", "--name", "--timeout"}) {
    if (args.has(flag)) throw UsageError(std::string(flag) + ": applies with --comm mpi only");
  }
  calibration::CalibrationOptions options;
  options.devices = static_cast<std::int32_t>(args.get_int("--devices", options.devices, 1, 256));
  options.repeats = static_cast<std::int32_t>(args.get_int("--repeats", options.repeats, 1, 1000));
  options.min_seconds = args.get_double("--timing-seconds", options.min_seconds);
  options.tile_tokens =
      static_cast<std::int32_t>(args.get_int("--tile-tokens", options.tile_tokens, 64, 16384));
  options.copy_bytes = args.get_int("--copy-bytes", options.copy_bytes, std::int64_t{4} << 10,
                                    std::int64_t{4} << 30);
  options.message_bytes = args.get_int("--message-bytes", options.message_bytes,
                                       std::int64_t{4} << 10, std::int64_t{4} << 30);
  if (!(options.min_seconds >= 1e-4 && options.min_seconds <= 10)) {
    throw UsageError("--timing-seconds " + std::to_string(options.min_seconds) +
                     ": must be in [0.0001, 10]");
  }
  // Fail before minutes of measuring, not after.
  if (path) {
    if (const std::string problem = out_problem(*path); !problem.empty()) throw UsageError(problem);
  }
  options.progress = [](std::string_view line) { std::cerr << "dcp calibrate: " << line << "\n"; };

  const calibration::CalibrationReport report = calibration::calibrate_cpu_local(options);
  if (path) {
    with_flag("--out " + dcp::quoted(*path),
              [&] { write_file_atomically(*path, to_cluster_text(report.spec)); });
  }
  print_report(out, report, path);
  return 0;
}

calibration::ClusterCalibrationOptions cluster_options(const Args& args) {
  if (args.has("--devices") || args.has("--message-bytes")) {
    throw UsageError(std::string(args.has("--devices") ? "--devices" : "--message-bytes") +
                     ": applies with --comm local only (with mpi, the ranks are the devices)");
  }
  calibration::ClusterCalibrationOptions options;
  options.name = args.get_or("--name", options.name);
  if (options.name.empty() || options.name.find_first_of("#\n") != std::string::npos) {
    throw UsageError("--name " + dcp::quoted(options.name) +
                     ": must be non-empty, without '#' or newlines");
  }
  calibration::DeviceCalibrationOptions& device = options.device;
  calibration::LinkCalibrationOptions& links = options.links;
  device.repeats = static_cast<std::int32_t>(args.get_int("--repeats", device.repeats, 1, 1000));
  links.repeats = device.repeats;
  device.min_seconds = args.get_double("--timing-seconds", device.min_seconds);
  if (!(device.min_seconds >= 1e-4 && device.min_seconds <= 10)) {
    throw UsageError("--timing-seconds " + std::to_string(device.min_seconds) +
                     ": must be in [0.0001, 10]");
  }
  links.min_seconds = device.min_seconds;
  device.tile_tokens =
      static_cast<std::int32_t>(args.get_int("--tile-tokens", device.tile_tokens, 64, 16384));
  device.copy_bytes =
      args.get_int("--copy-bytes", device.copy_bytes, std::int64_t{4} << 10, std::int64_t{4} << 30);
  links.min_bytes = args.get_int("--min-bytes", links.min_bytes, 16, std::int64_t{4} << 30);
  links.max_bytes = args.get_int("--max-bytes", links.max_bytes, 16, std::int64_t{4} << 30);
  if (links.max_bytes < links.min_bytes) {
    throw UsageError("--max-bytes " + std::to_string(links.max_bytes) + ": below --min-bytes " +
                     std::to_string(links.min_bytes));
  }
  links.max_group_peers =
      static_cast<std::int32_t>(args.get_int("--group-peers", links.max_group_peers, 1, 1024));
  return options;
}

#if defined(DCP_WITH_MPI)
// The job's shape: --nodes and --devices-per-node (one of them: the other from the world size),
// else Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE on every rank. Every rank computes the same shape,
// or throws the same error.
ClusterShape job_shape(const Args& args, comm::Communicator& communicator) {
  const std::int32_t world = communicator.size();
  // 0: not given.
  const std::int64_t nodes = args.get_int("--nodes", 0, 1, 65536);
  const std::int64_t per_node = args.get_int("--devices-per-node", 0, 1, 65536);
  if (nodes == 0 && per_node == 0) {
    const std::vector<calibration::LauncherPlacement> placements = calibration::exchange_placements(
        communicator, {environment_int("OMPI_COMM_WORLD_LOCAL_SIZE"),
                       environment_int("OMPI_COMM_WORLD_LOCAL_RANK")});
    return with_flag("--devices-per-node", [&] {
      return calibration::shape_from_placements(placements, "OMPI_COMM_WORLD_LOCAL_SIZE");
    });
  }
  std::string flags;
  if (nodes > 0) flags = "--nodes " + std::to_string(nodes);
  if (nodes > 0 && per_node > 0) flags += " ";
  if (per_node > 0) flags += "--devices-per-node " + std::to_string(per_node);
  const std::int64_t given = nodes > 0 ? nodes : per_node;
  if ((nodes == 0 || per_node == 0) && world % given != 0) {
    throw UsageError(flags + ": the world size " + std::to_string(world) +
                     " is not a multiple of " + std::to_string(given));
  }
  const ClusterShape shape{static_cast<std::int32_t>(nodes > 0 ? nodes : world / given),
                           static_cast<std::int32_t>(per_node > 0 ? per_node : world / given)};
  with_flag(flags, [&] { calibration::check_calibration_world(shape, world); });
  return shape;
}
#endif

int run_mpi(const Args& args, std::ostream& out, const std::optional<std::string>& path) {
  calibration::ClusterCalibrationOptions options = cluster_options(args);
  comm::CommOptions comm_options;
  comm_options.timeout_seconds = args.get_double("--timeout", 60.0);
  if (!(comm_options.timeout_seconds > 0) || !std::isfinite(comm_options.timeout_seconds)) {
    throw UsageError("--timeout " + std::to_string(comm_options.timeout_seconds) +
                     ": must be a positive number of seconds");
  }
#if defined(DCP_WITH_MPI)
  comm::MpiSession session;
  comm::MpiCommunicator communicator(session, comm_options);
  const bool root = communicator.rank() == 0;
  // Before measuring, every rank agrees on the shape and on whether rank 0 can write --out, so
  // that a bad flag ends every rank alike with exit status 2.
  const ClusterShape shape = job_shape(args, communicator);
  const std::string problem = root && path ? out_problem(*path) : "";
  calibration::CommunicatorSync sync(communicator);
  if (sync.max_over_ranks(problem.empty() ? 0.0 : 1.0) > 0) {
    throw UsageError(root ? problem
                          : "--out " + dcp::quoted(path.value_or("")) +
                                ": rank 0 cannot write it (not a file in an existing directory)");
  }
  if (root) {
    options.progress = [](std::string_view line) {
      std::cerr << "dcp calibrate: " << line << "\n";
    };
  }
  try {
    const calibration::CalibrationReport report =
        calibration::calibrate_cluster(communicator, shape, options);
    if (root) {
      if (path) write_file_atomically(*path, to_cluster_text(report.spec));
      print_report(out, report, path);
    }
  } catch (const std::exception& error) {
    // Every rank of the job must stop, not only this one: abort tells mpirun to end them all.
    communicator.abort(error.what());
  }
  return 0;
#else
  (void)out;
  (void)path;
  (void)options;
  throw UsageError("--comm mpi: this dcp was built without MPI");
#endif
}

}  // namespace

int run_calibrate(std::span<const std::string> argv, std::ostream& out) {
  const Args args(kFlags, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp calibrate [flags]\n       mpirun -n N dcp calibrate --comm mpi [flags]",
        "Measures the simulator's cost-model constants. With --comm local (the default), for the "
        "cpu kernels and local ranks on this machine: kernel launch and sub-tile overheads, "
        "forward and backward rates, the softmax share, the cost of masked sub-tiles, fp32 over "
        "bf16, memory bandwidth and the local communicator's latency and bandwidth; every timing "
        "runs on --devices threads at once. With --comm mpi, between the ranks of the job: "
        "latency, bandwidth and efficiency by message size inside a node and between nodes, the "
        "launch set-up of a group of transfers by its peers, the network interfaces per node, "
        "and each rank's cpu kernels and memory (docs/cost_model.md). Prints a table of the "
        "measurements and the resulting cluster file (rank 0); progress goes to stderr. Build "
        "with the release preset for meaningful numbers.",
        kFlags);
    return 0;
  }
  const std::optional<std::string> path = args.get("--out");
  comm::CommKind kind = comm::CommKind::kLocal;
  if (const auto name = args.get("--comm")) {
    kind = with_flag("--comm", [&] { return comm::parse_comm_kind(*name); });
  }
  if (kind == comm::CommKind::kMpi) {
    if (!comm::mpi_available()) {
      throw UsageError(
          "--comm mpi: this dcp was built without MPI (install libopenmpi-dev and "
          "reconfigure with -DDCP_WITH_MPI=ON)");
    }
    return run_mpi(args, out, path);
  }
  return run_local(args, out, path);
}

}  // namespace dcp::cli
