// SPDX-License-Identifier: Apache-2.0
// The event simulator: compute streams advance independently until a Wait; transfers progress in
// time order with max-min fair sharing of link sides; a completed launch releases its Wait.
#include "dcp/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>

#include "dcp/core/error.h"

#include "dcp/program/plan_file/plan_file.h"
#include "dcp/sim/cost_model.h"
#include "dcp/sim/network.h"

namespace dcp::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
std::size_t at(T index) {
  return static_cast<std::size_t>(index);
}

// What released a launch: its last transfer, the launch before it (launches complete in order),
// or nothing (it carried nothing; its own Launch instruction).
struct LaunchCause {
  enum class Kind : std::uint8_t { kTransfer, kPrevious, kIssue };
  Kind kind = Kind::kIssue;
  std::int32_t transfer = -1;
};

struct LaunchState {
  std::int32_t instruction = 0;
  double issued = 0;
  std::int32_t open = 0;  // transfers not yet done
  double last_end = 0;
  std::int32_t last_transfer = -1;
  double done = kInf;
  LaunchCause cause;
};

struct DeviceState {
  const Program* program = nullptr;
  std::size_t pc = 0;
  double time = 0;
  bool blocked = false;
  std::vector<LaunchState> launches;  // issued so far
  std::size_t completed = 0;          // launches [0, completed) are complete
  std::size_t widened = 0;            // launches [0, widened) had their partials widened
  std::size_t dispatched = 0;         // instructions [0, dispatched) paid the executor's host time
  std::vector<std::int32_t> slot_tokens;
  std::vector<std::vector<bool>> converts;     // partial_conversions of the Program
  std::vector<double> mask_cost;               // per mask, NaN until first used
  std::size_t memory_run = std::variant_npos;  // opcode of the batched memory kernel running
  // Per compute event: whether a Wait was held by its launch (else by the stream).
  std::vector<bool> held_by_launch;
  std::vector<std::int32_t> wait_launch;
};

// A posted side of a transfer that waits for its other side.
struct Posted {
  std::int32_t launch = 0;
  std::int32_t instruction = 0;
  std::int64_t bytes = 0;
  std::int64_t message_bytes = 0;  // what the launch moves to (from) the same peer
  double time = 0;
  std::int32_t ordinal = 0;
};

class Simulation {
 public:
  Simulation(const PlanHeader& header, const std::vector<Program>& programs,
             const ClusterSpec& cluster, const ExecutorModel& executor)
      : header_(header),
        cost_(cluster, header),
        executor_(executor),
        shape_(cluster.shape),
        network_(cost_) {
    const auto devices = at(shape_.devices());
    devices_.resize(devices);
    result_.devices.resize(devices);
    result_.pass = programs.front().pass;
    for (std::size_t d = 0; d < devices; ++d) {
      DeviceState& state = devices_[d];
      state.program = &programs[d];
      state.slot_tokens.assign(programs[d].slots.size(), 0);
      state.converts = partial_conversions(header, programs[d]);
      state.mask_cost.assign(programs[d].masks.size(), std::nan(""));
      state.time = executor.sequence_overhead * header.sequences;  // the host's set-up first
    }
    sends_posted_.assign(devices * devices, 0);
    recvs_posted_.assign(devices * devices, 0);
    waiting_sends_.resize(devices * devices);
    waiting_recvs_.resize(devices * devices);
    scratch_message_bytes_.assign(2 * devices, 0);
    scratch_peer_seen_.assign(devices, 0);
  }

