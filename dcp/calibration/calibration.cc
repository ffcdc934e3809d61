// SPDX-License-Identifier: Apache-2.0
// Calibration of the cost model's constants for the cpu kernels and the local communicator.
#include "dcp/calibration/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/rng.h"

#include "dcp/model/cluster_file.h"

#include "dcp/comm/local/local_communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/kernels/cpu/cpu_attention.h"
#include "dcp/program/program.h"
#include "dcp/sim/cost_model.h"

namespace dcp::calibration {
namespace {

using kernels::ElementType;

constexpr std::int32_t kHeadDim = 128;  // the cost model's reference head dim
// The sub-tile overhead call: many tiny full tiles.
constexpr std::int32_t kTinyRows = 64;
constexpr std::int32_t kTinyTiles = 16;
constexpr std::int32_t kTinyTokens = 16;
// device_calls' order.
enum Call : std::size_t {
  kLaunch,
  kBig,
  kTiny,
  kHalfDim,
  kSquare,
  kCausal,
  kFp32,
  kBackward,
  kCopy,
  kCallCount
};

void check_range(std::int64_t value, std::int64_t lo, std::int64_t hi, const char* option) {
  if (value < lo || value > hi) {
    throw InvalidInput(std::string("calibration option ") + option + " must be in [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                       std::to_string(value));
  }
}

void check_options(const DeviceCalibrationOptions& o) {
  check_range(o.repeats, 1, 1000, "repeats");
  check_range(o.tile_tokens, 64, 16384, "tile_tokens");
  check_range(o.copy_bytes, std::int64_t{4} << 10, std::int64_t{4} << 30, "copy_bytes");
  check_range(o.heads, 1, 256, "heads");
  if (!(o.min_seconds >= 1e-4 && o.min_seconds <= 10)) {
    throw InvalidInput("calibration option min_seconds must be in [0.0001, 10], got " +
                       std::to_string(o.min_seconds));
  }
}

// --- Attention operations --------------------------------------------------------------------

// Storage-type values, uniform in [-1, 1]; the vector of floats only provides aligned memory.
std::vector<float> random_values(ElementType type, std::int64_t n, Rng& rng) {
  std::vector<float> values(to_size(n));
  for (float& x : values) x = static_cast<float>(2 * rng.uniform01() - 1);
  if (type != ElementType::kFp32) {
    std::vector<float> stored(to_size((n + 1) / 2));
    kernels::from_float(type, values.data(), stored.data(), to_size(n));
    return stored;
  }
  return values;
}

kernels::AttentionParams attention_params(std::int32_t head_dim, ElementType storage) {
  kernels::AttentionParams params;
  params.q_heads = 1;
  params.kv_heads = 1;
  params.head_dim = head_dim;
  params.storage = storage;
  params.softmax_scale = static_cast<float>(1 / std::sqrt(static_cast<double>(head_dim)));
  return params;
}

TileMask causal_mask(std::int32_t tokens) {
  TileMask mask;
  mask.q_tokens = tokens;
  mask.kv_tokens = tokens;
  for (std::int32_t r = 0; r <= tokens; ++r) mask.row_offsets.push_back(r);
  for (std::int32_t r = 0; r < tokens; ++r) mask.intervals.insert(mask.intervals.end(), {0, r + 1});
  return mask;
}

struct ForwardState {
  std::unique_ptr<kernels::AttentionKernels> kernel_set;
  kernels::AttentionParams params;
  std::vector<float> q, k, v, o, lse;
  TileMask mask;
  std::vector<kernels::ForwardTile> tiles;  // [row][tile]
  std::vector<kernels::ForwardRow> rows;
};

std::shared_ptr<ForwardState> make_forward_state(const DeviceCall& c, std::uint64_t seed) {
  auto state = std::make_shared<ForwardState>();
  state->kernel_set = kernels::make_kernels(kernels::KernelKind::kCpu, 1);
  const ElementType storage = c.fp32 ? ElementType::kFp32 : ElementType::kBf16;
  state->params = attention_params(c.head_dim, storage);
  Rng rng(seed);
  const std::int64_t q_elements = std::int64_t{c.rows} * c.q_tokens * c.head_dim;
  const std::int64_t kv_elements = std::int64_t{c.tiles} * c.kv_tokens * c.head_dim;
  state->q = random_values(storage, q_elements, rng);
  state->k = random_values(storage, kv_elements, rng);
  state->v = random_values(storage, kv_elements, rng);
  state->o.assign(to_size(q_elements), 0.0f);
  state->lse.assign(to_size(std::int64_t{c.rows} * c.q_tokens), 0.0f);
  kernels::TileMaskView view;
  if (c.causal) {
    state->mask = causal_mask(c.q_tokens);
    view.row_offsets = state->mask.row_offsets.data();
    view.intervals = state->mask.intervals.data();
  }
  const std::size_t element = kernels::element_size(storage);
  const auto* k_bytes = reinterpret_cast<const unsigned char*>(state->k.data());
  const auto* v_bytes = reinterpret_cast<const unsigned char*>(state->v.data());
  const auto* q_bytes = reinterpret_cast<const unsigned char*>(state->q.data());
  const std::size_t tile_bytes = to_size(std::int64_t{c.kv_tokens} * c.head_dim) * element;
  const std::size_t row_bytes = to_size(std::int64_t{c.q_tokens} * c.head_dim) * element;
  for (std::int32_t r = 0; r < c.rows; ++r) {
    for (std::int32_t t = 0; t < c.tiles; ++t) {
      kernels::ForwardTile tile;
      tile.k = k_bytes + to_size(t) * tile_bytes;  // the same kv tiles for every row
      tile.v = v_bytes + to_size(t) * tile_bytes;
      tile.kv_tokens = c.kv_tokens;
      tile.mask = view;
      state->tiles.push_back(tile);
    }
  }
  const std::span<const kernels::ForwardTile> all(state->tiles);
  for (std::int32_t r = 0; r < c.rows; ++r) {
    kernels::ForwardRow row;
    row.q = q_bytes + to_size(r) * row_bytes;
    row.q_tokens = c.q_tokens;
    row.tiles = all.subspan(to_size(std::int64_t{r} * c.tiles), to_size(c.tiles));
    row.o = state->o.data() + to_size(std::int64_t{r} * c.q_tokens * c.head_dim);
    row.lse = state->lse.data() + to_size(std::int64_t{r} * c.q_tokens);
    state->rows.push_back(row);
  }
  return state;
}

TimedOperation forward_operation(const DeviceCall& c, std::int32_t rank) {
  auto state = make_forward_state(c, 1000 + static_cast<std::uint64_t>(rank));
  return [state] { state->kernel_set->forward(state->params, state->rows); };
}

// The backward call of a one-row, one-tile DeviceCall, from the lse and delta of a forward run.
struct BackwardState {
  std::shared_ptr<ForwardState> forward;
  std::vector<float> dout, o_stored, delta, dq, dk, dv;
  kernels::BackwardTile tile;
  kernels::BackwardRow row;
};

TimedOperation backward_operation(const DeviceCall& c, std::int32_t rank) {
  auto state = std::make_shared<BackwardState>();
  const auto seed = 2000 + static_cast<std::uint64_t>(rank);
  state->forward = make_forward_state(c, seed);
  ForwardState& f = *state->forward;
  f.kernel_set->forward(f.params, f.rows);
  const ElementType storage = f.params.storage;
  Rng rng(seed + 500);
  const std::int64_t q_elements = std::int64_t{c.q_tokens} * c.head_dim;
  const std::int64_t kv_elements = std::int64_t{c.kv_tokens} * c.head_dim;
  state->dout = random_values(storage, q_elements, rng);
  // delta from the output as the caller holds it (rounded to the storage type).
  state->o_stored.assign(to_size(q_elements), 0.0f);
  kernels::from_float(storage, f.o.data(), state->o_stored.data(), to_size(q_elements));
  state->delta.assign(to_size(c.q_tokens), 0.0f);
  f.kernel_set->delta(storage, state->o_stored.data(), state->dout.data(), c.q_tokens, 1,
                      c.head_dim, state->delta.data());
  state->dq.assign(to_size(q_elements), 0.0f);
  state->dk.assign(to_size(kv_elements), 0.0f);
  state->dv.assign(to_size(kv_elements), 0.0f);
  state->tile.k = f.k.data();
  state->tile.v = f.v.data();
  state->tile.kv_tokens = c.kv_tokens;
  state->tile.dk = state->dk.data();
  state->tile.dv = state->dv.data();
  state->row.q = f.q.data();
  state->row.dout = state->dout.data();
  state->row.lse = f.lse.data();
  state->row.delta = state->delta.data();
  state->row.q_tokens = c.q_tokens;
  state->row.tiles = std::span<const kernels::BackwardTile>(&state->tile, 1);
  state->row.dq = state->dq.data();
  return [state] {
    state->forward->kernel_set->backward(state->forward->params,
                                         std::span<const kernels::BackwardRow>(&state->row, 1));
  };
}

TimedOperation copy_operation(std::int64_t bytes) {
  auto buffers = std::make_shared<std::pair<std::vector<char>, std::vector<char>>>(
      std::vector<char>(to_size(bytes), 1), std::vector<char>(to_size(bytes), 0));
  return [buffers] {
    std::memcpy(buffers->second.data(), buffers->first.data(), buffers->first.size());
  };
}

// Ranks paired 0 <-> 1, 2 <-> 3, ...; each pair exchanges a message both ways in one group (an
// odd last rank exchanges with itself, so that it loads the memory as the others do).
TimedOperation exchange_operation(comm::Communicator& communicator, std::int64_t bytes) {
  const std::int32_t rank = communicator.rank();
  std::int32_t peer = rank ^ 1;
  if (peer >= communicator.size()) peer = rank;
  auto buffers = std::make_shared<std::pair<std::vector<char>, std::vector<char>>>(
      std::vector<char>(to_size(bytes), 1), std::vector<char>(to_size(bytes), 0));
  return [buffers, peer, &communicator] {
    const comm::TransferOp ops[] = {
        {comm::TransferOp::Kind::kSend, peer, buffers->first.data(), buffers->first.size()},
        {comm::TransferOp::Kind::kRecv, peer, buffers->second.data(), buffers->second.size()}};
    communicator.wait(communicator.start(ops));
  };
}

// --- Solving the kernel timings --------------------------------------------------------------

// The attention timings of one repeat (seconds per call), and the constants they give.
struct KernelTimes {
  double launch, big, tiny, half_dim, square, causal, fp32, backward;
};
struct KernelConstants {
  double overhead, subtile, pair, softmax_share, fp32_factor, partial_extra, pair_backward, setup;
};

// Sub-tile counts and areas of the timed tiles, and the q rows (backward: keys) their kernels
// loop over per tile, which pay tile_setup_tokens each. Areas are the pairs a kernel computes:
// with whole sub-tiles, every sub-tile's full area.
struct TileGeometry {
  double launch_area, big_area, big_subtiles, tiny_area, tiny_subtiles, square_area,
      square_subtiles;
  double backward_area, backward_subtiles;
  double launch_loop, big_loop, tiny_loop, square_loop, backward_loop;
  sim::SubtileWork causal;
  bool whole;
};

// Time left for the pairs of a call, per pair; never below a tenth of the call, so that noise
// cannot make a rate negative or infinite.
double pair_time(double t, double overhead, double subtiles, double subtile, double area) {
  return std::max(t - overhead - subtiles * subtile, 0.1 * t) / area;
}

KernelConstants solve(const KernelTimes& t, const TileGeometry& g) {
  KernelConstants c{};
  // Kernel overhead, sub-tile overhead and the pair time solve each other: the 1 x 1 call is one
  // launch, one sub-tile and one pair; the big tile is mostly pairs; the tiny tiles mostly
  // sub-tiles. A few rounds of substitution converge (each coupling is small).
  // With whole sub-tiles every call is a sum of whole sub-tiles, so a sub-tile's own cost and its
  // pairs' cannot be told apart: the sub-tile overhead is 0. What the tiny tiles cost beyond
  // their whole sub-tiles' pairs is then a tile's set-up (its q rows loaded, its loop begun),
  // priced as tile_setup_tokens more keys per q row: tiny and big tiles differ in their share of
  // it, which solves it.
  c.overhead = t.launch;
  c.subtile = 0;
  c.setup = 0;
  for (int round = 0; round < 8; ++round) {
    if (g.whole) {
      const double ratio = (t.tiny - c.overhead) / std::max(t.big - c.overhead, 1e-30);
      const double denominator = g.tiny_loop - ratio * g.big_loop;
      c.setup = denominator > 0
                    ? std::clamp((ratio * g.big_area - g.tiny_area) / denominator, 0.0, 1e6)
                    : 0.0;
    }
    c.pair =
        pair_time(t.big, c.overhead, g.big_subtiles, c.subtile, g.big_area + c.setup * g.big_loop);
    if (!g.whole) {
      c.subtile = std::max(0.0, (t.tiny - c.overhead - g.tiny_area * c.pair) / g.tiny_subtiles);
    }
    c.overhead =
        std::max(0.0, t.launch - c.subtile - (g.launch_area + c.setup * g.launch_loop) * c.pair);
  }
  const double big_pairs = g.big_area + c.setup * g.big_loop;
  // Head dim 64 over 128: r = (1 - s) / 2 + s.
  const double pair_half = pair_time(t.half_dim, c.overhead, g.big_subtiles, c.subtile, big_pairs);
  c.softmax_share = std::clamp(2 * pair_half / c.pair - 1, 0.0, 0.95);
  const double pair_fp32 = pair_time(t.fp32, c.overhead, g.big_subtiles, c.subtile, big_pairs);
  c.fp32_factor = std::clamp(pair_fp32 / c.pair, 0.25, 4.0);
  // The causal tile against the full tile of the same size: a T x T tile's pairs need not run at
  // the rate tile's speed (each q chunk streams half the keys), and that is no masking cost.
  const double pair_square = pair_time(t.square, c.overhead, g.square_subtiles, c.subtile,
                                       g.square_area + c.setup * g.square_loop);
  c.partial_extra = 0;
  if (g.causal.partial_area > 0) {
    const double used =
        (t.causal - c.overhead - static_cast<double>(g.causal.subtiles) * c.subtile) / pair_square -
        c.setup * static_cast<double>(g.causal.loop_rows);
    c.partial_extra = std::clamp((used - static_cast<double>(g.causal.full_area)) /
                                         static_cast<double>(g.causal.partial_area) -
                                     1,
                                 0.0, 99.0);
  }
  c.pair_backward = pair_time(t.backward, c.overhead, g.backward_subtiles, c.subtile,
                              g.backward_area + c.setup * g.backward_loop);
  return c;
}

std::string describe_attention(const DeviceCall& c) {
  char text[160];
  char type[32];
  if (c.heads == 1) {
    std::snprintf(type, sizeof type, "%s", c.fp32 ? "fp32" : "bf16");
  } else {
    std::snprintf(type, sizeof type, "%s x%d heads", c.fp32 ? "fp32" : "bf16", c.heads);
  }
  if (c.kind == DeviceCall::Kind::kBackward) {
    std::snprintf(text, sizeof text, "backward %dx%d d%d %s", c.q_tokens, c.kv_tokens, c.head_dim,
                  type);
  } else if (c.rows == 1 && c.tiles == 1) {
    std::snprintf(text, sizeof text, "forward %s%dx%d d%d %s", c.causal ? "causal " : "",
                  c.q_tokens, c.kv_tokens, c.head_dim, type);
  } else {
    std::snprintf(text, sizeof text, "forward %d rows x %d tiles of %dx%d d%d %s", c.rows, c.tiles,
                  c.q_tokens, c.kv_tokens, c.head_dim, type);
  }
  return text;
}

}  // namespace

double round4(double value, double unit) {
  char text[64];
  std::snprintf(text, sizeof text, "%.4g", value / unit);
  return std::strtod(text, nullptr) * unit;
}

void settle_file_form(ClusterSpec& spec) {
  for (int round = 0; round < 4; ++round) {
    const ClusterSpec back = parse_cluster_text(to_cluster_text(spec), "calibration");
    if (to_cluster_text(back) == to_cluster_text(spec)) break;
    spec = back;
  }
}

KernelSubtiles cpu_kernel_subtiles() {
  const kernels::SubtileShape fwd = kernels::cpu_subtile_shape(true);
  const kernels::SubtileShape bwd = kernels::cpu_subtile_shape(false);
  return {fwd.q, fwd.kv, bwd.q, bwd.kv, false};
}

std::vector<DeviceCall> device_calls(const DeviceCalibrationOptions& options) {
  check_options(options);
  const std::int32_t tokens = options.tile_tokens;
  std::vector<DeviceCall> calls(kCallCount);
  calls[kBig].q_tokens = tokens;  // the rate tile: T x 2T
  calls[kBig].kv_tokens = 2 * tokens;
  calls[kTiny].rows = kTinyRows;  // many tiny full tiles: one sub-tile each
  calls[kTiny].q_tokens = kTinyTokens;
  calls[kTiny].tiles = kTinyTiles;
  calls[kTiny].kv_tokens = kTinyTokens;
  calls[kHalfDim] = calls[kBig];
  calls[kHalfDim].head_dim = kHeadDim / 2;
  calls[kSquare].q_tokens = tokens;  // the causal tile's reference: the same tile without a mask
  calls[kSquare].kv_tokens = tokens;
  calls[kCausal] = calls[kSquare];
  calls[kCausal].causal = true;
  calls[kFp32] = calls[kBig];
  calls[kFp32].fp32 = true;
  calls[kBackward] = calls[kBig];
  calls[kBackward].kind = DeviceCall::Kind::kBackward;
  calls[kCopy].kind = DeviceCall::Kind::kCopy;
  calls[kCopy].copy_bytes = options.copy_bytes;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (i != kLaunch && calls[i].kind != DeviceCall::Kind::kCopy) calls[i].heads = options.heads;
  }
  for (DeviceCall& c : calls) {
    c.name = c.kind == DeviceCall::Kind::kCopy ? "memcpy " + std::to_string(c.copy_bytes) + " B"
                                               : describe_attention(c);
  }
  return calls;
}

std::vector<std::vector<double>> time_cpu_device(RankSync& sync, std::int32_t rank,
                                                 const DeviceCalibrationOptions& options) {
  if (options.heads != 1) {
    throw InvalidInput(
        "calibration option heads must be 1 on the cpu kernels (one thread runs "
        "heads one after another), got " +
        std::to_string(options.heads));
  }
  std::vector<TimedOperation> operations;
  for (const DeviceCall& c : device_calls(options)) {
    switch (c.kind) {
      case DeviceCall::Kind::kForward:
        operations.push_back(forward_operation(c, rank));
        break;
      case DeviceCall::Kind::kBackward:
        operations.push_back(backward_operation(c, rank));
        break;
      case DeviceCall::Kind::kCopy:
        operations.push_back(copy_operation(c.copy_bytes));
        break;
    }
  }
  return time_operations(sync, operations, options.repeats, options.min_seconds);
}

void fit_device(std::span<const std::vector<std::vector<double>>> timings,
                const DeviceCalibrationOptions& options, const KernelSubtiles& subtiles,
                ClusterSpec& spec, std::vector<CalibrationMeasurement>& rows) {
  const std::vector<DeviceCall> calls = device_calls(options);
  const auto repeats = to_size(options.repeats);
  if (timings.empty()) throw InvalidInput("device timings: no rank's timings were given");
  for (std::size_t r = 0; r < timings.size(); ++r) {
    if (timings[r].size() != calls.size()) {
      throw InvalidInput("device timings of rank " + std::to_string(r) + ": " +
                         std::to_string(timings[r].size()) + " calls, expected " +
                         std::to_string(calls.size()));
    }
    for (std::size_t c = 0; c < calls.size(); ++c) {
      if (timings[r][c].size() != repeats) {
        throw InvalidInput("device timings of rank " + std::to_string(r) + ", " + calls[c].name +
                           ": " + std::to_string(timings[r][c].size()) + " repeats, expected " +
                           std::to_string(repeats));
      }
      for (std::size_t i = 0; i < repeats; ++i) {
        const double t = timings[r][c][i];
        if (!std::isfinite(t) || t <= 0) {
          throw InvalidInput("device timings of rank " + std::to_string(r) + ", " + calls[c].name +
                             ", repeat " + std::to_string(i) + ": " + std::to_string(t) +
                             " s is not a positive time");
        }
      }
    }
  }
  // t[call][repeat]: the mean over ranks.
  std::vector<std::vector<double>> t(calls.size(), std::vector<double>(repeats, 0.0));
  for (const auto& rank : timings) {
    for (std::size_t c = 0; c < calls.size(); ++c) {
      for (std::size_t i = 0; i < repeats; ++i) {
        t[c][i] += rank[c][i] / static_cast<double>(timings.size());
      }
    }
  }
  // One head's share: a call of H heads costs one launch and H heads' work.
  std::vector<std::vector<double>> one_head = t;
  for (std::size_t c = 0; c < calls.size(); ++c) {
    if (calls[c].heads == 1) continue;
    for (std::size_t i = 0; i < repeats; ++i) {
      one_head[c][i] = t[kLaunch][i] + (t[c][i] - t[kLaunch][i]) / calls[c].heads;
    }
  }
  const std::int32_t tokens = options.tile_tokens;
  const std::int32_t fq = subtiles.forward_q, fkv = subtiles.forward_kv;
  const bool whole = subtiles.whole;
  const auto full = [&](std::int32_t q, std::int32_t kv, std::int32_t sub_q, std::int32_t sub_kv) {
    return sim::subtile_work(nullptr, q, kv, sub_q, sub_kv, whole);
  };
  TileGeometry geometry{};
  const sim::SubtileWork launch = full(1, 1, fq, fkv);
  geometry.launch_area = static_cast<double>(launch.full_area);
  geometry.launch_loop = static_cast<double>(launch.loop_rows);
  const sim::SubtileWork big = full(tokens, 2 * tokens, fq, fkv);
  geometry.big_area = static_cast<double>(big.full_area);
  geometry.big_subtiles = static_cast<double>(big.subtiles);
  geometry.big_loop = static_cast<double>(big.loop_rows);
  const sim::SubtileWork tiny = full(kTinyTokens, kTinyTokens, fq, fkv);
  const double tiny_tiles = double{kTinyRows} * kTinyTiles;
  geometry.tiny_subtiles = tiny_tiles * static_cast<double>(tiny.subtiles);
  geometry.tiny_area = tiny_tiles * static_cast<double>(tiny.full_area);
  geometry.tiny_loop = tiny_tiles * static_cast<double>(tiny.loop_rows);
  const sim::SubtileWork square = full(tokens, tokens, fq, fkv);
  geometry.square_area = static_cast<double>(square.full_area);
  geometry.square_subtiles = static_cast<double>(square.subtiles);
  geometry.square_loop = static_cast<double>(square.loop_rows);
  const sim::SubtileWork backward =
      full(tokens, 2 * tokens, subtiles.backward_q, subtiles.backward_kv);
  geometry.backward_area = static_cast<double>(backward.full_area);
  geometry.backward_subtiles = static_cast<double>(backward.subtiles);
  geometry.backward_loop = static_cast<double>(backward.loop_keys);
  const TileMask mask = causal_mask(tokens);
  geometry.causal = sim::subtile_work(&mask, tokens, tokens, fq, fkv, whole);
  geometry.whole = whole;
  // Each repeat solved on its own, then the median of each constant.
  std::vector<KernelConstants> solved;
  for (std::size_t i = 0; i < repeats; ++i) {
    const auto& h = one_head;
    solved.push_back(solve({h[kLaunch][i], h[kBig][i], h[kTiny][i], h[kHalfDim][i], h[kSquare][i],
                            h[kCausal][i], h[kFp32][i], h[kBackward][i]},
                           geometry));
  }
  const auto constant = [&](double KernelConstants::*field) {
    std::vector<double> values;
    for (const KernelConstants& c : solved) values.push_back(c.*field);
    return median(std::move(values));
  };
  spec.kernel_overhead = round4(constant(&KernelConstants::overhead), 1e-6);
  spec.forward_flops = round4(4.0 * kHeadDim / constant(&KernelConstants::pair), 1e12);
  spec.subtile_overhead = round4(constant(&KernelConstants::subtile), 1e-6);
  spec.softmax_share = round4(constant(&KernelConstants::softmax_share), 1);
  spec.partial_subtile_extra = round4(constant(&KernelConstants::partial_extra), 1);
  spec.backward_flops = round4(10.0 * kHeadDim / constant(&KernelConstants::pair_backward), 1e12);
  spec.fp32_kernel_factor = round4(constant(&KernelConstants::fp32_factor), 1);
  spec.memory_bandwidth =
      round4(2 * static_cast<double>(options.copy_bytes) / median(t[kCopy]), 1e9);
  spec.forward_subtile_q = subtiles.forward_q;
  spec.forward_subtile_kv = subtiles.forward_kv;
  spec.backward_subtile_q = subtiles.backward_q;
  spec.backward_subtile_kv = subtiles.backward_kv;
  spec.tile_setup_tokens = round4(constant(&KernelConstants::setup), 1);  // 0 unless whole
  spec.whole_subtiles = whole;

  // The tiny tiles give the sub-tile overhead, or with whole sub-tiles a tile's set-up.
  const std::pair<const char*, double> tiny_constant =
      whole ? std::pair<const char*, double>{"tile_setup_tokens", spec.tile_setup_tokens}
            : std::pair<const char*, double>{"subtile_overhead_us", spec.subtile_overhead * 1e6};
  const std::pair<const char*, double> derived[kCallCount] = {
      {"kernel_overhead_us", spec.kernel_overhead * 1e6},
      {"forward_tflops", spec.forward_flops * 1e-12},
      tiny_constant,
      {"softmax_share", spec.softmax_share},
      {"partial_subtile_extra", spec.partial_subtile_extra},
      {"partial_subtile_extra", spec.partial_subtile_extra},
      {"fp32_kernel_factor", spec.fp32_kernel_factor},
      {"backward_tflops", spec.backward_flops * 1e-12},
      {"memory_gbps", spec.memory_bandwidth * 1e-9}};
  const char* units[kCallCount] = {"us", "TFLOP/s", whole ? "" : "us", "",    "",
                                   "",   "",        "TFLOP/s",         "GB/s"};
  for (std::size_t c = 0; c < calls.size(); ++c) {
    rows.push_back({calls[c].name, median(t[c]), derived[c].first, derived[c].second, units[c]});
  }
}

CalibrationReport calibrate_cpu_local(const CalibrationOptions& options) {
  check_range(options.devices, 1, 256, "devices");
  check_range(options.message_bytes, std::int64_t{4} << 10, std::int64_t{4} << 30, "message_bytes");
  DeviceCalibrationOptions device;
  device.repeats = options.repeats;
  device.tile_tokens = options.tile_tokens;
  device.copy_bytes = options.copy_bytes;
  device.min_seconds = options.min_seconds;
  const std::vector<DeviceCall> calls = device_calls(device);  // checks the options
  const std::int32_t ranks = options.devices;
  const std::int32_t repeats = options.repeats;
  const auto progress = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const std::string on_ranks = " on " + std::to_string(ranks) + " ranks, " +
                               std::to_string(repeats) + (repeats == 1 ? " repeat" : " repeats");
  comm::CommOptions comm_options;
  comm_options.timeout_seconds = 3600;  // a barrier waits for the slowest rank's operation

  progress("timing " + std::to_string(calls.size() - 1) + " attention calls and a memcpy of " +
           std::to_string(options.copy_bytes) + " bytes" + on_ranks);
  std::vector<std::vector<std::vector<double>>> timings(to_size(ranks));
  comm::run_local_ranks(ranks, comm_options, [&](comm::Communicator& communicator) {
    CommunicatorSync sync(communicator);
    timings[to_size(communicator.rank())] = time_cpu_device(sync, communicator.rank(), device);
  });
  ClusterSpec spec;
  spec.name = "cpu-local";
  spec.shape = {1, ranks};
  CalibrationReport report;
  fit_device(timings, device, cpu_kernel_subtiles(), spec, report.measurements);

  // Links: pairs of local ranks exchanging both ways at once.
  const std::int32_t link_ranks = std::max(ranks, 2);
  const std::int32_t paired = link_ranks - link_ranks % 2;
  progress("timing exchanges of 8 and " + std::to_string(options.message_bytes) + " bytes on " +
           std::to_string(link_ranks) + " ranks");
  std::vector<std::vector<std::vector<double>>> link_timings(to_size(link_ranks));
  comm::run_local_ranks(link_ranks, comm_options, [&](comm::Communicator& communicator) {
    CommunicatorSync sync(communicator);
    const TimedOperation operations[] = {exchange_operation(communicator, 8),
                                         exchange_operation(communicator, options.message_bytes)};
    link_timings[to_size(communicator.rank())] =
        time_operations(sync, operations, repeats, device.min_seconds);
  });
  // t_links[size][repeat]: the mean over the paired ranks.
  std::vector<std::vector<double>> t_links(2, std::vector<double>(to_size(repeats), 0.0));
  for (std::int32_t r = 0; r < paired; ++r) {
    for (std::size_t op = 0; op < 2; ++op) {
      for (std::size_t i = 0; i < to_size(repeats); ++i) {
        t_links[op][i] += link_timings[to_size(r)][op][i] / paired;
      }
    }
  }
  std::vector<double> link_bandwidths;
  for (std::size_t r = 0; r < to_size(repeats); ++r) {
    const double t = t_links[1][r];
    link_bandwidths.push_back(static_cast<double>(options.message_bytes) /
                              std::max(t - t_links[0][r], 0.05 * t));
  }
  spec.intra_node_latency = round4(median(t_links[0]), 1e-6);
  spec.intra_node_bandwidth = round4(median(link_bandwidths), 1e9);
  spec.inter_node_latency = spec.intra_node_latency;  // all ranks share one process
  spec.inter_node_bandwidth = spec.intra_node_bandwidth;
  report.notes.push_back("one process: the inter-node constants are copies of the intra-node ones");
  validate(spec);
  settle_file_form(spec);  // the file form reads back as the same spec
  report.spec = spec;

  const auto add = [&](std::string name, const std::vector<double>& seconds, std::string derives,
                       double value, std::string unit) {
    report.measurements.push_back(
        {std::move(name), median(seconds), std::move(derives), value, std::move(unit)});
  };
  const std::string latency_name = "exchange 8 B both ways";
  const std::string message_name =
      "exchange " + std::to_string(options.message_bytes) + " B both ways";
  add(latency_name, t_links[0], "intra_node_latency_us", spec.intra_node_latency * 1e6, "us");
  add(message_name, t_links[1], "intra_node_gbps", spec.intra_node_bandwidth * 1e-9, "GB/s");
  add(latency_name, t_links[0], "inter_node_latency_us", spec.inter_node_latency * 1e6, "us");
  add(message_name, t_links[1], "inter_node_gbps", spec.inter_node_bandwidth * 1e-9, "GB/s");
  return report;
}

}  // namespace dcp::calibration
