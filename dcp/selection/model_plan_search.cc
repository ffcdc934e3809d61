// SPDX-License-Identifier: Apache-2.0
// dcp's search for the plan of a model with several attention kinds.
#include "dcp/selection/model_plan_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/planner/placement/kind_placement.h"
#include "dcp/planner/schedule/schedule.h"
#include "dcp/selection/plan_search.h"
#include "dcp/selection/plan_search_internal.h"
#include "dcp/sim/model_simulation.h"

namespace dcp {
namespace {

std::int32_t total_layers(const std::vector<KindWorkload>& kinds) {
  std::int32_t layers = 0;
  for (const KindWorkload& kind : kinds) layers += kind.layers;
  return layers;
}

// The rest of every layer on the busiest device of the kinds' one token placement.
double token_seconds_of(const BuiltModelPlan& built, const PlanOptions& options) {
  std::int32_t layers = 0;
  for (const KindPlan& kind : built.plan.kinds) layers += kind.layers;
  const BuiltPlan& first = built.kinds.front();
  return layers * token_seconds_of(first.workload, first.placement, options);
}

// The candidate's step under the cluster: forward and backward summed over kinds x layers, and
// the rest of every layer.
PlanCandidate simulated(const BuiltModelPlan& built, std::string strategy,
                        const PlanOptions& options) {
  const sim::ModelSimulation simulation = sim::simulate(built.plan, options.cluster);
  PlanCandidate candidate;
  candidate.strategy = std::move(strategy);
  for (const sim::KindSimulation& kind : simulation.kinds) {
    candidate.forward_seconds += kind.layers * kind.passes.forward.seconds;
    candidate.backward_seconds += kind.layers * kind.passes.backward.seconds;
  }
  candidate.token_seconds = token_seconds_of(built, options);
  candidate.estimate_seconds = candidate.seconds();
  return candidate;
}

// One kind's simulated pass times.
struct PassSeconds {
  double forward = 0;
  double backward = 0;
};

// The same for kinds whose passes are simulated already, one per kind in order.
PlanCandidate with_times(const BuiltModelPlan& built, std::string strategy,
                         const std::vector<PassSeconds>& times, const PlanOptions& options) {
  PlanCandidate candidate;
  candidate.strategy = std::move(strategy);
  for (std::size_t k = 0; k < times.size(); ++k) {
    const std::int32_t layers = built.plan.kinds[k].layers;
    candidate.forward_seconds += layers * times[k].forward;
    candidate.backward_seconds += layers * times[k].backward;
  }
  candidate.token_seconds = token_seconds_of(built, options);
  candidate.estimate_seconds = candidate.seconds();
  return candidate;
}

BuiltModelPlan one_kind(const KindWorkload& kind, const PlanOptions& options) {
  BuiltPlan built = build_plan(kind.workload, options);
  BuiltModelPlan result;
  result.plan.kinds.push_back({kind.name, kind.layers, built.plan});
  result.placement_within_bounds = built.placement_within_bounds;
  result.timings = built.timings;
  result.candidates = built.selection.candidates;
  result.kept = built.selection.kept;
  result.kinds.push_back(std::move(built));
  return result;
}

// Whether every sequence is cut into blocks of one size (a partition's blocks, not a static
// strategy's or a structured layout's chunks): what the other kinds can be cut as.
bool cut_uniformly(const Workload& workload) {
  const BlockLayout& blocks = workload.blocks();
  for (SeqIndex seq = 0; seq < workload.batch().size(); ++seq) {
    if (blocks.block(blocks.block_id(seq, 0)).tokens !=
        std::min(blocks.block_size(), workload.batch().length(seq))) {
      return false;
    }
  }
  return true;
}

void add_timings(PlanTimings& total, const PlanTimings& part) {
  total.partition_ms += part.partition_ms;
  total.schedule_forward_ms += part.schedule_forward_ms;
  total.schedule_backward_ms += part.schedule_backward_ms;
  total.compile_ms += part.compile_ms;
}

// The work placements on_base tries for each other kind (schedule_tries).
enum class OtherKinds { kFollow, kOnQBlocks, kBalance, kBalanceOrFollow };

PassSeconds seconds_of(const sim::PlanSimulation& simulation) {
  return {simulation.forward.seconds, simulation.backward.seconds};
}
PassSeconds seconds_of(const OwnCandidate& simulated) {
  return {simulated.forward_seconds, simulated.backward_seconds};
}

// Another kind's work placements on a base's token blocks, each scheduled; compile_fastest
// compiles and simulates them.
struct ScheduledTries {
  std::vector<std::optional<ScheduledPlan>> plans;  // in the order tried; none: built later
  std::vector<double> estimates;                    // forward plus backward schedule estimate
  double fastest_estimate() const {
    double fastest = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < plans.size(); ++i) {
      if (plans[i]) fastest = std::min(fastest, estimates[i]);
    }
    return fastest;
  }
};

// The work placements on_base tries for `workload` (another kind, cut on base's blocks), each
// scheduled: the followed placement (follow_placement); every work unit on its q block's device
// (on_q_blocks); that and the followed placement held to the kind's compute caps
// (balanced_on_tokens); or all three.
ScheduledTries schedule_tries(const BuiltPlan& base, const Workload& workload,
                              const PlanOptions& own, OtherKinds tries) {
  const bool balance = tries == OtherKinds::kBalance || tries == OtherKinds::kBalanceOrFollow;
  Placement follow = follow_placement(base.workload, base.placement, workload);
  // The placements tried, in order; the fastest is kept, the later on a tie.
  struct Tried {
    Placement placement;
    bool within_bounds = true;
    double partition_ms = 0;
    bool again_later = false;
  };
  std::vector<Tried> placements;
  if (balance) {
    PlacementResult balanced =
        balanced_on_tokens(workload, follow, placement_options_of(own, workload));
    placements.push_back(
        {std::move(balanced.placement), balanced.within_bounds, balanced.timings.total_ms});
  }
  // Every work unit on its q block's device: where the other kind's work units were moved for
  // its own balance, following them moves q blocks and partial outputs this kind's even work
  // does not need moved (where nothing was moved the two are one placement).
  std::optional<Placement> owned;
  if (tries != OtherKinds::kFollow) {
    owned.emplace(on_q_blocks(follow, workload));
    if (owned->work_unit_device == follow.work_unit_device) owned.reset();
  }
  if (!owned || tries == OtherKinds::kBalanceOrFollow) placements.push_back({std::move(follow)});
  if (owned) placements.push_back({std::move(*owned)});
  // A placement tried again later is built once, there (where the later wins a tie, as the same
  // plan built twice would): the balance can leave the followed or the q-block placement as it
  // was. The token blocks are the base's in all of them, so the work devices tell them apart.
  for (std::size_t a = 0; a < placements.size(); ++a) {
    for (std::size_t b = a + 1; b < placements.size(); ++b) {
      if (placements[a].placement.work_unit_device == placements[b].placement.work_unit_device) {
        placements[b] = std::move(placements[a]);
        placements[a].again_later = true;
        break;
      }
    }
  }
  ScheduledTries scheduled;
  scheduled.plans.resize(placements.size());
  scheduled.estimates.assign(placements.size(), 0);
  for (std::size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].again_later) continue;
    ScheduledPlan& plan = scheduled.plans[i].emplace(schedule_at_placement(
        workload, std::move(placements[i].placement), placements[i].within_bounds, own));
    plan.built.timings.partition_ms = placements[i].partition_ms;
    scheduled.estimates[i] =
        plan.built.forward.estimate.seconds + plan.built.backward.estimate.seconds;
  }
  return scheduled;
}

