// SPDX-License-Identifier: Apache-2.0
// The CPU backward pass: per (row, tile, kv chunk, kv head) task, the five sgemm products of
// every sub-tile from the row's final lse and delta, with race-free, deterministic dq sums.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "dcp/kernels/cpu/cpu_internal.h"
#include "dcp/kernels/cpu/tile_plan.h"
#include "dcp/kernels/cpu/vector_math.h"

#include <cblas.h>

namespace dcp::kernels {
namespace {

struct BackwardTask {
  std::size_t row;
  std::size_t tile;
  std::int32_t kv_chunk;
  std::int32_t kv_head;
  std::int64_t cost;
};

// Per-bucket scratch: P and dS of one sub-tile, and the dk, dv accumulators of one kv chunk.
struct BackwardScratch {
  std::vector<float> p, ds, dk, dv;
};

struct BackwardContext {
  const AttentionParams& params;
  std::span<const BackwardRow> rows;
  const std::vector<std::vector<TilePlan>>& plans;  // [row][tile]
  const Fp32Inputs& inputs;
  const VectorMath& vm;
};

// dq_target: where this task's dq contributions go, laid out like the row's dq.
void run_backward_task(const BackwardContext& ctx, const BackwardTask& task, float* dq_target,
                       BackwardScratch& sc) {
  const AttentionParams& p = ctx.params;
  const BackwardRow& row = ctx.rows[task.row];
  const BackwardTile& tile = row.tiles[task.tile];
  const TilePlan& plan = ctx.plans[task.row][task.tile];
  const std::int32_t qh = p.q_heads, kvh = p.kv_heads, d = p.head_dim;
  const std::int32_t group = qh / kvh;
  const std::int32_t h = task.kv_head;
  const std::int32_t k0 = task.kv_chunk * kBackwardKvChunk;
  const std::int32_t keys = std::min(kBackwardKvChunk, tile.kv_tokens - k0);
  const float scale = p.softmax_scale;
  const float* q = ctx.inputs.get(row.q);
  const float* dout = ctx.inputs.get(row.dout);
  const float* k = ctx.inputs.get(tile.k);
  const float* v = ctx.inputs.get(tile.v);
  const std::size_t acc_size = to_size(std::int64_t{keys} * d);
  std::fill_n(sc.dk.begin(), acc_size, 0.0f);
  std::fill_n(sc.dv.begin(), acc_size, 0.0f);

  // The q heads reading kv head h (none when the row has no queries).
  const std::int32_t heads_end = plan.q_chunks > 0 ? (h + 1) * group : h * group;
  for (std::int32_t j = h * group; j < heads_end; ++j) {
    const float* lse = row.lse + to_size(std::int64_t{j} * row.q_tokens);
    const float* delta = row.delta + to_size(std::int64_t{j} * row.q_tokens);
    for (std::int32_t qc = 0; qc < plan.q_chunks; ++qc) {
      const SubTile& cell = plan.cell(qc, task.kv_chunk);
      if (cell.empty()) continue;
      const std::int32_t nr = cell.q_end - cell.q_begin;
      const std::int32_t nk = cell.k_end - cell.k_begin;
      const float* qj = q + to_size((std::int64_t{cell.q_begin} * qh + j) * d);
      const float* doj = dout + to_size((std::int64_t{cell.q_begin} * qh + j) * d);
      const float* kh = k + to_size((std::int64_t{cell.k_begin} * kvh + h) * d);
      const float* vh = v + to_size((std::int64_t{cell.k_begin} * kvh + h) * d);
      float* dk_acc = sc.dk.data() + to_size(std::int64_t{cell.k_begin - k0} * d);
      float* dv_acc = sc.dv.data() + to_size(std::int64_t{cell.k_begin - k0} * d);
      float* pm = sc.p.data();
      float* ds = sc.ds.data();
      // s = scale q k^T, then P = exp(s - lse) with the row's final lse.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, d, scale, qj, qh * d, kh,
                  kvh * d, 0.0f, pm, nk);
      for (std::int32_t i = 0; i < nr; ++i) {
        const std::int32_t r = cell.q_begin + i;
        float* prow = pm + to_size(std::int64_t{i} * nk);
        if (lse[r] == kNegInf) {
          // A row without keys anywhere has P = 0 (never exp(-inf - (-inf))).
          std::fill_n(prow, nk, 0.0f);
          continue;
        }
        if (cell.partial) mask_row(tile.mask, r, cell.k_begin, cell.k_end, prow);
        ctx.vm.exp_shift_sum(prow, to_size(nk), lse[r]);  // masked -inf keys give exactly 0
      }
      // dP = dO v^T.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, d, 1.0f, doj, qh * d, vh,
                  kvh * d, 0.0f, ds, nk);
      // dV += P^T dO.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, d, nr, 1.0f, pm, nk, doj, qh * d,
                  1.0f, dv_acc, d);
      // dS = P * (dP - delta).
      for (std::int32_t i = 0; i < nr; ++i) {
        const std::size_t off = to_size(std::int64_t{i} * nk);
        ctx.vm.softmax_grad(ds + off, pm + off, to_size(nk), delta[cell.q_begin + i]);
      }
      // dK += scale dS^T q and dQ += scale dS k.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, d, nr, scale, ds, nk, qj, qh * d,
                  1.0f, dk_acc, d);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, d, nk, scale, ds, nk, kh, kvh * d,
                  1.0f, dq_target + to_size((std::int64_t{cell.q_begin} * qh + j) * d), qh * d);
    }
  }

  // The task owns this dk, dv chunk: overwrite (zeros where nothing contributed) or add.
  for (std::int32_t c = 0; c < keys; ++c) {
    const std::size_t dst = to_size((std::int64_t{k0 + c} * kvh + h) * d);
    const std::size_t src = to_size(std::int64_t{c} * d);
    if (tile.accumulate) {
      for (std::int32_t x = 0; x < d; ++x) {
        tile.dk[dst + to_size(x)] += sc.dk[src + to_size(x)];
        tile.dv[dst + to_size(x)] += sc.dv[src + to_size(x)];
      }
    } else {
      std::copy_n(sc.dk.data() + src, d, tile.dk + dst);
      std::copy_n(sc.dv.data() + src, d, tile.dv + dst);
    }
  }
}

}  // namespace

