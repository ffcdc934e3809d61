// SPDX-License-Identifier: Apache-2.0
// The micro-benchmark's Markdown report and SVG charts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dcp/model/cluster.h"

#include "dcp/planner/baselines/static_plans.h"

#include "apps/suites/micro_suite.h"
#include "apps/suites/paper_suite.h"
#include "apps/suites/reports.h"

namespace dcp::suites {
namespace {

constexpr const char* kBaselines[] = {"ring", "zigzag", "ulysses", "hybrid", "te", "loongtrain"};

// The records of one configuration and pass, by strategy.
struct Config {
  std::string dataset, mask, pass;
  double scale = 1;
  std::vector<const MicroRecord*> records;

  const MicroRecord* find(const std::string& strategy) const {
    for (const MicroRecord* r : records) {
      if (r->strategy == strategy && r->feasible) return r;
    }
    return nullptr;
  }
  // The fastest feasible baseline.
  const MicroRecord* best_baseline() const {
    const MicroRecord* best = nullptr;
    for (const char* name : kBaselines) {
      const MicroRecord* r = find(name);
      if (r != nullptr && (best == nullptr || r->time_ms < best->time_ms)) best = r;
    }
    return best;
  }
  std::optional<double> speedup(const std::string& strategy, const MicroRecord* over) const {
    const MicroRecord* r = find(strategy);
    if (r == nullptr || over == nullptr || r->time_ms <= 0) return std::nullopt;
    return over->time_ms / r->time_ms;
  }
};

std::vector<Config> configs(const std::vector<MicroRecord>& records, const std::string& pass) {
  std::vector<Config> out;
  for (const MicroRecord& r : records) {
    if (r.pass != pass) continue;
    if (out.empty() || out.back().dataset != r.dataset || out.back().scale != r.scale ||
        out.back().mask != r.mask) {
      out.push_back({r.dataset, r.mask, r.pass, r.scale, {}});
    }
    out.back().records.push_back(&r);
  }
  return out;
}

// How the static strategies used data parallelism.
std::string data_parallel_text(std::int32_t degree) {
  if (degree == 0) {
    return "The static strategies (and dcp's static candidates) use data parallelism where they "
           "can, as the DCP paper ran them: degree d = the largest power of two with d × the "
           "longest sequence ≤ the batch's tokens rounded up to a power of two (the paper: ≤ "
           "131072 // max(seqlen)), sequences spread over the d groups of consecutive devices "
           "greedily by tokens, each group running the strategy on its devices (hybrid: whole "
           "nodes per group).";
  }
  if (degree == 1) {
    return "The static strategies use no data parallelism: one group of all devices, as the "
           "DCP paper's measured baselines ran (its batch files' longest lengths give the "
           "reference's rule d = 1, and no measured baseline is faster at x0.5 than at x1; "
           "`--static-dp auto` gives the rule per batch instead).";
  }
  return "The static strategies (and dcp's static candidates) use data parallel degree " +
         std::to_string(degree) +
         ": sequences spread over that many groups of consecutive devices greedily by tokens.";
}

std::string ratio_text(std::optional<double> ratio) {
  return ratio ? format_fixed(*ratio, 2) + "×" : "n/a";
}

void time_table(const MicroOptions& options, const std::vector<MicroRecord>& records,
                const std::string& pass, std::string& md) {
  md += "| dataset | scale | mask |";
  for (const Strategy s : options.strategies) md += " " + std::string(to_string(s)) + " |";
  md +=
      " best baseline | dcp / best | dcp-pure / best | dcp / hybrid | dcp kept | paper: DCP / best "
      "|\n|---|---|---|";
  for (std::size_t i = 0; i < options.strategies.size() + 6; ++i) md += "---|";
  md += "\n";
  for (const Config& c : configs(records, pass)) {
    md += "| " + c.dataset + " | " + format_scale(c.scale) + " | " + c.mask + " |";
    for (const Strategy s : options.strategies) {
      const MicroRecord* r = c.find(std::string(to_string(s)));
      md += " " + (r ? format_fixed(r->time_ms, 3) : std::string("n/a")) + " |";
    }
    const MicroRecord* best = c.best_baseline();
    const MicroRecord* dcp = c.find("dcp");
    md += " " + (best ? best->strategy : std::string("n/a")) + " | " +
          ratio_text(c.speedup("dcp", best)) + " | " + ratio_text(c.speedup("dcp-pure", best)) +
          " | " + ratio_text(c.speedup("dcp", c.find("hybrid"))) + " | " +
          (dcp ? dcp->kept : std::string()) + " | " +
          ratio_text(paper_dcp_speedup(c.dataset, c.scale, c.mask, c.pass)) + " |\n";
  }
}

void traffic_table(const std::vector<MicroRecord>& records, const std::string& pass,
                   std::string& md) {
  md +=
      "| dataset | scale | mask | inter-node MB dcp | dcp-pure | best baseline | intra-node MB "
      "dcp | best baseline | imbalance dcp | dcp-pure | best baseline | plan ms dcp | "
      "dcp-pure | best baseline |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  const auto mb = [](const MicroRecord* r, double MicroRecord::*field) {
    return r ? format_fixed(r->*field / 1e6, 1) : std::string("n/a");
  };
  const auto value = [](const MicroRecord* r, double MicroRecord::*field, int decimals) {
    return r ? format_fixed(r->*field, decimals) : std::string("n/a");
  };
  for (const Config& c : configs(records, pass)) {
    const MicroRecord* dcp = c.find("dcp");
    const MicroRecord* pure = c.find("dcp-pure");
    const MicroRecord* best = c.best_baseline();
    md += "| " + c.dataset + " | " + format_scale(c.scale) + " | " + c.mask + " | " +
          mb(dcp, &MicroRecord::bytes_inter_node) + " | " +
          mb(pure, &MicroRecord::bytes_inter_node) + " | " +
          mb(best, &MicroRecord::bytes_inter_node) + " (" + (best ? best->strategy : "") + ") | " +
          mb(dcp, &MicroRecord::bytes_intra_node) + " | " +
          mb(best, &MicroRecord::bytes_intra_node) + " | " +
          value(dcp, &MicroRecord::imbalance_compute, 2) + " | " +
          value(pure, &MicroRecord::imbalance_compute, 2) + " | " +
          value(best, &MicroRecord::imbalance_compute, 2) + " | " +
          value(dcp, &MicroRecord::plan_ms, 0) + " | " + value(pure, &MicroRecord::plan_ms, 0) +
          " | " + value(best, &MicroRecord::plan_ms, 0) + " |\n";
  }
}

void targets(const std::vector<MicroRecord>& records, std::string& md) {
  md += "\n## Targets\n\n";
  for (const std::string pass : {"forward", "backward"}) {
    int at_least = 0, total = 0;
    double worst = 1e300;
    std::string worst_config;
    for (const Config& c : configs(records, pass)) {
      const auto s = c.speedup("dcp", c.best_baseline());
      if (!s) continue;
      ++total;
      at_least += *s >= 1.0 - 1e-12;
      if (*s < worst) {
        worst = *s;
        worst_config = c.dataset + " " + format_scale(c.scale) + " " + c.mask;
      }
    }
    md += "- " + pass + ": dcp at least as fast as the best baseline on " +
          std::to_string(at_least) + " of " + std::to_string(total) +
          " configurations (lowest speedup " + format_fixed(worst, 2) + "× on " + worst_config +
          ").\n";
  }
  for (const Config& c : configs(records, "forward")) {
    if (c.dataset == "ldc" && c.scale == 0.5 && c.mask == "causal") {
      md += "- ldc causal forward at x0.5 (target ≥ 2.4× over the best baseline): " +
            ratio_text(c.speedup("dcp", c.best_baseline())) + ".\n";
    }
  }
  for (const std::string pass : {"forward", "backward"}) {
    double lowest = 1e300;
    std::string where;
    for (const Config& c : configs(records, pass)) {
      if (c.mask == "causal") continue;
      const auto s = c.speedup("dcp", c.find("hybrid"));
      if (s && *s < lowest) {
        lowest = *s;
        where = c.dataset + " " + format_scale(c.scale) + " " + c.mask;
      }
    }
    if (lowest < 1e300) {
      md += "- sparse masks, " + pass + " (target ≥ 3× over hybrid): lowest " +
            format_fixed(lowest, 2) + "× (" + where + ").\n";
    }
  }
}

// The planner's schedule estimate against the simulation of the same plans, per strategy and
// pass: where the two models of one schedule disagree (docs/scheduling.md says why).
void estimate_table(const std::vector<MicroRecord>& records, std::string& md) {
  std::map<std::pair<std::string, std::string>, std::vector<double>> ratios;
  std::vector<std::string> order;
  for (const MicroRecord& r : records) {
    if (!r.feasible || r.time_ms <= 0) continue;
    if (std::find(order.begin(), order.end(), r.strategy) == order.end()) {
      order.push_back(r.strategy);
    }
    ratios[{r.strategy, r.pass}].push_back(r.estimate_ms / r.time_ms);
  }
  md +=
      "\n## The schedule estimate against the simulation\n\n"
      "The planner chooses dcp's stage count and screens static strategies with its schedule "
      "estimate (`estimate()`, schedule.h); the times above are the event simulator's. Estimate "
      "/ simulated, over the configurations (means of their batches):\n\n"
      "| strategy | forward median | forward min–max | backward median | backward min–max |\n"
      "|---|---|---|---|---|\n";
  for (const std::string& strategy : order) {
    md += "| " + strategy;
    for (const std::string pass : {"forward", "backward"}) {
      const auto it = ratios.find({strategy, pass});
      if (it == ratios.end() || it->second.empty()) {
        md += " | — | —";
        continue;
      }
      const auto [lo, hi] = std::minmax_element(it->second.begin(), it->second.end());
      md += " | " + format_fixed(median_of(it->second), 2) + " | " + format_fixed(*lo, 2) + "–" +
            format_fixed(*hi, 2);
    }
    md += " |\n";
  }
  md += "\n";
}

}  // namespace