// The fastest simulated of the tries (the later on a tie), with its times. They are compiled and
// simulated in the order of their estimates, and one whose estimate is screen_factor times the
// fastest simulated so far is neither (it is slower: SearchOptions::screen_factor).
std::pair<BuiltPlan, PassSeconds> compile_fastest(ScheduledTries tries, const ClusterSpec& cluster,
                                                  double screen_factor) {
  const std::size_t count = tries.plans.size();
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < count; ++i) {
    if (tries.plans[i]) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return tries.estimates[a] < tries.estimates[b];
  });
  std::vector<std::optional<BuiltPlan>> compiled(count);
  std::vector<PassSeconds> simulated(count);
  const auto seconds = [&](std::size_t i) { return simulated[i].forward + simulated[i].backward; };
  double fastest = std::numeric_limits<double>::infinity();
  for (const std::size_t i : order) {
    if (tries.estimates[i] >= screen_factor * fastest) continue;
    compiled[i].emplace(compile_scheduled(std::move(*tries.plans[i])));
    simulated[i] = seconds_of(sim::simulate(compiled[i]->plan, cluster));
    fastest = std::min(fastest, seconds(i));
  }
  std::optional<std::size_t> kept;
  for (std::size_t i = 0; i < count; ++i) {
    if (compiled[i] && (!kept || seconds(i) <= seconds(*kept))) kept = i;
  }
  return {std::move(*compiled[*kept]), simulated[*kept]};
}

