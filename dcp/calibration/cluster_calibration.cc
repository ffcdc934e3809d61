// SPDX-License-Identifier: Apache-2.0
// Calibration of a cluster between real ranks: link measurements over a Communicator and their fit.
#include "dcp/calibration/cluster_calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/timing.h"

namespace dcp::calibration {
namespace {

using Kind = comm::TransferOp::Kind;

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g s", seconds);
  return text;
}

void check_time(double seconds, const std::string& what) {
  if (!std::isfinite(seconds) || seconds <= 0) {
    throw InvalidInput(what + ": " + std::to_string(seconds) + " s is not a positive time");
  }
}

// --- The fit ---------------------------------------------------------------------------------

// y = intercept + slope x by least squares; a single x gives slope 0.
struct Line {
  double intercept = 0;
  double slope = 0;
};

Line least_squares(const std::vector<double>& x, const std::vector<double>& y) {
  const auto n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx <= 0) return {my, 0};
  return {my - sxy / sxx * mx, sxy / sxx};
}

// One link class's constants before the launch is taken out of its latency.
struct ClassFit {
  double small_seconds = 0;  // the small message's one-way time
  double bandwidth = 0;
  std::vector<SizeEfficiency> efficiency;
  std::size_t bandwidth_index = 0;  // the message that gave the bandwidth
};

void check_messages(const std::vector<MessageTime>& messages, const std::string& what) {
  if (messages.size() < 2) {
    throw InvalidInput(what + ": " + std::to_string(messages.size()) +
                       " messages, need the small one and at least one size of the sweep");
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string item = what + " message " + std::to_string(i);
    if (messages[i].bytes < 1) {
      throw InvalidInput(item + " has " + std::to_string(messages[i].bytes) + " bytes");
    }
    if (i > 0 && messages[i].bytes <= messages[i - 1].bytes) {
      throw InvalidInput(item + " (" + std::to_string(messages[i].bytes) +
                         " bytes) does not follow a smaller size");
    }
    check_time(messages[i].seconds, item + " (" + std::to_string(messages[i].bytes) + " bytes)");
  }
}

ClassFit fit_class(const std::vector<MessageTime>& messages, const std::string& what) {
  check_messages(messages, what);
  ClassFit fit;
  fit.small_seconds = messages.front().seconds;
  const std::int64_t largest = messages.back().bytes;
  for (std::size_t i = 1; i < messages.size(); ++i) {
    const double moving = messages[i].seconds - fit.small_seconds;
    if (messages[i].bytes * 16 < largest || moving <= 0) continue;
    const double rate = static_cast<double>(messages[i].bytes) / moving;
    if (rate > fit.bandwidth) {
      fit.bandwidth = rate;
      fit.bandwidth_index = i;
    }
  }
  if (fit.bandwidth <= 0) {
    throw InvalidInput(what + ": the largest message (" + std::to_string(largest) + " bytes, " +
                       seconds_text(messages.back().seconds) +
                       ") is no slower than the small one (" + seconds_text(fit.small_seconds) +
                       "); measure larger sizes");
  }
  fit.bandwidth = round4(fit.bandwidth, 1e9);
  for (std::size_t i = 1; i < messages.size(); ++i) {
    const double moving = messages[i].seconds - fit.small_seconds;
    const double efficiency =
        moving > 0 ? static_cast<double>(messages[i].bytes) / (moving * fit.bandwidth) : 1.0;
    fit.efficiency.push_back({messages[i].bytes, std::min(1.0, round4(efficiency, 1))});
  }
  return fit;
}

// The divisor of `devices` nearest to `ratio` in log scale (1 for a ratio at most 1).
std::int32_t nearest_divisor(std::int32_t devices, double ratio) {
  std::int32_t best = 1;
  for (std::int32_t d = 1; d <= devices; ++d) {
    if (devices % d != 0) continue;
    if (std::abs(std::log(d / ratio)) < std::abs(std::log(best / ratio))) best = d;
  }
  return best;
}

std::string bytes_name(std::int64_t bytes, const char* where) {
  return "one way " + std::to_string(bytes) + " B, " + where;
}

// --- Measuring -------------------------------------------------------------------------------

