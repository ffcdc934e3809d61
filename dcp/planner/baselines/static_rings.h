// SPDX-License-Identifier: Apache-2.0
// The pass schedules of static strategies: head all-to-alls, kv around (double) rings inside a
// group of devices, and partial kv gradients back along the kv's path.
#pragma once

#include <cstdint>

#include "dcp/model/workload.h"

#include "dcp/planner/placement/placement.h"
#include "dcp/planner/schedule/schedule.h"

namespace dcp {

// How a static strategy uses its devices. `group_size` consecutive devices run a data-parallel
// group; inside a group, `head_degree` consecutive devices form a head group that splits the q
// heads (by all-to-all when `all_to_all`); the R = group_size / head_degree head groups are the
// positions of rings, one per local index in a head group. KV goes around a ring as a double ring:
// inner rings over `window` consecutive positions and an outer ring over the R / window windows
// (window = R: one ring).
//   ring, zigzag: a = 1, one ring of the group's devices, no all-to-all.
//   ulysses:      a = C, R = 1.
//   hybrid:       a = devices per node; te: a = head_degree(); both window = R.
//   loongtrain:   a as te, window the head groups per node.
struct RingLayout {
  std::int32_t group_size = 1;
  std::int32_t head_degree = 1;
  std::int32_t window = 1;
  bool all_to_all = false;

  std::int32_t ring_size() const { return group_size / head_degree; }
  // The first device of `device`'s group, its ring position, its index in its head group.
  DeviceId group_base(DeviceId device) const { return device - device % group_size; }
  std::int32_t position(DeviceId device) const { return device % group_size / head_degree; }
  std::int32_t head_local(DeviceId device) const { return device % head_degree; }
  DeviceId device(DeviceId base, std::int32_t position, std::int32_t local) const {
    return base + position * head_degree + local;
  }
  // The local index in a head group of q head block h of `head_blocks`: contiguous ranges, so that
  // with GQA a device reads as few kv heads as possible.
  std::int32_t head_local_of(HeadBlockIndex h, HeadBlockIndex head_blocks) const {
    return static_cast<std::int32_t>(std::int64_t{h} * head_degree / head_blocks);
  }
  // The stage in which kv first reaches its owner's ring (0, or 1 after an all-to-all).
  std::int32_t first_stage() const { return all_to_all ? 1 : 0; }

  // The ring position kv starting at position `start` visits t-th (t in [0, R)): round o = t / w
  // of the outer ring, step k = t % w of the inner ring.
  std::int32_t visit(std::int32_t start, std::int32_t t) const;
  // The t at which kv starting at `start` visits `position`.
  std::int32_t visit_index(std::int32_t start, std::int32_t position) const;
  // The hop that brings kv starting at `start` to its t-th position (t >= 1): where from, and in
  // which launch counted from the first ring launch. Inner hops go one position per launch; the
  // outer hop into round o leaves the owner's inner position of round o - 1 at launch (o - 1) w,
  // while that round's inner ring runs (or spread over its launches: spread_outer_hops).
  struct Hop {
    std::int32_t from = 0;
    std::int32_t launch = 0;
  };
  Hop hop(std::int32_t start, std::int32_t t) const;
  // Whether the hop into t-th position crosses from one window to the next (t % w == 0).
  bool outer_hop(std::int32_t t) const { return window < ring_size() && t % window == 0; }
};

// The pass schedule of a static strategy whose placement follows `layout`: work units run in the
// stage kv reaches them; with all_to_all, launch 0 moves every q value to the device of its head
// block in the owner's head group and every kv value to every device of that group whose heads
// read it. Backward, partial dK, dV follow their K, V's path and end at the owner; other partials
// go straight to their owner.
PassSchedule static_pass(const Workload& workload, const Placement& placement, Pass pass,
                         const RingLayout& layout);

// `schedule` (static_pass's on `layout`, a double ring) with its outer hops spread over their
// rounds' launches: each head group's blocks, which travel the rings together, largest first,
// each in the launch of the round with the fewest tokens so far (the first on a tie), so the
// launches carry about equal shares of the hop.
// LoongTrain runs its outer ring on a communicator of its own, beside the inner ring's, one
// message per hop. A Program has one communication stream, whose launches complete in order, so
// no one schedule of it is LoongTrain's: the whole outer hop in the round's first launch
// (static_pass) holds that launch's inner step until it arrives; spread, each launch waits only
// for its share, but the smaller messages reach a lower share of their link's rate. Each is at
// least as slow as LoongTrain's two streams, so a plan keeps, per pass, whichever its estimate
// finds faster (static_layout). Nothing changes unless 1 < window < ring.
PassSchedule spread_outer_hops(const Workload& workload, const Placement& placement,
                               const RingLayout& layout, PassSchedule schedule);

}  // namespace dcp
