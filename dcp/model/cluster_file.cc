// SPDX-License-Identifier: Apache-2.0
// Cluster files: "key = value" text read into a ClusterSpec and written back.
#include "dcp/model/cluster_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/model/cluster_fields.h"
#include "dcp/model/cluster_presets.h"

namespace dcp {

namespace {

using cluster_detail::curve_problem;
using cluster_detail::CurveField;
using cluster_detail::Field;
using cluster_detail::IntField;
using cluster_detail::kCurveFields;
using cluster_detail::kFields;
using cluster_detail::kIntFields;

// "65536:0.5, 1048576:0.9"; empty: no curve (efficiency 1 at every size).
std::vector<SizeEfficiency> parse_curve(std::string_view value, const std::string& what) {
  std::vector<SizeEfficiency> curve;
  if (trim(value).empty()) return curve;
  for (std::string_view item : split(value, ',')) {
    item = trim(item);
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      throw InvalidInput(what + ": expected BYTES:EFFICIENCY points separated by commas, got " +
                         quoted(item));
    }
    curve.push_back({parse_int(trim(item.substr(0, colon)), what),
                     parse_double(trim(item.substr(colon + 1)), what)});
  }
  if (const std::string problem = curve_problem(curve); !problem.empty()) {
    throw InvalidInput(what + ": " + problem);
  }
  return curve;
}

// A file's number in the spec's unit: times a unit of 1 or more, divided by the power of ten of a
// smaller one (1e-6: divided by 1e6, one correctly rounded operation, so "10" us is 1e-5 s).
double from_file_unit(double number, double unit) {
  return unit >= 1 ? number * unit : number / std::round(1 / unit);
}

// The shortest decimal that reads back (from_file_unit) as `value`, written without an exponent
// where it is between 1e-4 and 1e15: 4040 rather than 4040.0000000000005 for 4.04e-3 s in us.
std::string shortest(double value, double unit = 1) {
  const double quotient = unit >= 1 ? value / unit : value * std::round(1 / unit);
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, quotient);
    if (from_file_unit(std::strtod(buffer, nullptr), unit) != value) continue;
    const double magnitude = std::abs(quotient);
    if (magnitude >= 1e-4 && magnitude < 1e15) {
      const int exponent = static_cast<int>(std::floor(std::log10(magnitude)));
      char plain[64];
      std::snprintf(plain, sizeof plain, "%.*f", std::max(0, digits - 1 - exponent), quotient);
      if (from_file_unit(std::strtod(plain, nullptr), unit) == value) return plain;
    }
    return buffer;
  }
  std::snprintf(buffer, sizeof buffer, "%.17g", quotient);
  return buffer;
}

}  // namespace