// [rank][op][repeat] on rank 0 (the others: empty) from every rank's [op][repeat], all of the same
// dimensions.
std::vector<std::vector<std::vector<double>>> gather_to_root(
    comm::Communicator& communicator, const std::vector<std::vector<double>>& mine) {
  std::vector<double> flat;
  for (const std::vector<double>& op : mine) flat.insert(flat.end(), op.begin(), op.end());
  const std::size_t bytes = flat.size() * sizeof(double);
  if (communicator.rank() != 0) {
    const comm::TransferOp send[] = {{Kind::kSend, 0, flat.data(), bytes}};
    communicator.wait(communicator.start(send));
    return {};
  }
  const auto ranks = to_size(communicator.size());
  std::vector<std::vector<double>> flats(ranks, std::vector<double>(flat.size()));
  flats[0] = flat;
  std::vector<comm::TransferOp> ops;
  for (std::size_t r = 1; r < ranks; ++r) {
    ops.push_back({Kind::kRecv, static_cast<std::int32_t>(r), flats[r].data(), bytes});
  }
  communicator.wait(communicator.start(ops));
  std::vector<std::vector<std::vector<double>>> all(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    std::size_t at = 0;
    for (const std::vector<double>& op : mine) {
      all[r].emplace_back(flats[r].begin() + static_cast<std::ptrdiff_t>(at),
                          flats[r].begin() + static_cast<std::ptrdiff_t>(at + op.size()));
      at += op.size();
    }
  }
  return all;
}

struct Buffers {
  std::vector<char> send, recv;
  std::vector<double> small_send, small_recv;  // one small message per peer
};

// One message from `from` to `to` and one back, each its own group (a one-peer launch): the
// initiator's time per call is a round trip. Empty on the other ranks.
TimedOperation ping_pong(comm::Communicator& c, Buffers& b, std::int32_t from, std::int32_t to,
                         std::int64_t bytes) {
  const std::int32_t rank = c.rank();
  if (rank != from && rank != to) return {};
  const std::int32_t peer = rank == from ? to : from;
  const comm::TransferOp send[] = {{Kind::kSend, peer, b.send.data(), to_size(bytes)}};
  const comm::TransferOp recv[] = {{Kind::kRecv, peer, b.recv.data(), to_size(bytes)}};
  const bool first_sends = rank == from;
  return [&c, send0 = send[0], recv0 = recv[0], first_sends] {
    const comm::TransferOp first = first_sends ? send0 : recv0;
    const comm::TransferOp second = first_sends ? recv0 : send0;
    c.wait(c.start(std::span<const comm::TransferOp>(&first, 1)));
    c.wait(c.start(std::span<const comm::TransferOp>(&second, 1)));
  };
}

// Rank 0 exchanges a small message both ways with each of ranks 1..peers in one group, recording
// how long each start() takes in `issue`; each of those ranks exchanges with rank 0 in one group.
TimedOperation group_exchange(comm::Communicator& c, Buffers& b, std::int32_t peers,
                              std::shared_ptr<std::vector<double>> issue) {
  const std::int32_t rank = c.rank();
  std::vector<comm::TransferOp> ops;
  if (rank == 0) {
    for (std::int32_t p = 1; p <= peers; ++p) {
      ops.push_back({Kind::kSend, p, &b.small_send[to_size(p)], kSmallMessageBytes});
      ops.push_back({Kind::kRecv, p, &b.small_recv[to_size(p)], kSmallMessageBytes});
    }
    return [&c, ops = std::move(ops), issue] {
      const Clock::time_point start = Clock::now();
      const comm::GroupId group = c.start(ops);
      issue->push_back(ms_since(start) * 1e-3);
      c.wait(group);
    };
  }
  if (rank > peers) return {};
  ops.push_back({Kind::kRecv, 0, &b.small_recv[0], kSmallMessageBytes});
  ops.push_back({Kind::kSend, 0, &b.small_send[0], kSmallMessageBytes});
  return [&c, ops = std::move(ops)] { c.wait(c.start(ops)); };
}

}  // namespace