  PassSimulation run() {
    for (std::size_t d = 0; d < devices_.size(); ++d) advance(d);
    run_network();
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      const DeviceState& state = devices_[d];
      if (state.pc < state.program->instructions.size()) {
        const auto& wait = std::get<Wait>(state.program->instructions[state.pc]);
        throw InvalidInput(
            std::string(to_string(result_.pass)) + " pass: device " + std::to_string(d) +
            " waits forever on launch " + std::to_string(wait.launch) + " (instruction " +
            std::to_string(state.pc) + "): a transfer it carries has no matching post on its peer");
      }
    }
    for (const bool send : {true, false}) {
      const auto& waiting = send ? waiting_sends_ : waiting_recvs_;
      const auto first = std::find_if(waiting.begin(), waiting.end(),
                                      [](const std::deque<Posted>& q) { return !q.empty(); });
      if (first == waiting.end()) continue;
      const auto pair = static_cast<std::size_t>(first - waiting.begin());
      const std::pair<std::int32_t, std::int32_t> key{
          static_cast<std::int32_t>(pair / devices_.size()),
          static_cast<std::int32_t>(pair % devices_.size())};
      const std::deque<Posted>& queue = *first;
      throw InvalidInput(std::string(to_string(result_.pass)) + " pass: " +
                         (send ? "device " + std::to_string(key.first) + "'s send #"
                               : "device " + std::to_string(key.second) + "'s receive #") +
                         std::to_string(queue.front().ordinal) +
                         (send ? " to device " + std::to_string(key.second)
                               : " from device " + std::to_string(key.first)) +
                         " has no matching " + (send ? "receive" : "send"));
    }
    finish_summary();
    return std::move(result_);
  }

 private:
  // --- compute streams -------------------------------------------------------------------------

  std::int32_t tokens_of_block(const Program& program, BlockId block) const {
    const auto it =
        std::lower_bound(program.blocks.begin(), program.blocks.end(), block,
                         [](const BlockInfo& info, BlockId id) { return info.id < id; });
    return it != program.blocks.end() && it->id == block ? it->tokens : 0;
  }

  std::int64_t held_bytes(const DeviceState& state, SlotId slot) const {
    return slot_bytes(header_, state.program->slots[at(slot)].kind, state.slot_tokens[at(slot)]);
  }

  // Partials that travel narrower than they are held are converted on the compute stream, one
  // batched kernel per launch: before the launch sends them, and after the Wait that completes
  // the launch receiving them (the executor's order).
  // The conversions of the Launch at `instruction` in `direction` (partial_conversions).
  double conversion_seconds(const DeviceState& state, std::size_t instruction,
                            CommOp::Direction direction) const {
    const auto& launch = std::get<Launch>(state.program->instructions[instruction]);
    std::int64_t bytes = 0;
    for (std::size_t k = 0; k < launch.ops.size(); ++k) {
      const CommOp& op = launch.ops[k];
      if (op.direction != direction || !state.converts[instruction][k]) continue;
      const SlotKind kind = state.program->slots[at(op.slot)].kind;
      const std::int64_t tokens =
          op.bytes / std::max<std::int64_t>(1, value_bytes(header_, kind, 1));
      bytes += op.bytes + slot_bytes(header_, kind, tokens);  // read one, write the other
    }
    return bytes > 0 ? cost_.kernel_overhead() + cost_.memory_seconds(bytes) : 0;
  }

  // An executor that packs messages: one copy kernel moving the launch's sends into its send
  // buffer, or its receives out of the receive buffer.
  double pack_seconds(const Launch& launch, CommOp::Direction direction) const {
    if (!executor_.packs_messages) return 0;
    std::int64_t bytes = 0;
    for (const CommOp& op : launch.ops) {
      if (op.direction == direction) bytes += op.bytes;
    }
    return bytes > 0 ? cost_.kernel_overhead() + cost_.memory_seconds(2 * bytes) : 0;
  }

  template <typename Attention>
  double attention_seconds(DeviceState& state, const Attention& attention, Pass pass) {
    double seconds = cost_.kernel_overhead();
    for (const AttnRow& row : attention.rows) {
      const std::int32_t q_tokens = state.slot_tokens[at(row.q)];
      for (const AttnKv& entry : row.kv) {
        const std::int32_t kv_tokens = state.slot_tokens[at(entry.kv)];
        if (entry.mask == kFullTile) {
          seconds += cost_.tile_seconds(pass, nullptr, q_tokens, kv_tokens);
        } else {
          double& cached = state.mask_cost[at(entry.mask)];
          if (std::isnan(cached)) cached = mask_seconds(state.program->masks[at(entry.mask)], pass);
          seconds += cached;
        }
        if (entry.dkv != kNoSlot) state.slot_tokens[at(entry.dkv)] = kv_tokens;
      }
      state.slot_tokens[at(row.out)] = q_tokens;
    }
    return seconds;
  }

  // A masked tile's kernel time. Devices' Programs hold many equal masks (a causal block pair's
  // diagonal), so each distinct mask is costed once per pass.
  double mask_seconds(const TileMask& mask, Pass pass) {
    auto& same_hash = mask_seconds_[hash_value(mask)];
    for (const auto& [seen, seconds] : same_hash) {
      if (*seen == mask) return seconds;
    }
    const double seconds = cost_.tile_seconds(pass, &mask, mask.q_tokens, mask.kv_tokens);
    same_hash.emplace_back(&mask, seconds);
    return seconds;
  }

  // Runs device d's compute stream until it ends or waits on a launch not yet complete.
  void advance(std::size_t d) {
    DeviceState& state = devices_[d];
    const Program& program = *state.program;
    DeviceTimeline& timeline = result_.devices[d];
    while (state.pc < program.instructions.size()) {
      const std::size_t i = state.pc;
      const Instruction& instruction = program.instructions[i];
      // Frees run nothing, nor do Keeps and Restores in dcp's executor (a kept value is received
      // into the kept tensor and read there: runtime/lowering.h).
      const bool kept =
          std::holds_alternative<Keep>(instruction) || std::holds_alternative<Restore>(instruction);
      const bool kept_copy = kept && executor_.copies_kept;
      const bool no_call = std::holds_alternative<Free>(instruction) || (kept && !kept_copy);
      if (state.dispatched == i && !no_call) {
        state.time += executor_.instruction_overhead;  // before the instruction can start
      }
      state.dispatched = std::max(state.dispatched, i + 1);
      const double start = state.time;
      double seconds = 0;
      bool compute = true;
      // A load, store, merge or sum (or a copied keep or restore) right after one of its kind
      // joins its batched kernel.
      const bool memory = std::holds_alternative<Load>(instruction) ||
                          std::holds_alternative<Store>(instruction) ||
                          std::holds_alternative<Merge>(instruction) ||
                          std::holds_alternative<Sum>(instruction) || kept_copy;
      if (memory && instruction.index() != state.memory_run) seconds = cost_.kernel_overhead();
      if (!no_call) {
        state.memory_run = memory ? instruction.index() : std::variant_npos;
      }
      if (const auto* load = std::get_if<Load>(&instruction)) {
        state.slot_tokens[at(load->slot)] = tokens_of_block(program, load->block);
        seconds += cost_.memory_seconds(2 * held_bytes(state, load->slot));
      } else if (const auto* store = std::get_if<Store>(&instruction)) {
        seconds += store->slot == kNoSlot
                       ? cost_.memory_seconds(slot_bytes(header_, store->kind,
                                                         tokens_of_block(program, store->block)))
                       : cost_.memory_seconds(2 * held_bytes(state, store->slot));
      } else if (kept) {
        const auto* restore = std::get_if<Restore>(&instruction);
        if (restore)
          state.slot_tokens[at(restore->slot)] = tokens_of_block(program, restore->block);
        const SlotId slot = restore ? restore->slot : std::get<Keep>(instruction).slot;
        compute = kept_copy;
        if (kept_copy) seconds += cost_.memory_seconds(2 * held_bytes(state, slot));
      } else if (const auto* merge = std::get_if<Merge>(&instruction)) {
        seconds += cost_.memory_seconds(3 * held_bytes(state, merge->dst));
      } else if (const auto* sum = std::get_if<Sum>(&instruction)) {
        seconds += cost_.memory_seconds(3 * held_bytes(state, sum->dst));
      } else if (const auto* forward = std::get_if<AttnForward>(&instruction)) {
        seconds = attention_seconds(state, *forward, Pass::kForward);
      } else if (const auto* backward = std::get_if<AttnBackward>(&instruction)) {
        seconds = attention_seconds(state, *backward, Pass::kBackward);
      } else if (const auto* launch = std::get_if<Launch>(&instruction)) {
        compute = false;
        const double narrow = conversion_seconds(state, i, CommOp::Direction::kSend) +
                              pack_seconds(*launch, CommOp::Direction::kSend);
        state.time += narrow;
        timeline.compute_seconds += narrow;
        timeline.convert_seconds += narrow;
        post(d, i, *launch);
      } else if (const auto* wait = std::get_if<Wait>(&instruction)) {
        compute = false;
        if (at(wait->launch) >= state.completed) {
          state.blocked = true;
          return;  // released by complete_launches
        }
        const double done = state.launches[at(wait->launch)].done;
        state.held_by_launch.push_back(done > state.time);
        state.wait_launch.push_back(wait->launch);
        state.time = std::max(state.time, done);
        timeline.wait_seconds += state.time - start;
        for (; state.widened <= at(wait->launch); ++state.widened) {
          const auto launch_at = at(state.launches[state.widened].instruction);
          const double widen = conversion_seconds(state, launch_at, CommOp::Direction::kRecv) +
                               pack_seconds(std::get<Launch>(program.instructions[launch_at]),
                                            CommOp::Direction::kRecv);
          state.time += widen;
          timeline.compute_seconds += widen;
          timeline.convert_seconds += widen;
        }
        timeline.events.push_back(
            {static_cast<std::int32_t>(i), program.instruction_stage[i], start, state.time});
        ++state.pc;
        continue;
      } else {
        compute = false;  // Free
      }
      state.time += seconds;
      if (compute) timeline.compute_seconds += seconds;
      state.held_by_launch.push_back(false);
      state.wait_launch.push_back(-1);
      timeline.events.push_back(
          {static_cast<std::int32_t>(i), program.instruction_stage[i], start, state.time});
      ++state.pc;
    }
    timeline.end = std::max(timeline.end, state.time);
  }

  // --- posting and matching ---------------------------------------------------------------------

  void post(std::size_t d, std::size_t instruction, const Launch& launch) {
    DeviceState& state = devices_[d];
    if (at(launch.id) != state.launches.size()) {
      throw InvalidInput(std::string(to_string(result_.pass)) + " pass: device " +
                         std::to_string(d) + " issues launch " + std::to_string(launch.id) +
                         " as its launch #" + std::to_string(state.launches.size()));
    }
    // The launch's set-up (per launch and per distinct peer) delays its transfers; what it moves
    // to or from one peer travels as one message.
    // Bytes per (peer, send) and the distinct peers, in scratch tables zeroed again below.
    std::vector<std::int64_t>& message_bytes = scratch_message_bytes_;
    std::vector<std::uint8_t>& seen = scratch_peer_seen_;
    std::int64_t distinct = 0;
    const auto message_index = [](const CommOp& op) {
      return at(op.peer) * 2 + (op.direction == CommOp::Direction::kSend ? 1 : 0);
    };
    for (const CommOp& op : launch.ops) {
      message_bytes[message_index(op)] += op.bytes;
      if (seen[at(op.peer)] == 0) {
        seen[at(op.peer)] = 1;
        ++distinct;
      }
    }
    const std::int64_t peer_count =
        executor_.launches_whole_group ? shape_.devices() - 1 : distinct;
    const double posted = state.time + (distinct == 0 ? 0.0 : cost_.launch_seconds(peer_count));
    LaunchState issued;
    issued.instruction = static_cast<std::int32_t>(instruction);
    issued.issued = posted;
    issued.open = static_cast<std::int32_t>(launch.ops.size());
    state.launches.push_back(issued);
    const auto self = static_cast<std::int32_t>(d);
    for (const CommOp& op : launch.ops) {
      const bool send = op.direction == CommOp::Direction::kSend;
      if (!send) {
        const SlotKind kind = state.program->slots[at(op.slot)].kind;
        state.slot_tokens[at(op.slot)] = static_cast<std::int32_t>(
            op.bytes / std::max<std::int64_t>(1, value_bytes(header_, kind, 1)));
      }
      const std::pair<std::int32_t, std::int32_t> key =
          send ? std::pair{self, op.peer} : std::pair{op.peer, self};
      const std::size_t pair = pair_index(key.first, key.second);
      std::int32_t& ordinal = (send ? sends_posted_ : recvs_posted_)[pair];
      const Posted mine{launch.id, static_cast<std::int32_t>(instruction),
                        op.bytes,  message_bytes[message_index(op)],
                        posted,    ordinal++};
      std::deque<Posted>& others = (send ? waiting_recvs_ : waiting_sends_)[pair];
      if (others.empty()) {
        (send ? waiting_sends_ : waiting_recvs_)[pair].push_back(mine);
        continue;
      }
      const Posted other = others.front();
      others.pop_front();
      const Posted& s = send ? mine : other;
      const Posted& r = send ? other : mine;
      if (s.bytes != r.bytes) {
        throw InvalidInput(std::string(to_string(result_.pass)) + " pass: device " +
                           std::to_string(key.first) + "'s send #" + std::to_string(s.ordinal) +
                           " to device " + std::to_string(key.second) + " carries " +
                           std::to_string(s.bytes) + " bytes but the receive expects " +
                           std::to_string(r.bytes));
      }
      add_transfer(key.first, key.second, s, r);
    }
    for (const CommOp& op : launch.ops) {
      message_bytes[message_index(op)] = 0;
      seen[at(op.peer)] = 0;
    }
    if (launch.ops.empty()) complete_launches(d);
  }

  std::size_t pair_index(std::int32_t src, std::int32_t dst) const {
    return at(src) * devices_.size() + at(dst);
  }

  void add_transfer(std::int32_t src, std::int32_t dst, const Posted& s, const Posted& r) {
    TransferEvent transfer;
    transfer.src = src;
    transfer.dst = dst;
    transfer.src_instruction = s.instruction;
    transfer.dst_instruction = r.instruction;
    transfer.bytes = s.bytes;
    transfer.message_bytes = s.message_bytes;
    transfer.inter_node = shape_.node_of(src) != shape_.node_of(dst);
    transfer.posted = std::max(s.time, r.time);
    transfer.ready = transfer.posted + cost_.latency(transfer.inter_node);
    const auto id = static_cast<std::int32_t>(result_.transfers.size());
    result_.transfers.push_back(transfer);
    transfer_launch_.push_back({s.launch, r.launch});
    network_.add(transfer.ready, id);
  }

  // --- launches ----------------------------------------------------------------------------------

  void transfer_done(std::int32_t id) {
    // Copies: completing a launch may advance a device, which may add transfers.
    const TransferEvent transfer = result_.transfers[at(id)];
    const auto [src_launch, dst_launch] = transfer_launch_[at(id)];
    for (const auto& [device, launch] :
         {std::pair{transfer.src, src_launch}, std::pair{transfer.dst, dst_launch}}) {
      LaunchState& state = devices_[at(device)].launches[at(launch)];
      --state.open;
      if (transfer.end >= state.last_end) {
        state.last_end = transfer.end;
        state.last_transfer = id;
      }
      complete_launches(at(device));
    }
  }

  void complete_launches(std::size_t d) {
    DeviceState& state = devices_[d];
    bool progressed = false;
    while (state.completed < state.launches.size() && state.launches[state.completed].open == 0) {
      LaunchState& launch = state.launches[state.completed];
      launch.done = launch.issued;
      launch.cause = {LaunchCause::Kind::kIssue, -1};
      if (launch.last_transfer >= 0 && launch.last_end >= launch.done) {
        launch.done = launch.last_end;
        launch.cause = {LaunchCause::Kind::kTransfer, launch.last_transfer};
      }
      if (state.completed > 0 && state.launches[state.completed - 1].done > launch.done) {
        launch.done = state.launches[state.completed - 1].done;
        launch.cause = {LaunchCause::Kind::kPrevious, -1};
      }
      ++state.completed;
      progressed = true;
    }
    if (progressed && state.blocked) {
      state.blocked = false;
      advance(d);
    }
  }

  // --- the network -------------------------------------------------------------------------------

  void run_network() {
    double now = 0;
    std::vector<std::int32_t>& ended = scratch_ended_;
    while (network_.step(result_.transfers, now, ended)) {
      for (const std::int32_t id : ended) {
        result_.transfers[at(id)].end = now;
        TransferEvent& transfer = result_.transfers[at(id)];
        DeviceTimeline& src = result_.devices[at(transfer.src)];
        DeviceTimeline& dst = result_.devices[at(transfer.dst)];
        src.end = std::max(src.end, now);
        dst.end = std::max(dst.end, now);
        // May advance devices, which may post transfers; they join the network from its pending
        // queue, so the rates set by this step stand until the next event.
        transfer_done(id);
      }
    }
  }

  // --- summary -----------------------------------------------------------------------------------

  void finish_summary() {
    std::size_t last = 0;
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      DeviceTimeline& timeline = result_.devices[d];
      timeline.end = std::max(timeline.end, devices_[d].time);
      if (timeline.end > result_.devices[last].end) last = d;
      result_.seconds = std::max(result_.seconds, timeline.end);
    }
    stage_times();
    critical_path(last);
  }

  void stage_times() {
    std::int32_t stages = 0;
    for (const DeviceState& state : devices_) stages = std::max(stages, state.program->stages + 1);
    result_.stages.assign(at(stages), StageTime{kInf, 0, 0, 0});
    std::vector<double> compute(at(stages));
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      std::fill(compute.begin(), compute.end(), 0.0);
      const Program& program = *devices_[d].program;
      for (const ComputeEvent& event : result_.devices[d].events) {
        StageTime& stage = result_.stages[at(event.stage)];
        stage.begin = std::min(stage.begin, event.start);
        stage.end = std::max(stage.end, event.end);
        const Instruction& instruction = program.instructions[at(event.instruction)];
        if (std::holds_alternative<Wait>(instruction)) {
          stage.total_wait += event.end - event.start;
        } else {
          compute[at(event.stage)] += event.end - event.start;
        }
      }
      for (std::size_t s = 0; s < compute.size(); ++s) {
        result_.stages[s].max_compute = std::max(result_.stages[s].max_compute, compute[s]);
      }
    }
    for (StageTime& stage : result_.stages) {
      if (stage.begin == kInf) stage.begin = stage.end;
    }
  }

  // Walks back from the last instruction of the device that ends last: along its stream, and from
  // a Wait that its launch held to whatever completed that launch last.
  void critical_path(std::size_t last_device) {
    std::vector<CriticalStep> steps;
    auto device = static_cast<std::int32_t>(last_device);
    auto index = static_cast<std::int64_t>(result_.devices[last_device].events.size()) - 1;
    const auto extend = [&](std::int32_t dev, std::size_t event_index) {
      const ComputeEvent& event = result_.devices[at(dev)].events[event_index];
      if (!steps.empty() && steps.back().kind == CriticalStep::Kind::kCompute &&
          steps.back().device == dev && steps.back().first == event.instruction + 1) {
        steps.back().first = event.instruction;
        steps.back().start = event.start;
      } else {
        steps.push_back({CriticalStep::Kind::kCompute, dev, event.instruction, event.instruction,
                         event.start, event.end});
      }
    };
    while (index >= 0) {
      const DeviceState& state = devices_[at(device)];
      const auto e = at(index);
      if (!state.held_by_launch[e]) {
        extend(device, e);
        --index;
        continue;
      }
      // Follow the launch that held this Wait back to the transfer or issue that completed it.
      std::int32_t launch = state.wait_launch[e];
      while (state.launches[at(launch)].cause.kind == LaunchCause::Kind::kPrevious) --launch;
      const LaunchState& released = state.launches[at(launch)];
      if (released.cause.kind == LaunchCause::Kind::kIssue) {
        index = released.instruction;  // events are one per instruction, in order
        continue;
      }
      const TransferEvent& transfer = result_.transfers[at(released.cause.transfer)];
      steps.push_back({CriticalStep::Kind::kTransfer, transfer.dst, released.cause.transfer,
                       released.cause.transfer, transfer.posted, transfer.end});
      // The transfer could start once its later side posted it.
      const bool sender_later =
          result_.devices[at(transfer.src)].events[at(transfer.src_instruction)].start >=
          result_.devices[at(transfer.dst)].events[at(transfer.dst_instruction)].start;
      device = sender_later ? transfer.src : transfer.dst;
      index = sender_later ? transfer.src_instruction : transfer.dst_instruction;
    }
    // Launches and Waits that cost nothing are no stretch of their own.
    std::erase_if(steps, [](const CriticalStep& step) { return step.end <= step.start; });
    std::reverse(steps.begin(), steps.end());
    for (const CriticalStep& step : steps) {
      (step.kind == CriticalStep::Kind::kCompute ? result_.critical_compute_seconds
                                                 : result_.critical_transfer_seconds) +=
          step.end - step.start;
    }
    result_.critical_path = std::move(steps);
  }

  const PlanHeader& header_;
  CostModel cost_;
  ExecutorModel executor_;
  ClusterShape shape_;
  std::vector<DeviceState> devices_;
  PassSimulation result_;
  std::vector<std::int32_t> sends_posted_, recvs_posted_;  // per (src, dst): pair_index
  // Posted sides whose other side has not posted yet, by (src, dst).
  std::vector<std::deque<Posted>> waiting_sends_, waiting_recvs_;       // per pair_index
  std::vector<std::int64_t> scratch_message_bytes_;                     // post(): per (peer, send)
  std::vector<std::uint8_t> scratch_peer_seen_;                         // post(): per peer
  std::vector<std::pair<std::int32_t, std::int32_t>> transfer_launch_;  // (src, dst) launch
  Network network_;
  std::vector<std::int32_t> scratch_ended_;  // run_network: transfers ending at one event
  // mask_seconds' costs of the masks seen, by hash.
  std::unordered_map<std::uint64_t, std::vector<std::pair<const TileMask*, double>>> mask_seconds_;
};

}  // namespace