void cpu_backward(ThreadPool& pool, const AttentionParams& params,
                  std::span<const BackwardRow> rows) {
  check_params(params);
  const std::int32_t qh = params.q_heads, kvh = params.kv_heads, d = params.head_dim;
  const std::int32_t group = qh / kvh;

  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  std::vector<std::vector<TilePlan>> plans(rows.size());
  Fp32Inputs inputs(params.storage);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const BackwardRow& row = rows[r];
    const std::size_t q_size = to_size(std::int64_t{std::max(row.q_tokens, 0)} * qh * d);
    inputs.add(row.q, q_size);
    inputs.add(row.dout, q_size);
    plans[r].resize(row.tiles.size());
    for (std::size_t t = 0; t < row.tiles.size(); ++t) {
      pairs.emplace_back(r, t);
      const std::size_t kv_size =
          to_size(std::int64_t{std::max(row.tiles[t].kv_tokens, 0)} * kvh * d);
      inputs.add(row.tiles[t].k, kv_size);
      inputs.add(row.tiles[t].v, kv_size);
    }
  }
  pool.parallel_for(pairs.size(), [&](std::size_t i, int) {
    const auto [r, t] = pairs[i];
    const BackwardTile& tile = rows[r].tiles[t];
    plans[r][t] = plan_tile(tile.mask, std::max(rows[r].q_tokens, 0), std::max(tile.kv_tokens, 0),
                            kBackwardQChunk, kBackwardKvChunk);
  });
  inputs.convert(pool);

  // Tasks: every kv chunk of every tile, even one that nothing attends (an overwriting tile
  // still has to write zeros). Cost: the attended sub-tile area over the group's q heads.
  std::vector<BackwardTask> tasks;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t t = 0; t < rows[r].tiles.size(); ++t) {
      const TilePlan& plan = plans[r][t];
      for (std::int32_t kc = 0; kc < plan.kv_chunks; ++kc) {
        std::int64_t area = 0;
        for (std::int32_t qc = 0; qc < plan.q_chunks; ++qc) area += plan.cell(qc, kc).area();
        const std::int64_t cost = kBackwardKvChunk + area * group;  // + writing the chunk
        for (std::int32_t h = 0; h < kvh; ++h) tasks.push_back({r, t, kc, h, cost});
      }
    }
  }

  // A fixed assignment of tasks to buckets, longest first onto the least loaded bucket (ties to
  // the lower index). Each bucket sums its dq contributions into its own buffer (bucket 0 into
  // dq itself) in task order, and the buffers are added in bucket order afterwards: the result
  // depends on the thread count only, never on which thread ran what.
  const std::size_t buckets =
      std::max<std::size_t>(1, std::min(to_size(pool.threads()), tasks.size()));
  std::vector<std::size_t> order(tasks.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tasks[a].cost > tasks[b].cost; });
  std::vector<std::vector<std::size_t>> bucket_tasks(buckets);
  std::vector<std::int64_t> load(buckets, 0);
  for (std::size_t i : order) {
    const auto b = to_size(std::min_element(load.begin(), load.end()) - load.begin());
    bucket_tasks[b].push_back(i);
    load[b] += tasks[i].cost;
  }
  // Within a bucket, run in task order (row, tile, kv chunk, head) for locality.
  for (auto& list : bucket_tasks) std::sort(list.begin(), list.end());

  // dq buffers: bucket b > 0 gets a zeroed buffer for every row it touches.
  std::vector<std::vector<std::vector<float>>> dq_buffers(
      buckets, std::vector<std::vector<float>>(rows.size()));
  for (std::size_t b = 1; b < buckets; ++b) {
    for (std::size_t i : bucket_tasks[b]) {
      auto& buf = dq_buffers[b][tasks[i].row];
      if (buf.empty())
        buf.assign(to_size(std::int64_t{rows[tasks[i].row].q_tokens} * qh * d), 0.0f);
    }
  }
  for (const BackwardRow& row : rows) {
    if (!row.accumulate && row.q_tokens > 0) {
      std::fill_n(row.dq, to_size(std::int64_t{row.q_tokens} * qh * d), 0.0f);
    }
  }

  std::vector<BackwardScratch> scratch(buckets);
  const BackwardContext ctx{params, rows, plans, inputs, vector_math()};
  pool.parallel_for(buckets, [&](std::size_t b, int) {
    BackwardScratch& sc = scratch[b];
    const std::size_t sub = to_size(std::int64_t{kBackwardQChunk} * kBackwardKvChunk);
    sc.p.resize(sub);
    sc.ds.resize(sub);
    sc.dk.resize(to_size(std::int64_t{kBackwardKvChunk} * d));
    sc.dv.resize(sc.dk.size());
    for (std::size_t i : bucket_tasks[b]) {
      const BackwardTask& task = tasks[i];
      float* target = b == 0 ? rows[task.row].dq : dq_buffers[b][task.row].data();
      run_backward_task(ctx, task, target, sc);
    }
  });

  // dq += buffer 1, buffer 2, ... in order, split by element ranges (each element's sum order
  // is fixed whatever the split).
  struct Piece {
    std::size_t row, begin, end;
  };
  constexpr std::size_t kPiece = std::size_t{1} << 15;
  std::vector<Piece> pieces;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    bool used = false;
    for (std::size_t b = 1; b < buckets; ++b) used |= !dq_buffers[b][r].empty();
    if (!used) continue;
    const std::size_t n = to_size(std::int64_t{rows[r].q_tokens} * qh * d);
    for (std::size_t s = 0; s < n; s += kPiece) pieces.push_back({r, s, std::min(n, s + kPiece)});
  }
  pool.parallel_for(pieces.size(), [&](std::size_t i, int) {
    const Piece& piece = pieces[i];
    float* dq = rows[piece.row].dq;
    for (std::size_t b = 1; b < buckets; ++b) {
      const auto& buf = dq_buffers[b][piece.row];
      if (buf.empty()) continue;
      for (std::size_t x = piece.begin; x < piece.end; ++x) dq[x] += buf[x];
    }
  });
}

}  // namespace dcp::kernels