void fit_links(const LinkMeasurements& m, CalibrationReport& report) {
  const ClusterShape& shape = m.shape;
  validate(shape);
  ClusterSpec& spec = report.spec;
  const bool has_intra = shape.devices_per_node > 1;
  const bool has_inter = shape.nodes > 1;
  const auto expect_class = [&](const std::vector<MessageTime>& messages, bool present,
                                const char* what, const char* lacking) {
    if (!present && !messages.empty()) {
      throw InvalidInput(std::string(what) + " messages were measured, but the cluster has " +
                         lacking);
    }
  };
  expect_class(m.intra_node, has_intra, "intra-node", "one device per node");
  expect_class(m.inter_node, has_inter, "inter-node", "one node");
  // A class the shape lacks copies the other's figures.
  const ClassFit intra =
      fit_class(has_intra ? m.intra_node : m.inter_node, has_intra ? "intra-node" : "inter-node");
  const ClassFit inter = has_inter ? fit_class(m.inter_node, "inter-node") : intra;

  // Launch set-up: the groups. A group's time less the small-message time of its farthest peer's
  // class leaves its launch set-up beyond one peer's.
  if (m.groups.empty()) throw InvalidInput("groups: no group was measured");
  std::vector<double> peers, beyond_one, issue;
  for (std::size_t i = 0; i < m.groups.size(); ++i) {
    const GroupTime& g = m.groups[i];
    const std::string what = "group " + std::to_string(i) + " (" + std::to_string(g.peers) +
                             (g.peers == 1 ? " peer)" : " peers)");
    if (g.peers != (i == 0 ? 1 : m.groups[i - 1].peers + 1)) {
      throw InvalidInput("groups: " + what + " does not follow " +
                         (i == 0 ? std::string("from 1 peer") : "the group before by one peer"));
    }
    if (g.peers >= shape.devices()) {
      throw InvalidInput("groups: " + what + " has more peers than the " +
                         std::to_string(shape.devices()) + " devices allow");
    }
    check_time(g.seconds, "groups: " + what);
    if (!std::isfinite(g.issue_seconds) || g.issue_seconds < 0) {
      throw InvalidInput("groups: " + what + ": issue time " + std::to_string(g.issue_seconds) +
                         " s is negative or not finite");
    }
    const bool farthest_inter = shape.node_of(g.peers) != 0;
    peers.push_back(g.peers);
    beyond_one.push_back(g.seconds - (farthest_inter ? inter : intra).small_seconds);
    issue.push_back(g.issue_seconds);
  }
  spec.launch_peer_overhead = round4(std::max(0.0, least_squares(peers, beyond_one).slope), 1e-6);
  spec.launch_overhead = round4(std::max(0.0, least_squares(peers, issue).intercept), 1e-6);
  const double one_peer_launch = spec.launch_overhead + spec.launch_peer_overhead;
  for (const GroupTime& g : m.groups) {
    const std::string name = "group of " + std::to_string(g.peers) + " peers, 8 B each way";
    report.measurements.push_back(
        {name, g.seconds, "launch_peer_overhead_us", spec.launch_peer_overhead * 1e6, "us"});
    report.measurements.push_back({"start() of the " + name, g.issue_seconds, "launch_overhead_us",
                                   spec.launch_overhead * 1e6, "us"});
  }
  if (m.groups.size() == 1) {
    report.notes.push_back(
        "groups of one peer count only (2 devices): launch_peer_overhead is 0, not measured");
  }

  // Point to point, per class: the latency is what the small message takes beyond its launch.
  const auto latency_of = [&](const ClassFit& fit) {
    return round4(std::max(0.0, fit.small_seconds - one_peer_launch), 1e-6);
  };
  const auto report_class = [&](const std::vector<MessageTime>& messages, const ClassFit& fit,
                                const char* where, const std::string& prefix) {
    report.measurements.push_back({bytes_name(messages[0].bytes, where), messages[0].seconds,
                                   prefix + "_latency_us", latency_of(fit) * 1e6, "us"});
    for (std::size_t i = 1; i < messages.size(); ++i) {
      report.measurements.push_back({bytes_name(messages[i].bytes, where), messages[i].seconds,
                                     prefix + "_efficiency", fit.efficiency[i - 1].efficiency, ""});
    }
  };
  spec.intra_node_bandwidth = intra.bandwidth;
  spec.intra_node_latency = latency_of(intra);
  spec.intra_node_efficiency = intra.efficiency;
  if (has_intra) {
    report_class(m.intra_node, intra, "same node", "intra_node");
    const MessageTime& best = m.intra_node[intra.bandwidth_index];
    report.measurements.push_back({bytes_name(best.bytes, "same node"), best.seconds,
                                   "intra_node_gbps", intra.bandwidth * 1e-9, "GB/s"});
  } else {
    report.notes.push_back(
        "one device per node: the intra-node constants are copies of the inter-node ones");
  }
  spec.inter_node_latency = latency_of(inter);
  spec.inter_node_efficiency = inter.efficiency;
  if (!has_inter) {
    spec.inter_node_bandwidth = intra.bandwidth;
    spec.nics_per_node = 1;
    report.notes.push_back(
        "one node: the inter-node constants are copies of the intra-node ones (nics_per_node 1)");
    return;
  }
  report_class(m.inter_node, inter, "other node", "inter_node");

  // The node's interfaces together: every device of node 0 sending to node 1 at once.
  const MessageTime& a = m.aggregate;
  if (a.bytes < 1) {
    throw InvalidInput("aggregate: " + std::to_string(a.bytes) +
                       " bytes; with several nodes the aggregate must be measured");
  }
  check_time(a.seconds, "aggregate (" + std::to_string(a.bytes) + " bytes)");
  const double moving = a.seconds - inter.small_seconds;
  if (moving <= 0) {
    throw InvalidInput("aggregate: " + std::to_string(a.bytes) + " bytes in " +
                       seconds_text(a.seconds) +
                       " is no slower than the inter-node small message (" +
                       seconds_text(inter.small_seconds) + "); measure larger sizes");
  }
  const double aggregate = static_cast<double>(shape.devices_per_node) *
                           static_cast<double>(a.bytes) /
                           (moving * size_efficiency(inter.efficiency, a.bytes));
  spec.inter_node_bandwidth = round4(aggregate, 1e9);
  spec.nics_per_node = nearest_divisor(shape.devices_per_node, aggregate / inter.bandwidth);
  const MessageTime& single = m.inter_node[inter.bandwidth_index];
  const std::string aggregate_name = "one way " + std::to_string(a.bytes) + " B, " +
                                     std::to_string(shape.devices_per_node) +
                                     " pairs node 0 -> node 1 at once";
  report.measurements.push_back(
      {aggregate_name, a.seconds, "inter_node_gbps", spec.inter_node_bandwidth * 1e-9, "GB/s"});
  report.measurements.push_back({bytes_name(single.bytes, "other node"), single.seconds,
                                 "nics_per_node", static_cast<double>(spec.nics_per_node), ""});
  char note[200];
  std::snprintf(note, sizeof note,
                "between nodes one pair alone reaches %.4g GB/s, the node's %d pairs together "
                "%.4g GB/s: nics_per_node = %d",
                inter.bandwidth * 1e-9, shape.devices_per_node, aggregate * 1e-9,
                spec.nics_per_node);
  report.notes.emplace_back(note);
}

