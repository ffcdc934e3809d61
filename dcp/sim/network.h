// SPDX-License-Identifier: Apache-2.0
// The simulator's network: transfers in flight share the link sides they use (a device's send and
// receive side inside a node, a network interface's send and receive side between nodes) max-min
// fairly, each message at most its stream bandwidth (docs/simulator.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "dcp/model/cluster.h"

#include "dcp/sim/cost_model.h"
#include "dcp/sim/fair_share.h"
#include "dcp/sim/simulator.h"

namespace dcp::sim {

class Network {
 public:
  // The links of cost's cluster (its devices, and its nodes' network interfaces), priced by `cost`
  // (which must outlive the network).
  explicit Network(const CostModel& cost);

  // Transfer `id` (an index into the transfers step() is given) joins at `ready`.
  void add(double ready, std::int32_t id) { pending_.push({ready, id}); }

  // Moves `now` to the next event, when a transfer ends or pending ones join, and leaves in
  // `ended` the transfers that end then, in id order (empty ones end when they join). Returns
  // false, leaving `now`, when nothing is in flight or pending.
  bool step(const std::vector<TransferEvent>& transfers, double& now,
            std::vector<std::int32_t>& ended);

 private:
  // Transfers on the same two link sides progress at the same rate, so they form one class; a
  // class's served level (served_) counts the bytes each of its transfers has moved since the
  // class began, and a transfer joining at served = s with b bytes ends when served reaches s + b.
  struct LinkClass {
    std::size_t first = 0, second = 0;  // resources
    double cap = 0;                     // the most one message reaches (the stream bandwidth)
    // Transfers in flight per message (a launch's transfers from one device to another): the
    // stream bandwidth caps a message, however many values it carries.
    // (message, transfers): few at a time, so a list.
    std::vector<std::pair<std::int64_t, std::int32_t>> messages;
    void add_message(std::int64_t message) {
      for (auto& [key, count] : messages) {
        if (key == message) {
          ++count;
          return;
        }
      }
      messages.emplace_back(message, 1);
    }
    void remove_message(std::int64_t message) {
      for (std::size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].first != message) continue;
        if (--messages[i].second == 0) {
          messages[i] = messages.back();
          messages.pop_back();
        }
        return;
      }
    }
    std::priority_queue<std::pair<double, std::int32_t>,
                        std::vector<std::pair<double, std::int32_t>>, std::greater<>>
        ends;  // (served level at which it ends, transfer)
  };

  // The message a transfer travels in: its sender's launch instruction and its two devices.
  std::int64_t message_of(const TransferEvent& transfer) const;
  std::size_t class_of(const TransferEvent& transfer);
  // Max-min fair rates over the classes with transfers in flight, each transfer at most its
  // class's cap (FairShare), solved per connected component of the classes that changed.
  void allocate();

  const CostModel& cost_;
  std::size_t devices_ = 0;
  std::size_t nics_ = 0;          // network interfaces of all nodes
  std::vector<double> capacity_;  // per link side: device sends, device receives, NIC sends, NIC
                                  // receives
  std::priority_queue<std::pair<double, std::int32_t>, std::vector<std::pair<double, std::int32_t>>,
                      std::greater<>>
      pending_;  // (ready, transfer)
  std::vector<LinkClass> classes_;
  // Per class, apart from it, as every event runs over them all: the served level, the rate per
  // transfer (bytes/s), and the served level at which its next transfer ends (infinite: none).
  std::vector<double> served_, rate_, next_end_;
  std::vector<std::size_t> active_;  // the classes with transfers in flight, in index order
  std::vector<std::vector<std::size_t>> resource_classes_;  // per resource, its active classes
  std::vector<std::size_t> changed_;  // classes whose transfers changed since allocate()
  // allocate()'s solver and scratch, kept between calls.
  FairShare fair_share_;
  std::uint32_t epoch_ = 0;  // marks what one allocate() has visited
  std::vector<std::uint32_t> resource_seen_, class_seen_;
  std::vector<std::size_t> local_resource_;
  std::vector<std::size_t> scratch_resources_, scratch_members_;
  std::vector<double> scratch_capacity_, scratch_rates_;
  std::vector<FairShareClass> scratch_classes_;
  MessageLinkBytes link_bytes_;            // a message's transfers join the network together
  std::vector<std::int32_t> class_index_;  // per (resource, resource); -1: none yet
};

// One exchange priced as the simulator prices a Launch on every device at once under the default
// ExecutorModel: `bytes` (devices x devices, sender-major; the diagonal, a device's own, is not
// moved) from each device to each other one, each pair's bytes one message; a device's launch set
// up for its distinct peers, sent and received (CostModel::launch_seconds); each transfer posted
// when both ends' launches are and joining the network after its link's latency. Returns when the
// last transfer ends, 0 where nothing moves. What a baseline's all-to-all costs beside dcp's own
// transfers, at the same rates. Throws InvalidInput if the cluster spec is invalid, `bytes` is
// not devices x devices, or a count is negative (naming the two devices).
double exchange_seconds(const std::vector<std::int64_t>& bytes, const ClusterSpec& cluster);

}  // namespace dcp::sim
