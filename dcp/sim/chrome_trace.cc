// SPDX-License-Identifier: Apache-2.0
// Chrome trace export of simulated passes.
#include "dcp/sim/chrome_trace.h"

#include <cstdint>
#include <string_view>

#include "dcp/core/json_writer.h"

namespace dcp::sim {
namespace {

constexpr double kMicroseconds = 1e6;

std::int64_t compute_thread(std::int32_t device) { return 2 * std::int64_t{device}; }
std::int64_t comm_thread(std::int32_t device) { return 2 * std::int64_t{device} + 1; }

void metadata(JsonWriter& json, std::string_view what, std::int64_t pid, std::int64_t tid,
              std::string_view name, std::int64_t sort_index) {
  JsonWriter::Inline one_line(json);
  json.begin_object().field("ph", "M").field("name", what).field("pid", pid).field("tid", tid);
  json.key("args").begin_object().field("name", name).end_object();
  json.end_object();
  if (what == "thread_name") {
    JsonWriter::Inline sort_line(json);
    json.begin_object().field("ph", "M").field("name", "thread_sort_index").field("pid", pid);
    json.field("tid", tid).key("args").begin_object().field("sort_index", sort_index);
    json.end_object().end_object();
  }
}

void pass_events(JsonWriter& json, const PlanHeader& header, const std::vector<Program>& programs,
                 const PassSimulation& simulation, double offset, std::int64_t& next_id) {
  const std::string_view pass = to_string(simulation.pass);
  for (std::size_t d = 0; d < simulation.devices.size(); ++d) {
    const auto device = static_cast<std::int32_t>(d);
    const std::int64_t node = header.cluster.node_of(device);
    for (const ComputeEvent& event : simulation.devices[d].events) {
      if (event.end <= event.start) continue;
      const Instruction& instruction =
          programs[d].instructions[static_cast<std::size_t>(event.instruction)];
      JsonWriter::Inline one_line(json);
      json.begin_object().field("ph", "X").field("cat", pass);
      json.field("name", opcode_name(instruction)).field("pid", node);
      json.field("tid", compute_thread(device));
      json.field("ts", (offset + event.start) * kMicroseconds);
      json.field("dur", (event.end - event.start) * kMicroseconds);
      json.key("args").begin_object().field("instruction", event.instruction);
      json.field("stage", event.stage).end_object().end_object();
    }
  }
  for (const TransferEvent& transfer : simulation.transfers) {
    const std::int64_t node = header.cluster.node_of(transfer.src);
    const std::string name = std::string(pass) + " send to device " + std::to_string(transfer.dst);
    const std::int64_t id = next_id++;
    for (const bool begin : {true, false}) {
      JsonWriter::Inline one_line(json);
      json.begin_object().field("ph", begin ? "b" : "e").field("cat", "transfer");
      json.field("name", name).field("id", id).field("pid", node);
      json.field("tid", comm_thread(transfer.src));
      json.field("ts", (offset + (begin ? transfer.posted : transfer.end)) * kMicroseconds);
      if (begin) {
        json.key("args").begin_object().field("bytes", transfer.bytes);
        json.field("inter_node", transfer.inter_node);
        json.field("latency_us", (transfer.ready - transfer.posted) * kMicroseconds);
        json.end_object();
      }
      json.end_object();
    }
  }
}

}  // namespace

std::string chrome_trace(const Plan& plan, const PlanSimulation& simulation) {
  JsonWriter json(1);
  json.begin_object().field("displayTimeUnit", "ns").key("traceEvents").begin_array();
  const ClusterShape& cluster = plan.header.cluster;
  for (std::int32_t node = 0; node < cluster.nodes; ++node) {
    metadata(json, "process_name", node, 0, "node " + std::to_string(node), node);
  }
  for (std::int32_t device = 0; device < cluster.devices(); ++device) {
    const std::int64_t node = cluster.node_of(device);
    metadata(json, "thread_name", node, compute_thread(device),
             "device " + std::to_string(device) + " compute", compute_thread(device));
    metadata(json, "thread_name", node, comm_thread(device),
             "device " + std::to_string(device) + " communication", comm_thread(device));
  }
  std::int64_t next_id = 1;
  pass_events(json, plan.header, plan.forward, simulation.forward, 0, next_id);
  pass_events(json, plan.header, plan.backward, simulation.backward, simulation.forward.seconds,
              next_id);
  json.end_array().end_object();
  return json.str();
}

}  // namespace dcp::sim