namespace {

// A report named `name` whose spec is `start` with the device's constants fitted.
CalibrationReport device_fitted(ClusterSpec start, const std::string& name,
                                std::span<const std::vector<std::vector<double>>> device_timings,
                                const DeviceCalibrationOptions& device,
                                const KernelSubtiles& subtiles) {
  if (name.empty()) throw InvalidInput("the cluster's name is empty");
  CalibrationReport report;
  report.spec = std::move(start);
  report.spec.name = name;
  fit_device(device_timings, device, subtiles, report.spec, report.measurements);
  return report;
}

}  // namespace

CalibrationReport fit_cluster(const LinkMeasurements& links,
                              std::span<const std::vector<std::vector<double>>> device_timings,
                              const DeviceCalibrationOptions& device,
                              const KernelSubtiles& subtiles, const std::string& name) {
  ClusterSpec start;
  start.shape = links.shape;
  CalibrationReport report =
      device_fitted(std::move(start), name, device_timings, device, subtiles);
  fit_links(links, report);
  validate(report.spec);
  settle_file_form(report.spec);
  return report;
}

CalibrationReport fit_device_onto(const ClusterSpec& base,
                                  std::span<const std::vector<std::vector<double>>> device_timings,
                                  const DeviceCalibrationOptions& device,
                                  const KernelSubtiles& subtiles, const std::string& name) {
  CalibrationReport report = device_fitted(base, name, device_timings, device, subtiles);
  report.notes.push_back(
      "only the device was measured: the shape, links and network interfaces "
      "are those of " +
      base.name);
  validate(report.spec);
  settle_file_form(report.spec);
  return report;
}

std::vector<std::int64_t> sweep_sizes(const LinkCalibrationOptions& options) {
  const std::int64_t limit = std::int64_t{4} << 30;
  if (options.min_bytes < 8 || options.min_bytes > limit) {
    throw InvalidInput("link calibration option min_bytes must be in [8, 4294967296], got " +
                       std::to_string(options.min_bytes));
  }
  if (options.max_bytes < options.min_bytes || options.max_bytes > limit) {
    throw InvalidInput("link calibration option max_bytes must be in [min_bytes " +
                       std::to_string(options.min_bytes) + ", 4294967296], got " +
                       std::to_string(options.max_bytes));
  }
  std::vector<std::int64_t> sizes;
  for (std::int64_t s = options.min_bytes; s <= options.max_bytes; s *= 4) sizes.push_back(s);
  return sizes;
}