// Forward plus backward compute per device, the mean over the cluster's devices, as schedule
// estimates price it (unit_seconds).
double mean_compute_seconds(const Workload& workload, const PlanOptions& options) {
  double total = 0;
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    total += unit_seconds(workload, options.cluster, Pass::kForward, unit) +
             unit_seconds(workload, options.cluster, Pass::kBackward, unit);
  }
  return total / options.cluster.shape.devices();
}

// build_on_base; with `times`, each kind's simulated passes (the simulations that chose its
// plan, so that the search need not simulate them again), the base's `base_times` where its
// search simulated it (a simulation is deterministic: the same plan gives the same times). With
// those and a `screen`, nothing where the step estimated from the base's times and the other
// kinds' fastest schedule estimates is at least screen->above (then it is slower than the step
// that set it: SearchOptions::screen_factor).
struct StepScreen {
  double above = std::numeric_limits<double>::infinity();
  double estimate = 0;   // the step estimated
  bool bounded = false;  // a bound of that estimate, from before scheduling, ruled it out
};
std::optional<BuiltModelPlan> on_base(const BuiltPlan& base, std::size_t base_kind,
                                      const std::vector<KindWorkload>& kinds,
                                      const PlanOptions& options, OtherKinds tries,
                                      std::vector<PassSeconds>* times,
                                      std::optional<PassSeconds> base_times = std::nullopt,
                                      StepScreen* screen = nullptr) {
  const auto start = Clock::now();
  BuiltModelPlan result;
  const std::string& strategy = base.plan.header.strategy;
  const std::string prefix = "dcp/";
  const bool static_base = strategy.rfind(prefix, 0) == 0;
  const std::vector<KindWorkload> cut = static_base ? kinds : on_blocks_of(base.workload, kinds);
  PlanOptions own = options;
  own.strategy = Strategy::kDcpPure;
  own.partial_dtype = base.plan.header.partial_dtype;
  const bool screened = times != nullptr && base_times && !static_base && screen != nullptr;
  // The step from the base's times and, for every other kind, `other(k)`, with the rest of every
  // layer on the base's token placement.
  const auto step = [&](const auto& other) {
    double seconds = total_layers(kinds) * token_seconds_of(base.workload, base.placement, options);
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      seconds += kinds[k].layers *
                 (k == base_kind ? base_times->forward + base_times->backward : other(k));
    }
    return seconds;
  };
  if (screened) {
    // First from the other kinds' mean compute per device, which no schedule estimate is below
    // (a device's stages add up to its compute): where that screens, nothing is scheduled.
    screen->estimate =
        step([&](std::size_t k) { return mean_compute_seconds(cut[k].workload, options); });
    screen->bounded = true;
    if (screen->estimate >= screen->above) return std::nullopt;
    screen->bounded = false;
  }
  std::vector<std::optional<ScheduledTries>> scheduled(kinds.size());
  std::vector<std::optional<BuiltPlan>> built(kinds.size());
  std::vector<std::optional<PassSeconds>> known(kinds.size());
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    if (k == base_kind) {
      built[k].emplace(base);
      known[k] = base_times;
    } else if (static_base) {
      // A static layout ignores the mask: it runs every kind as it is.
      PlanOptions static_options = options;
      static_options.strategy = parse_strategy(strategy.substr(prefix.size()));
      built[k].emplace(build_one_plan(kinds[k].workload, static_options));
      built[k]->plan.header.strategy = strategy;
    } else {
      scheduled[k].emplace(schedule_tries(base, cut[k].workload, own, tries));
    }
  }
  if (screened) {
    screen->estimate = step([&](std::size_t k) { return scheduled[k]->fastest_estimate(); });
    if (screen->estimate >= screen->above) return std::nullopt;
  }
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    if (scheduled[k]) {
      auto [plan, seconds] =
          compile_fastest(std::move(*scheduled[k]), options.cluster, options.search.screen_factor);
      plan.plan.header.strategy = strategy;
      built[k].emplace(std::move(plan));
      known[k] = seconds;
    }
    if (times != nullptr) {
      times->push_back(known[k] ? *known[k]
                                : seconds_of(sim::simulate(built[k]->plan, options.cluster)));
    }
    result.kinds.push_back(std::move(*built[k]));
  }
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    if (k != base_kind) add_timings(result.timings, result.kinds[k].timings);
    result.placement_within_bounds =
        result.placement_within_bounds && result.kinds[k].placement_within_bounds;
    result.plan.kinds.push_back({kinds[k].name, kinds[k].layers, result.kinds[k].plan});
  }
  result.timings.total_ms = ms_since(start);
  return result;
}

