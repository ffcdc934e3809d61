// SPDX-License-Identifier: Apache-2.0
// The CPU forward pass: per (row, q chunk, q head) task, an online softmax over the sub-tiles of
// every kv tile, with QK^T and PV as sgemm calls on fp32 data.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "dcp/kernels/cpu/cpu_internal.h"
#include "dcp/kernels/cpu/tile_plan.h"
#include "dcp/kernels/cpu/vector_math.h"

#include <cblas.h>

namespace dcp::kernels {
namespace {

struct ForwardTask {
  std::size_t row;
  std::int32_t q_chunk;
  std::int32_t head;
  std::int64_t cost;
};

// Per-worker scratch: the S / P block, the running output and softmax statistics of one chunk.
struct ForwardScratch {
  std::vector<float> s, o, m, l;
};

struct ForwardContext {
  const AttentionParams& params;
  std::span<const ForwardRow> rows;
  const std::vector<std::vector<TilePlan>>& plans;  // [row][tile]
  const Fp32Inputs& inputs;
  const VectorMath& vm;
};

void run_forward_task(const ForwardContext& ctx, const ForwardTask& task, ForwardScratch& sc) {
  const AttentionParams& p = ctx.params;
  const ForwardRow& row = ctx.rows[task.row];
  const std::int32_t qh = p.q_heads, kvh = p.kv_heads, d = p.head_dim;
  const std::int32_t j = task.head;
  const std::int32_t h = j / (qh / kvh);  // GQA: q head j reads kv head j / group size
  const std::int32_t r0 = task.q_chunk * kForwardQChunk;
  const std::int32_t rows = std::min(kForwardQChunk, row.q_tokens - r0);
  const float* q = ctx.inputs.get(row.q);

  // Online softmax state per query row: running max m, running sum l of exp(s - m), and the
  // unnormalised output o = sum exp(s - m) v.
  std::fill_n(sc.m.begin(), rows, kNegInf);
  std::fill_n(sc.l.begin(), rows, 0.0f);
  std::fill_n(sc.o.begin(), to_size(std::int64_t{rows} * d), 0.0f);

  for (std::size_t t = 0; t < row.tiles.size(); ++t) {
    const ForwardTile& tile = row.tiles[t];
    const TilePlan& plan = ctx.plans[task.row][t];
    if (plan.kv_chunks == 0) continue;
    const float* k = ctx.inputs.get(tile.k);
    const float* v = ctx.inputs.get(tile.v);
    for (std::int32_t kc = 0; kc < plan.kv_chunks; ++kc) {
      const SubTile& cell = plan.cell(task.q_chunk, kc);
      if (cell.empty()) continue;  // no row of the chunk attends to these keys
      const std::int32_t nr = cell.q_end - cell.q_begin;
      const std::int32_t nk = cell.k_end - cell.k_begin;
      float* s = sc.s.data();
      // s = scale * q k^T (the scale rides on sgemm's alpha).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, d, p.softmax_scale,
                  q + to_size((std::int64_t{cell.q_begin} * qh + j) * d), qh * d,
                  k + to_size((std::int64_t{cell.k_begin} * kvh + h) * d), kvh * d, 0.0f, s, nk);
      for (std::int32_t i = 0; i < nr; ++i) {
        const std::int32_t r = cell.q_begin + i;  // row within the tile (= within the row's q)
        const std::size_t local = to_size(r - r0);
        float* srow = s + to_size(std::int64_t{i} * nk);
        // Only sub-tiles the mask cuts pay for element-wise masking: masked keys become -inf.
        if (cell.partial) mask_row(tile.mask, r, cell.k_begin, cell.k_end, srow);
        const float m_old = sc.m[local];
        const float m_new = std::max(m_old, ctx.vm.max(srow, to_size(nk)));
        if (m_new == kNegInf) {
          // No key for this row yet: p = 0 instead of exp(-inf - (-inf)).
          std::fill_n(srow, nk, 0.0f);
          continue;
        }
        // p = exp(s - m_new); masked -inf keys give exactly 0.
        const float row_sum = ctx.vm.exp_shift_sum(srow, to_size(nk), m_new);
        if (m_new > m_old && m_old != kNegInf) {
          // The max grew: rescale the old sum and output by exp(m_old - m_new) < 1. When m_old
          // was -inf, l and o are still 0 and need no rescaling.
          const float alpha = std::exp(m_old - m_new);
          sc.l[local] *= alpha;
          float* orow = sc.o.data() + local * to_size(d);
          for (std::int32_t x = 0; x < d; ++x) orow[x] *= alpha;
        }
        sc.l[local] += row_sum;
        sc.m[local] = m_new;
      }
      // o += p v.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, d, nk, 1.0f, s, nk,
                  v + to_size((std::int64_t{cell.k_begin} * kvh + h) * d), kvh * d, 1.0f,
                  sc.o.data() + to_size(std::int64_t{cell.q_begin - r0} * d), d);
    }
  }