void check_calibration_world(const ClusterShape& shape, std::int32_t ranks) {
  validate(shape);
  if (shape.devices() != ranks) {
    throw InvalidInput("the cluster shape " + std::to_string(shape.nodes) + " x " +
                       std::to_string(shape.devices_per_node) + " has " +
                       std::to_string(shape.devices()) + " devices but there are " +
                       std::to_string(ranks) + " ranks");
  }
  if (ranks < 2) {
    throw InvalidInput("calibrating links needs at least 2 ranks, got " + std::to_string(ranks));
  }
}

ClusterShape shape_from_placements(std::span<const LauncherPlacement> placements,
                                   std::string_view variable) {
  const std::string name(variable);
  if (placements.empty()) throw InvalidInput("no rank's placement was given");
  const std::int32_t size = placements[0].local_size;
  const auto world = static_cast<std::int32_t>(placements.size());
  for (std::int32_t r = 0; r < world; ++r) {
    const LauncherPlacement& p = placements[to_size(r)];
    if (p.local_size < 1) {
      throw InvalidInput(name + " is not set (or not a positive number) on rank " +
                         std::to_string(r) +
                         ": cannot tell which ranks share a node; give the shape "
                         "(--nodes and --devices-per-node)");
    }
    if (p.local_size != size) {
      throw InvalidInput(name + " is " + std::to_string(p.local_size) + " on rank " +
                         std::to_string(r) + " but " + std::to_string(size) +
                         " on rank 0: the nodes run different numbers of ranks");
    }
    if (p.local_rank != r % size) {
      throw InvalidInput("rank " + std::to_string(r) + " is local rank " +
                         std::to_string(p.local_rank) + " of its node, not " +
                         std::to_string(r % size) +
                         ": the ranks must fill one node after another (mpirun --map-by slot)");
    }
  }
  if (world % size != 0) {
    throw InvalidInput("world size " + std::to_string(world) + " is not a multiple of " + name +
                       " " + std::to_string(size));
  }
  return {world / size, size};
}

std::vector<LauncherPlacement> exchange_placements(comm::Communicator& communicator,
                                                   LauncherPlacement mine) {
  const auto ranks = to_size(communicator.size());
  std::vector<LauncherPlacement> all(ranks);
  const std::size_t bytes = sizeof(LauncherPlacement);
  if (communicator.rank() != 0) {
    const comm::TransferOp send[] = {{Kind::kSend, 0, &mine, bytes}};
    communicator.wait(communicator.start(send));
    const comm::TransferOp recv[] = {{Kind::kRecv, 0, all.data(), bytes * ranks}};
    communicator.wait(communicator.start(recv));
    return all;
  }
  all[0] = mine;
  std::vector<comm::TransferOp> ops;
  for (std::size_t r = 1; r < ranks; ++r) {
    ops.push_back({Kind::kRecv, static_cast<std::int32_t>(r), &all[r], bytes});
  }
  communicator.wait(communicator.start(ops));
  ops.clear();
  for (std::size_t r = 1; r < ranks; ++r) {
    ops.push_back({Kind::kSend, static_cast<std::int32_t>(r), all.data(), bytes * ranks});
  }
  communicator.wait(communicator.start(ops));
  return all;
}