// The size of `sizes` nearest, in ratio, to the keys a query of `workload` reads on average (the
// finer on a tie): a block about as long as a window keeps each q block's keys on it and the block
// before it, and finer blocks add tiles to place, schedule and compile.
TokenCount reads_block_size(const Workload& workload, const std::vector<TokenCount>& sizes) {
  const double reads = std::max(1.0, static_cast<double>(workload.unmasked_pairs()) /
                                         static_cast<double>(workload.batch().total_tokens()));
  const auto gap = [&](TokenCount size) {
    return std::abs(std::log(static_cast<double>(size) / reads));
  };
  TokenCount best = sizes.front();
  for (const TokenCount size : sizes) {
    if (gap(size) < gap(best) || (gap(size) == gap(best) && size < best)) best = size;
  }
  return best;
}

}  // namespace

std::size_t densest_kind(const std::vector<KindWorkload>& kinds) {
  std::size_t densest = 0;
  for (std::size_t k = 1; k < kinds.size(); ++k) {
    if (kinds[k].workload.unmasked_pairs() > kinds[densest].workload.unmasked_pairs()) densest = k;
  }
  return densest;
}

BuiltModelPlan build_on_base(const BuiltPlan& base, std::size_t base_kind,
                             const std::vector<KindWorkload>& kinds, const PlanOptions& options,
                             bool balance) {
  return *on_base(base, base_kind, kinds, options,
                  balance ? OtherKinds::kBalanceOrFollow : OtherKinds::kFollow, nullptr);
}

namespace {

// What a search simulated a plan of one kind at, if it did.
std::optional<PassSeconds> known_times(const BuiltPlan& plan) {
  const OwnCandidate* kept = plan_search::kept_own(plan);
  if (kept == nullptr) return std::nullopt;
  return seconds_of(*kept);
}

// build_model_plan's search for kinds of dcp's plans: the candidates it considered so far and the
// fastest of them, which it keeps.
class ModelSearch {
 public:
  ModelSearch(const std::vector<KindWorkload>& kinds, const PlanOptions& options)
      : kinds_(kinds),
        options_(options),
        anchor_(densest_kind(kinds)),
        own_(options),
        own_name_(to_string(options.strategy)) {
    own_.strategy = Strategy::kDcpPure;
  }