std::string micro_markdown(const MicroOptions& options, const std::vector<MicroRecord>& records,
                           const std::string& command) {
  const ClusterSpec& cluster = options.cluster;
  std::string md = "# Attention micro-benchmark (simulated)\n\n";
  md += "Written by `" + command + "`.\n\n";
  md += "Setup: cluster `" + cluster.name + "` (" + std::to_string(cluster.shape.nodes) +
        " nodes × " + std::to_string(cluster.shape.devices_per_node) + " devices), " +
        std::to_string(options.tokens) +
        "-token batches packed from the dataset's lengths × the "
        "scale, " +
        std::to_string(options.shape.q_heads) + " q heads, " +
        std::to_string(options.shape.kv_heads) + " kv heads, head dim " +
        std::to_string(options.shape.head_dim) + ", " +
        std::string(to_string(options.shape.dtype)) + ", " + std::to_string(options.batches) +
        " batches per configuration (seed " + std::to_string(options.seed) +
        "). Times are the event simulator's (docs/simulator.md), "
        "means over the batches, in ms.\n\n";
  md +=
      "`dcp` is the plan dcp keeps: it simulates its own plan and every static plan before "
      "executing and keeps the fastest (forward plus backward), so under the cost model it is "
      "never slower than a static strategy; the `dcp kept` column counts which plan was kept. "
      "`dcp-pure` is dcp's own placement always, so the planner's own quality stays visible. "
      "Baselines: ring, zigzag, ulysses (n/a when the q heads do not cover a group's devices), "
      "hybrid (a2a inside a node + zigzag ring across nodes), te (TransformerEngine's a2a+p2p: "
      "a2a over head groups of as many devices as kv heads + zigzag ring across them) and "
      "loongtrain (LoongTrain's double ring: te's head groups, an inner ring of W head groups "
      "and an outer ring across the inner rings; per batch the fastest W of the powers of two "
      "below the ring, as the DCP paper reported LoongTrain's best: every W's layout is ranked "
      "by its schedule estimate and those within 5 % of the best estimate are simulated, the "
      "planning time covering all of it). dcp plans its own placement at blocks of 1024, 2048 and "
      "4096 tokens and, where one of at most 8 sequences holds half the batch's tokens or there "
      "are at most 4 under a dense mask such as causal, also runs its Programs "
      "on the hybrid and loongtrain layouts (kv kept for the backward pass, partials reduced its "
      "way; docs/block_model.md), and keeps the fastest. " +
      data_parallel_text(options.static_data_parallel) + "\n\n";
  md +=
      "![forward speedup](micro_bench_forward.svg)\n![backward "
      "speedup](micro_bench_backward.svg)\n\n";
  md +=
      "The last column is the DCP paper's **measured** speed-up of its DCP over the fastest "
      "baseline it measured on the same configuration (causal: ring, zigzag, LoongTrain, "
      "TransformerEngine; sparse masks: TransformerEngine alone, which computes every tile of a "
      "custom mask), from its reference figures (docs/paper_bench.md), beside dcp's simulated "
      "speed-ups.\n\n";
  for (const std::string pass : {"forward", "backward"}) {
    md += "## " + std::string(pass == "forward" ? "Forward" : "Backward") +
          ": simulated time (ms) and speedup\n\n";
    time_table(options, records, pass, md);
    md += "\n";
  }
  for (const std::string pass : {"forward", "backward"}) {
    md += "## " + std::string(pass == "forward" ? "Forward" : "Backward") +
          ": bytes moved, compute imbalance and planning time\n\n";
    traffic_table(records, pass, md);
    md += "\n";
  }
  targets(records, md);
  estimate_table(records, md);
  return md;
}