ClusterSpec parse_cluster_text(std::string_view text, std::string_view origin) {
  ClusterSpec spec;
  spec.name = "";
  std::vector<std::string> seen;
  bool have_shape[2] = {false, false};
  bool have_field[std::size(kFields)] = {};
  std::int64_t line_number = 0;
  for (std::string_view line : split(text, '\n')) {
    ++line_number;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    line = trim(line);
    if (line.empty()) continue;
    std::string where(origin);
    where.append(":").append(std::to_string(line_number));
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      throw InvalidInput(where + ": expected 'key = value', got " + quoted(line));
    }
    const std::string key(trim(line.substr(0, eq)));
    const std::string_view value = trim(line.substr(eq + 1));
    for (const std::string& k : seen) {
      if (k == key) throw InvalidInput(where + ": key " + quoted(key) + " given twice");
    }
    std::string what = where;
    what.append(": ").append(key);
    if (key == "preset") {
      if (!seen.empty()) throw InvalidInput(where + ": 'preset' must be the first key");
      spec = cluster_preset(value);
      have_shape[0] = have_shape[1] = true;
      for (bool& f : have_field) f = true;
    } else if (key == "name") {
      spec.name = std::string(value);
    } else if (key == "nodes" || key == "devices_per_node") {
      const std::int64_t count = parse_int(value, what);
      if (count < 1 || count > 65536) {
        throw InvalidInput(what + " must be in [1, 65536], got " + quoted(value));
      }
      (key == "nodes" ? spec.shape.nodes : spec.shape.devices_per_node) =
          static_cast<std::int32_t>(count);
      have_shape[key == "nodes" ? 0 : 1] = true;
    } else {
      bool known = false;
      for (const IntField& f : kIntFields) {
        if (key != f.key) continue;
        const std::int64_t number = parse_int(value, what);
        if (number < f.min || number > f.max) {
          throw InvalidInput(what + " must be in [" + std::to_string(f.min) + ", " +
                             std::to_string(f.max) + "], got " + quoted(value));
        }
        spec.*f.member = static_cast<std::int32_t>(number);
        known = true;
      }
      for (const CurveField& f : kCurveFields) {
        if (key != f.key) continue;
        spec.*f.member = parse_curve(value, what);
        known = true;
      }
      if (key == "whole_subtiles") {
        const std::int64_t flag = parse_int(value, what);
        if (flag != 0 && flag != 1)
          throw InvalidInput(what + " must be 0 or 1, got " + quoted(value));
        spec.whole_subtiles = flag == 1;
        known = true;
      }
      for (std::size_t f = 0; f < std::size(kFields); ++f) {
        if (key != kFields[f].key) continue;
        const double number = parse_double(value, what);
        // A stream bandwidth of 0 is no cap; every other rate is at least 1 kB/s or 1 MFLOP/s: a
        // floor against typos, far below what `dcp calibrate` measures on a busy debug build
        // (0.75 GFLOP/s seen), whose files must read back.
        const bool is_rate =
            kFields[f].unit >= 1e9 && !(key.ends_with("_stream_gbps") && number == 0);
        if (is_rate ? !(number >= 1e-6) : !(number >= 0)) {
          throw InvalidInput(what +
                             (is_rate ? " must be at least 0.000001" : " must not be negative") +
                             ", got " + quoted(value));
        }
        spec.*kFields[f].member = from_file_unit(number, kFields[f].unit);
        have_field[f] = known = true;
      }
      if (!known) {
        std::string keys = "preset, name, nodes, devices_per_node";
        for (const Field& f : kFields) keys.append(", ").append(f.key);
        for (const IntField& f : kIntFields) keys.append(", ").append(f.key);
        keys.append(", whole_subtiles");
        for (const CurveField& f : kCurveFields) keys.append(", ").append(f.key);
        throw InvalidInput(where + ": unknown key " + quoted(key) + " (keys: " + keys + ")");
      }
    }
    seen.push_back(key);
  }
  const auto require = [&](bool present, const char* key) {
    if (!present) {
      throw InvalidInput(std::string(origin) + ": missing key '" + key +
                         "' (or start with 'preset = NAME')");
    }
  };
  require(have_shape[0], "nodes");
  require(have_shape[1], "devices_per_node");
  for (std::size_t f = 0; f < std::size(kFields); ++f) {
    if (kFields[f].required) require(have_field[f], kFields[f].key);
  }
  if (spec.name.empty()) spec.name = std::string(origin);
  validate(spec);
  return spec;
}

ClusterSpec read_cluster_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open cluster file " + quoted(path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError("cannot read cluster file " + quoted(path));
  return parse_cluster_text(text.str(), path);
}

ClusterSpec resolve_cluster(const std::string& preset_or_file) {
  if (is_cluster_preset(preset_or_file)) return cluster_preset(preset_or_file);
  std::ifstream probe(preset_or_file);
  if (!probe) {
    throw InvalidInput("--cluster " + quoted(preset_or_file) + " is neither a preset (" +
                       cluster_preset_list() + ") nor a readable file");
  }
  return read_cluster_file(preset_or_file);
}

std::string to_cluster_text(const ClusterSpec& spec) {
  std::string out = "name = " + spec.name + "\n";
  out += "nodes = " + std::to_string(spec.shape.nodes) + "\n";
  out += "devices_per_node = " + std::to_string(spec.shape.devices_per_node) + "\n";
  for (const Field& f : kFields) {
    out.append(f.key).append(" = ").append(shortest(spec.*f.member, f.unit)).append("\n");
  }
  for (const IntField& f : kIntFields) {
    out.append(f.key).append(" = ").append(std::to_string(spec.*f.member)).append("\n");
  }
  out.append("whole_subtiles = ").append(spec.whole_subtiles ? "1" : "0").append("\n");
  for (const CurveField& f : kCurveFields) {
    const std::vector<SizeEfficiency>& curve = spec.*f.member;
    if (curve.empty()) continue;
    out.append(f.key).append(" =");
    for (std::size_t i = 0; i < curve.size(); ++i) {
      out.append(i == 0 ? " " : ", ")
          .append(std::to_string(curve[i].bytes))
          .append(":")
          .append(shortest(curve[i].efficiency));
    }
    out.append("\n");
  }
  return out;
}

}  // namespace dcp