  // 1. The densest kind planned alone, with dcp's own search (the static strategies come in 4, for
  // every kind); every other kind on its token placement. 2. Its runners-up too.
  void on_densest_kind() {
    std::vector<plan_search::SimulatedPlan> runners_up;
    const BuiltPlan base = plan_search::build_own(kinds_[anchor_].workload, own_, &runners_up);
    // The followed placement too, so that dcp is never slower than the densest kind's plan run
    // for every layer. Elsewhere it is not tried: of the micro-benchmark's hybrid-attention
    // batches, it was never the kept step's where the q-block placement differed from it.
    consider_on(base, known_times(base), anchor_, OtherKinds::kBalanceOrFollow,
                own_name_ + " (on " + kinds_[anchor_].name + "'s placement)");
    // 2. The densest kind's fastest partition at each other block size its search tried, every
    // other kind on it: its own fastest plan may place tokens where the other kinds' work costs
    // more than it gains (a ring layout of one long sequence, good for its full layers, spreads
    // each window over several devices; one contiguous block per device keeps it on one or two).
    // The others on their q blocks only: held to their compute caps, they were never the faster
    // here on the micro-benchmark's hybrid-attention batches (they are in 3, on another kind's
    // partition).
    for (const plan_search::SimulatedPlan& runner_up : runners_up) {
      consider_on(runner_up.plan, seconds_of(runner_up.simulated), anchor_, OtherKinds::kOnQBlocks,
                  own_name_ + " (on " + kinds_[anchor_].name + "'s placement, block " +
                      std::to_string(runner_up.plan.workload.blocks().block_size()) + ")");
    }
  }

  // 3. Every other kind planned alone, the rest on its token placement: what a placement per kind
  // gives that kind's layers, without moving tokens. At the block size nearest to what its
  // queries read (reads_block_size; a narrow window balances on finer blocks than a full mask,
  // and the others' placements at the sizes of the sweep are 1 and 2), of those the densest kind's
  // search tried (searched_block_sizes): the densest kind's layers run on these blocks too, and
  // where its search drops the sizes below kDenseMinBlockSize (a few long sequences, the longest
  // dense: plan_search.h), it has the most work units to schedule and compile at them and its
  // plan was never the fastest there. Its partition at the default and the tighter balance, not
  // its whole search: on the micro-benchmark's hybrid-attention batches, its search kept nothing
  // faster here and cost 0.1 to 0.2 x a one-mask plan more.
  void on_other_kinds() {
    const std::vector<TokenCount> anchor_sizes =
        own_.search.block_sizes.empty()
            ? std::vector<TokenCount>{}
            : plan_search::searched_block_sizes(kinds_[anchor_].workload, own_);
    for (std::size_t k = 0; k < kinds_.size(); ++k) {
      if (k == anchor_) continue;
      PlanOptions alone = own_;
      if (!anchor_sizes.empty()) {
        alone.search.block_sizes = {reads_block_size(kinds_[k].workload, anchor_sizes)};
        alone.search.structured_layouts = false;
      }
      std::optional<BuiltPlan> placed;
      try {
        placed.emplace(build_plan(kinds_[k].workload, alone));
      } catch (const InvalidInput&) {
        // Too many blocks at that size (the tile limits): its search at the other sizes the
        // densest kind's search tried finds one that fits.
        alone.search.block_sizes = anchor_sizes;
        placed.emplace(build_plan(kinds_[k].workload, alone));
      }
      if (!cut_uniformly(placed->workload)) continue;
      consider_on(*placed, known_times(*placed), k, OtherKinds::kBalance,
                  own_name_ + " (on " + kinds_[k].name + "'s placement, block " +
                      std::to_string(placed->workload.blocks().block_size()) + ")");
    }
  }