LinkMeasurements measure_links(comm::Communicator& communicator, const ClusterShape& shape,
                               const LinkCalibrationOptions& options) {
  check_calibration_world(shape, communicator.size());
  const std::vector<std::int64_t> sizes = sweep_sizes(options);
  if (options.repeats < 1 || options.repeats > 1000) {
    throw InvalidInput("link calibration option repeats must be in [1, 1000], got " +
                       std::to_string(options.repeats));
  }
  if (!(options.min_seconds >= 1e-4 && options.min_seconds <= 10)) {
    throw InvalidInput("link calibration option min_seconds must be in [0.0001, 10], got " +
                       std::to_string(options.min_seconds));
  }
  if (options.max_group_peers < 1 || options.max_group_peers > 1024) {
    throw InvalidInput("link calibration option max_group_peers must be in [1, 1024], got " +
                       std::to_string(options.max_group_peers));
  }
  std::vector<std::int64_t> message_sizes = {kSmallMessageBytes};
  for (const std::int64_t s : sizes) {
    if (s > kSmallMessageBytes) message_sizes.push_back(s);
  }
  const std::int32_t per_node = shape.devices_per_node;
  const std::int32_t group_peers = std::min(options.max_group_peers, shape.devices() - 1);
  Buffers buffers;
  buffers.send.assign(to_size(sizes.back()), 1);
  buffers.recv.assign(to_size(sizes.back()), 0);
  buffers.small_send.assign(to_size(shape.devices()), 1.0);
  buffers.small_recv.assign(to_size(shape.devices()), 0.0);
  std::vector<TimedOperation> ops;
  if (shape.devices_per_node > 1) {
    for (const std::int64_t s : message_sizes)
      ops.push_back(ping_pong(communicator, buffers, 0, 1, s));
  }
  if (shape.nodes > 1) {
    for (const std::int64_t s : message_sizes) {
      ops.push_back(ping_pong(communicator, buffers, 0, per_node, s));
    }
  }
  std::vector<std::shared_ptr<std::vector<double>>> issue;
  for (std::int32_t k = 1; k <= group_peers; ++k) {
    issue.push_back(std::make_shared<std::vector<double>>());
    ops.push_back(group_exchange(communicator, buffers, k, issue.back()));
  }
  if (shape.nodes > 1) {
    const std::int32_t rank = communicator.rank();
    const std::int32_t local = rank % per_node;
    ops.push_back(rank < 2 * per_node
                      ? ping_pong(communicator, buffers, local, per_node + local, sizes.back())
                      : TimedOperation{});
  }
  CommunicatorSync sync(communicator);
  const auto all = gather_to_root(communicator,
                                  time_operations(sync, ops, options.repeats, options.min_seconds));
  LinkMeasurements m;
  if (communicator.rank() != 0) return m;
  m.shape = shape;
  // Rank 0's round trips; one way is half. Each figure is the fastest repeat: on a shared machine
  // noise (a descheduled peer) only adds time.
  const auto fastest = [](const std::vector<double>& values) {
    return *std::min_element(values.begin(), values.end());
  };
  std::size_t op = 0;
  const auto one_way = [&](std::size_t index) { return fastest(all[0][index]) / 2; };
  if (shape.devices_per_node > 1) {
    for (const std::int64_t s : message_sizes) m.intra_node.push_back({s, one_way(op++)});
  }
  if (shape.nodes > 1) {
    for (const std::int64_t s : message_sizes) m.inter_node.push_back({s, one_way(op++)});
  }
  for (std::int32_t k = 1; k <= group_peers; ++k) {
    m.groups.push_back({k, median(*issue[to_size(k - 1)]), fastest(all[0][op++])});
  }
  if (shape.nodes > 1) {
    // Each repeat: the slowest pair's round trip.
    std::vector<double> slowest(to_size(options.repeats), 0.0);
    for (std::int32_t r = 0; r < per_node; ++r) {
      for (std::size_t i = 0; i < slowest.size(); ++i) {
        slowest[i] = std::max(slowest[i], all[to_size(r)][op][i]);
      }
    }
    m.aggregate = {sizes.back(), fastest(slowest) / 2};
  }
  return m;
}

CalibrationReport calibrate_cluster(comm::Communicator& communicator, const ClusterShape& shape,
                                    const ClusterCalibrationOptions& options) {
  check_calibration_world(shape, communicator.size());
  const std::vector<DeviceCall> calls = device_calls(options.device);  // checks the options
  sweep_sizes(options.links);
  const bool root = communicator.rank() == 0;
  const auto progress = [&](const std::string& line) {
    if (root && options.progress) options.progress(line);
  };
  const std::string on_ranks = " on " + std::to_string(shape.devices()) + " ranks (" +
                               std::to_string(shape.nodes) + " x " +
                               std::to_string(shape.devices_per_node) + ")";
  progress("timing " + std::to_string(calls.size() - 1) + " attention calls and a memcpy" +
           on_ranks + " at once");
  CommunicatorSync sync(communicator);
  const auto device =
      gather_to_root(communicator, time_cpu_device(sync, communicator.rank(), options.device));
  progress("timing messages of 8 B and " + std::to_string(options.links.min_bytes) + " .. " +
           std::to_string(options.links.max_bytes) + " B, groups of transfers" +
           (shape.nodes > 1 ? " and all of node 0 sending to node 1 at once" : "") + on_ranks);
  const LinkMeasurements links = measure_links(communicator, shape, options.links);
  if (!root) return {};
  return fit_cluster(links, device, options.device, cpu_kernel_subtiles(), options.name);
}

}  // namespace dcp::calibration