  // Normalise: o /= l and lse = m + log(l). A row with no key keeps m = -inf: o = 0, lse = -inf.
  for (std::int32_t i = 0; i < rows; ++i) {
    const std::size_t local = to_size(i);
    float* orow = sc.o.data() + local * to_size(d);
    float lse = kNegInf;
    if (sc.m[local] == kNegInf) {
      std::fill_n(orow, d, 0.0f);
    } else {
      const float inv = 1.0f / sc.l[local];  // l >= 1: the max key contributes exp(0)
      for (std::int32_t x = 0; x < d; ++x) orow[x] *= inv;
      lse = sc.m[local] + std::log(sc.l[local]);
    }
    const std::int32_t r = r0 + i;
    float* dst_o = row.o + to_size((std::int64_t{r} * qh + j) * d);
    float& dst_lse = row.lse[to_size(std::int64_t{j} * row.q_tokens + r)];
    if (row.accumulate) {
      merge_row(dst_o, dst_lse, orow, lse, d);
    } else {
      std::copy_n(orow, d, dst_o);
      dst_lse = lse;
    }
  }
}

}  // namespace

void cpu_forward(ThreadPool& pool, const AttentionParams& params,
                 std::span<const ForwardRow> rows) {
  check_params(params);
  const std::int32_t qh = params.q_heads, kvh = params.kv_heads, d = params.head_dim;

  // Plans of every (row, tile), then the fp32 inputs.
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  std::vector<std::vector<TilePlan>> plans(rows.size());
  Fp32Inputs inputs(params.storage);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const ForwardRow& row = rows[r];
    if (row.q_tokens <= 0) continue;
    plans[r].resize(row.tiles.size());
    inputs.add(row.q, to_size(std::int64_t{row.q_tokens} * qh * d));
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
    const ForwardTile& tile = rows[r].tiles[t];
    plans[r][t] = plan_tile(tile.mask, rows[r].q_tokens, std::max(tile.kv_tokens, 0),
                            kForwardQChunk, kForwardKvChunk);
  });
  inputs.convert(pool);

  // Tasks, most expensive first so that the dynamic schedule ends with the small ones.
  std::vector<ForwardTask> tasks;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const ForwardRow& row = rows[r];
    if (row.q_tokens <= 0) continue;
    const std::int32_t q_chunks = (row.q_tokens + kForwardQChunk - 1) / kForwardQChunk;
    for (std::int32_t qc = 0; qc < q_chunks; ++qc) {
      std::int64_t cost = kForwardQChunk;  // normalising the chunk's rows
      for (const TilePlan& plan : plans[r]) {
        for (std::int32_t kc = 0; kc < plan.kv_chunks; ++kc) cost += plan.cell(qc, kc).area();
      }
      for (std::int32_t j = 0; j < qh; ++j) tasks.push_back({r, qc, j, cost});
    }
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const ForwardTask& a, const ForwardTask& b) { return a.cost > b.cost; });

  std::vector<ForwardScratch> scratch(to_size(pool.threads()));
  const ForwardContext ctx{params, rows, plans, inputs, vector_math()};
  pool.parallel_for(tasks.size(), [&](std::size_t i, int worker) {
    ForwardScratch& sc = scratch[to_size(worker)];
    if (sc.s.empty()) {
      sc.s.resize(to_size(std::int64_t{kForwardQChunk} * kForwardKvChunk));
      sc.o.resize(to_size(std::int64_t{kForwardQChunk} * d));
      sc.m.resize(to_size(kForwardQChunk));
      sc.l.resize(to_size(kForwardQChunk));
    }
    run_forward_task(ctx, tasks[i], sc);
  });
}

}  // namespace dcp::kernels