  // 4. Every static strategy for every kind.
  void static_strategies() {
    for (const Strategy strategy : kStaticStrategies) {
      PlanOptions static_options = options_;
      static_options.strategy = strategy;
      const std::string name(to_string(strategy));
      PlanCandidate screened;
      screened.strategy = name;
      screened.simulated = false;
      std::optional<BuiltModelPlan> built;
      try {
        // Screened as a plan of one mask is (plan_search.h): a bound of each kind's estimate from
        // the strategy's structure, weighted by the kind's layers.
        double bound =
            total_layers(kinds_) * mean_token_seconds(kinds_.front().workload, static_options);
        for (const KindWorkload& kind : kinds_) {
          bound += kind.layers * static_plan_lower_bound(kind.workload, static_options);
        }
        if (bound >= options_.search.screen_factor * best_seconds_) {
          screened.bounded = true;
          screened.estimate_seconds = bound;
          candidates_.push_back(std::move(screened));
          continue;
        }
        built.emplace(build_one_model_plan(kinds_, static_options));
      } catch (const InvalidInput& e) {
        screened.feasible = false;
        screened.reason = e.what();
        candidates_.push_back(std::move(screened));
        continue;
      }
      PlanCandidate static_candidate = simulated(*built, name, static_options);
      if (static_candidate.seconds() < best_seconds_) {
        for (KindPlan& kind : built->plan.kinds) kind.plan.header.strategy = "dcp/" + name;
      }
      consider(std::move(*built), std::move(static_candidate));
    }
  }

  // The fastest plan considered, with every candidate.
  BuiltModelPlan kept(Clock::time_point start) && {
    best_->candidates = std::move(candidates_);
    best_->timings.total_ms = ms_since(start);
    return std::move(*best_);
  }

 private:
  void consider(BuiltModelPlan built, PlanCandidate candidate) {
    candidates_.push_back(candidate);
    if (!best_ || candidate.seconds() < best_seconds_) {
      best_seconds_ = candidate.seconds();
      best_ = std::move(built);
      best_->kept = candidate.strategy;
    }
  }

  // The other kinds on `placed` (a plan of kinds_[k]), considered under `name`.
  void consider_on(const BuiltPlan& placed, std::optional<PassSeconds> placed_times, std::size_t k,
                   OtherKinds tries, const std::string& name) {
    std::vector<PassSeconds> times;
    // Screened as a static strategy is: where the step estimated from the schedules is
    // screen_factor times the fastest simulated step so far, nothing is compiled.
    StepScreen screen;
    if (best_) screen.above = options_.search.screen_factor * best_seconds_;
    std::optional<BuiltModelPlan> built =
        on_base(placed, k, kinds_, options_, tries, &times, placed_times, &screen);
    if (!built) {
      PlanCandidate screened;
      screened.strategy = name;
      screened.simulated = false;
      screened.bounded = screen.bounded;
      screened.estimate_seconds = screen.estimate;
      candidates_.push_back(std::move(screened));
      return;
    }
    BuiltModelPlan& on_kind = *built;
    add_timings(on_kind.timings, placed.timings);
    for (KindPlan& kind : on_kind.plan.kinds) kind.plan.header.strategy = own_name_;
    for (BuiltPlan& kind : on_kind.kinds) kind.plan.header.strategy = own_name_;
    PlanCandidate candidate = with_times(on_kind, name, times, options_);
    consider(std::move(on_kind), std::move(candidate));
  }

  const std::vector<KindWorkload>& kinds_;
  const PlanOptions& options_;
  const std::size_t anchor_;
  PlanOptions own_;  // dcp's own plans (dcp-pure)
  const std::string own_name_;
  std::optional<BuiltModelPlan> best_;
  std::vector<PlanCandidate> candidates_;
  double best_seconds_ = 0;
};

}  // namespace

BuiltModelPlan build_model_plan(const std::vector<KindWorkload>& kinds,
                                const PlanOptions& options) {
  validate(options);
  if (kinds.empty()) throw InvalidInput("no attention kinds to plan");
  if (kinds.size() == 1) return one_kind(kinds.front(), options);
  if (!is_dcp(options.strategy)) return build_one_model_plan(kinds, options);
  const auto start = Clock::now();
  {
    std::vector<Workload> workloads;
    for (const KindWorkload& kind : kinds) workloads.push_back(kind.workload);
    check_same_blocks(workloads);
  }
  ModelSearch search(kinds, options);
  search.on_densest_kind();
  search.on_other_kinds();
  if (options.strategy == Strategy::kDcp) search.static_strategies();
  return std::move(search).kept(start);
}

}  // namespace dcp