std::string micro_svg(const MicroOptions& options, const std::vector<MicroRecord>& records,
                      const std::string& pass) {
  const std::vector<Config> all = configs(records, pass);
  const std::size_t scales = std::max<std::size_t>(1, options.scales.size());
  const std::size_t groups = (all.size() + scales - 1) / scales;
  double top = 2;
  for (const Config& c : all) {
    for (const char* s : {"dcp", "dcp-pure"}) {
      if (const auto v = c.speedup(s, c.best_baseline())) top = std::max(top, *v);
    }
  }
  const double log_top = std::ceil(std::log2(top));
  const double log_bottom = -1;  // 0.5x
  const double left = 60, right = 20, plot_top = 50, height = 300, bar = 14, gap = 24;
  const double width =
      left + right + static_cast<double>(groups) * (static_cast<double>(scales) * bar + gap);
  const auto y_of = [&](double value) {
    const double l = std::clamp(std::log2(value), log_bottom, log_top);
    return plot_top + height * (log_top - l) / (log_top - log_bottom);
  };
  const char* colors[] = {"#9ecae1", "#4292c6", "#2171b5", "#08306b", "#6baed6", "#084594"};
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + format_fixed(width, 0) +
                    "\" height=\"" + format_fixed(plot_top + height + 90, 0) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + format_fixed(left, 0) + "\" y=\"20\" font-size=\"14\">" + pass +
         ": dcp's speedup over the best baseline (bars; black tick: dcp-pure), simulated on " +
         options.cluster.name + "</text>\n";
  for (double l = log_bottom; l <= log_top; l += 1) {
    const double y = y_of(std::exp2(l));
    svg += "<line x1=\"" + format_fixed(left, 0) + "\" x2=\"" + format_fixed(width - right, 0) +
           "\" y1=\"" + format_fixed(y, 1) + "\" y2=\"" + format_fixed(y, 1) + "\" stroke=\"" +
           (l == 0 ? "#d62728" : "#dddddd") + "\"/>\n";
    svg += "<text x=\"" + format_fixed(left - 6, 0) + "\" y=\"" + format_fixed(y + 4, 1) +
           "\" text-anchor=\"end\">" + format_fixed(std::exp2(l), l < 0 ? 1 : 0) + "×</text>\n";
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Config& c = all[i];
    const std::size_t group = i / scales, within = i % scales;
    const double x = left + gap / 2 +
                     static_cast<double>(group) * (static_cast<double>(scales) * bar + gap) +
                     static_cast<double>(within) * bar;
    if (const auto v = c.speedup("dcp", c.best_baseline())) {
      const double y = y_of(*v), base = y_of(1);
      svg += "<rect x=\"" + format_fixed(x, 1) + "\" y=\"" + format_fixed(std::min(y, base), 1) +
             "\" width=\"" + format_fixed(bar - 2, 1) + "\" height=\"" +
             format_fixed(std::abs(base - y), 1) + "\" fill=\"" + colors[within % 6] +
             "\"><title>" + c.dataset + " " + format_scale(c.scale) + " " + c.mask + ": " +
             format_fixed(*v, 2) + "×</title></rect>\n";
    }
    if (const auto v = c.speedup("dcp-pure", c.best_baseline())) {
      const double y = y_of(*v);
      svg += "<line x1=\"" + format_fixed(x, 1) + "\" x2=\"" + format_fixed(x + bar - 2, 1) +
             "\" y1=\"" + format_fixed(y, 1) + "\" y2=\"" + format_fixed(y, 1) +
             "\" stroke=\"black\" stroke-width=\"2\"/>\n";
    }
    if (within == 0) {
      const double cx = x + static_cast<double>(scales) * bar / 2;
      svg += "<text x=\"" + format_fixed(cx, 1) + "\" y=\"" +
             format_fixed(plot_top + height + 16, 1) + "\" text-anchor=\"middle\">" + c.dataset +
             "</text>\n";
      svg += "<text x=\"" + format_fixed(cx, 1) + "\" y=\"" +
             format_fixed(plot_top + height + 30, 1) + "\" text-anchor=\"middle\">" + c.mask +
             "</text>\n";
    }
  }
  for (std::size_t s = 0; s < options.scales.size(); ++s) {
    const double x = left + static_cast<double>(s) * 90;
    const double y = plot_top + height + 56;
    svg += "<rect x=\"" + format_fixed(x, 0) + "\" y=\"" + format_fixed(y - 10, 0) +
           "\" width=\"12\" height=\"12\" fill=\"" + colors[s % 6] + "\"/>\n";
    svg += "<text x=\"" + format_fixed(x + 16, 0) + "\" y=\"" + format_fixed(y, 0) + "\">lengths " +
           format_scale(options.scales[s]) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace dcp::suites