ClusterSpec with_shape(ClusterSpec cluster, const ClusterShape& shape) {
  cluster.shape = shape;
  return cluster;
}

PassSimulation simulate(const PlanHeader& header, const std::vector<Program>& programs,
                        const ClusterSpec& cluster, const ExecutorModel& executor) {
  validate(cluster);
  check_plan_header(header, "");
  if (!(cluster.shape == header.cluster)) {
    throw InvalidInput("the plan is for " + std::to_string(header.cluster.nodes) + " x " +
                       std::to_string(header.cluster.devices_per_node) + " devices but cluster '" +
                       cluster.name + "' describes " + std::to_string(cluster.shape.nodes) + " x " +
                       std::to_string(cluster.shape.devices_per_node));
  }
  if (programs.size() != at(header.cluster.devices())) {
    throw InvalidInput("expected one Program per device (" +
                       std::to_string(header.cluster.devices()) + "), got " +
                       std::to_string(programs.size()));
  }
  for (std::size_t d = 0; d < programs.size(); ++d) {
    if (programs[d].device != static_cast<std::int32_t>(d) ||
        programs[d].pass != programs.front().pass) {
      throw InvalidInput("Program " + std::to_string(d) + " is device " +
                         std::to_string(programs[d].device) + "'s " +
                         std::string(to_string(programs[d].pass)) + " Program; expected device " +
                         std::to_string(d) + "'s " + std::string(to_string(programs.front().pass)));
    }
    check_program_structure(header, programs[d], "");
  }
  return Simulation(header, programs, cluster, executor).run();
}

PlanSimulation simulate(const Plan& plan, const ClusterSpec& cluster,
                        const ExecutorModel& executor) {
  return {simulate(plan.header, plan.forward, cluster, executor),
          simulate(plan.header, plan.backward, cluster, executor)};
}

}  // namespace dcp::sim
