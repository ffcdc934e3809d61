// SPDX-License-Identifier: Apache-2.0
// Calibration of the cost model's constants for the CPU runtime: the kernel and memory timings of
// one rank (timed on every rank at once) and their fit, and the whole `cpu-local` calibration.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/model/cluster.h"

#include "dcp/calibration/rank_timing.h"

namespace dcp::calibration {

// `value` rounded to 4 significant digits in `unit` (the cluster file's), back in SI units.
double round4(double value, double unit);

// Replaces `spec` by its file form read back until writing and reading it changes nothing more,
// so that to_cluster_text(spec) reads back as the same spec.
void settle_file_form(ClusterSpec& spec);

// One timing and the constant it gives.
struct CalibrationMeasurement {
  std::string name;     // what was timed, e.g. "forward 1024x2048 d128 bf16"
  double seconds = 0;   // one operation: the median over repeats of the mean over ranks
  std::string derives;  // the cluster-file key it sets, e.g. "forward_tflops"
  double value = 0;     // the constant in the cluster file's unit
  std::string unit;     // "us", "TFLOP/s", "GB/s" or "" (a ratio)
};

// --- The device: attention kernels and memory ------------------------------------------------

struct DeviceCalibrationOptions {
  std::int32_t repeats = 5;  // median over repeats, [1, 1000]
  // The big tiles' q tokens (kv: 2x for full tiles), [64, 16384]. 512: the size of the token
  // blocks runs on a few ranks use; a 1024-token tile runs ~15 % faster per pair than they do, and
  // the simulator then under-predicts real runs by 20 % (docs/benchmarks.md).
  std::int32_t tile_tokens = 512;
  std::int64_t copy_bytes = std::int64_t{64} << 20;  // memcpy per rank, [4 KiB, 4 GiB]
  double min_seconds = 0.05;  // each timing loops at least this long per repeat, [1e-4, 10]
  // Heads every attention call but the launch call computes at once, each q head with its own kv
  // head, [1, 256]. A GPU runs them in parallel and needs enough of them to fill its
  // multiprocessors, as the executor's launches do; fit_device takes the work of a call to be its
  // heads x that of one head. The cpu timing (one thread) takes 1 only.
  std::int32_t heads = 1;
};

// One call the device calibration times. Attention: `rows` rows of q_tokens queries, each
// against the same `tiles` kv tiles of kv_tokens keys (full, or causal: row r attends keys
// [0, r + 1), for q_tokens == kv_tokens), `heads` q heads each with its own kv head, random
// inputs in [-1, 1];
// backward: one row and one full tile, dq, dk, dv in fp32, lse and delta from a forward run.
// Memory: a copy of copy_bytes (attention fields unused).
struct DeviceCall {
  enum class Kind : std::uint8_t { kForward, kBackward, kCopy };
  Kind kind = Kind::kForward;
  std::string name;        // "forward 512x1024 d128 bf16"
  std::int32_t heads = 1;  // q heads, each with its own kv head
  std::int32_t rows = 1;
  std::int32_t q_tokens = 1;
  std::int32_t tiles = 1;
  std::int32_t kv_tokens = 1;
  bool causal = false;
  std::int32_t head_dim = 128;
  bool fp32 = false;  // storage fp32, else bf16
  std::int64_t copy_bytes = 0;
};

// The calls, in the order their timings are passed to fit_device: the launch call (1 x 1), the
// rate tile (T x 2T), the tiny tiles (64 rows x 16 tiles of 16 x 16), the rate tile at head dim
// 64, the square tile (T x T), the causal square tile, the rate tile in fp32, the rate tile
// backward, and the memory copy. Throws InvalidInput naming an option out of range.
std::vector<DeviceCall> device_calls(const DeviceCalibrationOptions& options);

// This rank's seconds per call of device_calls(options), [call][repeat], on the cpu kernels: every
// rank of `sync` times at once, each with its own one-thread cpu kernel set and its own buffers
// (seeded by `rank`), so the figures include the contention for memory and caches of a real run.
std::vector<std::vector<double>> time_cpu_device(RankSync& sync, std::int32_t rank,
                                                 const DeviceCalibrationOptions& options);

// The kernel's sub-tiles (q rows x keys), forward and backward.
struct KernelSubtiles {
  std::int32_t forward_q = 128, forward_kv = 128, backward_q = 128, backward_kv = 128;
  // The kernel computes every sub-tile whole, masking rows and keys past a tile's end (a GPU
  // kernel's blocks), rather than only the pairs inside it (the cpu kernels).
  bool whole = false;
};

// The cpu kernels' sub-tiles (kernels::cpu_subtile_shape); they compute only the pairs inside a
// tile, not whole sub-tiles.
KernelSubtiles cpu_kernel_subtiles();

// Fits the device constants (kernel_overhead, subtile_overhead, forward and backward rates,
// softmax_share, partial_subtile_extra, fp32_kernel_factor, memory_bandwidth and the sub-tile
// shapes and whole_subtiles; tile_setup_tokens from the tiny tiles where sub-tiles are whole,
// else 0)
// from every rank's timings of device_calls(options) ([rank][call][repeat], seconds per
// call): each repeat's figure is the mean over ranks, each repeat is solved on its own and each
// constant is the median over repeats, rounded to 4 significant digits (docs/cost_model.md).
// Writes them into `spec` and appends one row per timing to `rows`. Throws InvalidInput naming the
// rank, call and repeat for a missing, non-positive or non-finite timing.
void fit_device(std::span<const std::vector<std::vector<double>>> timings,
                const DeviceCalibrationOptions& options, const KernelSubtiles& subtiles,
                ClusterSpec& spec, std::vector<CalibrationMeasurement>& rows);

// --- cpu-local: the device and the local communicator on threads of this process --------------

struct CalibrationOptions {
  std::int32_t devices = 2;        // ranks measured at the same time (one per core), [1, 256]
  std::int32_t repeats = 5;        // median over repeats, [1, 1000]
  std::int32_t tile_tokens = 512;  // as DeviceCalibrationOptions
  std::int64_t copy_bytes = std::int64_t{64} << 20;     // memcpy per rank, [4 KiB, 4 GiB]
  std::int64_t message_bytes = std::int64_t{16} << 20;  // message each way, [4 KiB, 4 GiB]
  double min_seconds = 0.05;  // each timing loops at least this long per repeat, [1e-4, 10]
  // Called with one line (no newline) before each measurement; may be empty.
  std::function<void(std::string_view)> progress;
};

struct CalibrationReport {
  ClusterSpec spec;  // passes validate()
  std::vector<CalibrationMeasurement> measurements;
  // What the table alone does not say, one sentence each (constants copied, not measured).
  std::vector<std::string> notes;
};

// Measures the cost model's constants for the cpu kernels and the local communicator (the spec
// is "cpu-local", 1 node x devices): every timing runs on `devices` threads at once, each with
// its own one-thread cpu kernel set and its own buffers (docs/cost_model.md gives the method of
// each constant). The constants are rounded to 4 significant digits in the cluster file's units,
// so that to_cluster_text(spec) reads back as the same spec. Throws InvalidInput naming the option
// for an option out of range.
CalibrationReport calibrate_cpu_local(const CalibrationOptions& options);

}  // namespace dcp::calibration
