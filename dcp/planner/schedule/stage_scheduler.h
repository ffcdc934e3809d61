// SPDX-License-Identifier: Apache-2.0
// dcp's scheduler: assigns every work unit a compute stage and every input a transfer, so that the
// transfers of stage s + 1 overlap the compute of stage s within each link's budget.
#pragma once

#include <cstdint>
#include <optional>

#include "dcp/planner/schedule/kept_values.h"
#include "dcp/planner/schedule/schedule.h"

namespace dcp {

// Whether a budgeted stage's compute per device is capped (stage_scheduler.cc says why).
enum class StageBalance : std::uint8_t {
  kChoose,    // schedule both ways and keep the lower estimate
  kUncapped,  // devices fill a stage as far as the launch's budget allows
  kCapped,    // at most 1/S of the largest device's compute after stage 0 per device and stage
};

struct ScheduleOptions {
  // Fetch launches S: stages 1..S fetch their inputs while the previous stage computes (an input
  // relayed inside a node may add one more stage). 0: the S in [1, max_fetch_launches] with the
  // lowest estimated time (searched up to kStagesPastKept past the kept S).
  std::int32_t fetch_launches = 0;
  std::int32_t max_fetch_launches = 8;
  StageBalance balance = StageBalance::kChoose;
  // Backward: also try the kept schedule with own_outputs_last (below); structured candidates:
  // try it in both passes (build_structured_variants).
  bool own_outputs_last = true;
  // Structured candidates' backward pass, where its inputs all come from their owners (kv kept):
  // how many stages each of the layout's stages is cut into. 0: chosen
  // (build_structured_variants, then build_structured).
  std::int32_t structured_stage_parts = 0;
};

// A schedule that the estimate finds faster replaces another only where its estimate is below
// this share of the other's: smaller gains are noise in the model.
inline constexpr double kEstimateGainShare = 0.995;

// Choosing S, the search stops once this many S past the kept one have not replaced it: the
// estimate falls with S while more stages hide more transfers and rises after, with noise of a
// few stages (docs/scheduling.md: no plan of the micro-benchmark or the kinds suite changed).
inline constexpr std::int32_t kStagesPastKept = 4;

// Throws InvalidInput naming the field for S < 0, max < 1, S > 64, or structured stage parts
// outside [0, 64].
void validate(const ScheduleOptions& options);

struct ScheduledPass {
  PassSchedule schedule;
  ScheduleEstimate estimate;
  std::int32_t fetch_launches = 0;  // the S used
  bool balanced = false;            // whether each stage's compute per device was capped
  bool own_outputs_last = false;    // backward: whether own_outputs_last's schedule was kept
};

// `schedule` with each device's work units of stage `from` whose outputs (o; dq and dkv) it owns
// itself moved into a new last stage, on every device that sends partial outputs (has a unit whose
// output another device owns); nothing if no unit moves. No transfer changes, its partial
// outputs' included (add_partial_transfers gives the same ones: a moved unit contributes only to
// its own device's values, which that device does not send), but the partials those devices
// finish in their last stage then travel while the moved units compute, instead of after all of
// them. dcp's backward schedule moves stage 0, which holds most of a device's work with kv kept
// from the forward pass. (In dcp's forward schedule every stage-0 unit's output is its device's
// own; moving them all would leave launch 0 exposed, and on the 160 a100-p4de micro-benchmark
// batches the estimate never chose it there.) A structured layout's passes move their last stage
// (build_structured_variants): there, in the forward pass, a device finishes the outputs of the q
// it received by all-to-all.
std::optional<PassSchedule> own_outputs_last(const Workload& workload, const Placement& placement,
                                             const PassSchedule& schedule, std::int32_t from = 0);
// `schedule` and its `estimate` replaced by own_outputs_last's from stage `from` where that lowers
// the estimate by more than 0.5 %; whether it did.
bool keep_own_outputs_last_if_faster(const Workload& workload, const Placement& placement,
                                     const ClusterSpec& cluster, const PlanHeader& header,
                                     PassSchedule& schedule, ScheduleEstimate& estimate,
                                     std::int32_t from);

// Stage 0 runs every work unit whose inputs are on its device. Then, for each launch l, devices
// take turns (least compute in stage l + 1 first) pulling their heaviest pending work unit into
// stage l + 1 if the transfers its missing inputs need fit every link's budget for launch l: the
// sender's and receiver's intra-node link, or the network interfaces the two devices use (each at
// its share of the node's bandwidth, ClusterSpec::nic_of). The budget is the
// time of stage l's compute, or the pass's unavoidable communication time spread over S launches
// if that is longer; launch S - 1 and any later one are unbudgeted, so every unit is placed. An
// input from another node crosses the network once per node: to the first device of that node
// that needs it, which relays it to the others of its node from the next launch on. In the
// backward pass, the kv values `kept` (if given) lists for a device are on it from stage 0, as
// its own are. Under StageBalance::kChoose each S runs twice, as above and capped: a device's
// compute in a budgeted stage at most 1/S of the largest device's compute after stage 0 (one unit
// at least). The lowest estimate wins, a later candidate by more than 0.5 %. In the backward pass
// the schedule kept is then tried with own_outputs_last, kept if that lowers the estimate by more
// than 0.5 % (trying it on every candidate instead gave the same step times on the micro-benchmark,
// within 0.04 %, for 16 estimates more).
ScheduledPass schedule_pass(const Workload& workload, const Placement& placement,
                            const ClusterSpec& cluster, const PlanHeader& header, Pass pass,
                            const ScheduleOptions& options, const KeptKv* kept = nullptr);

}  // namespace dcp
