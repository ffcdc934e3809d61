// SPDX-License-Identifier: Apache-2.0
// Declared command-line flags and their strict parsing.
#include "apps/cli/args.h"

#include <algorithm>
#include <cstdio>

#include "dcp/core/parse.h"

namespace dcp::cli {

Args::Args(std::span<const FlagSpec> specs, std::span<const std::string> argv,
           std::size_t max_positional) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const auto short_spec = std::find_if(specs.begin(), specs.end(), [&](const FlagSpec& s) {
      return !s.short_name.empty() && s.short_name == argv[i];
    });
    const std::string arg = short_spec != specs.end() ? std::string(short_spec->name) : argv[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      if (positional_.size() < max_positional && (arg.empty() || arg[0] != '-' || arg == "-")) {
        positional_.push_back(arg);
        continue;
      }
      throw UsageError("unexpected argument " + quoted(arg));
    }
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const auto spec =
        std::find_if(specs.begin(), specs.end(), [&](const FlagSpec& s) { return s.name == name; });
    if (spec == specs.end()) throw UsageError("unknown flag " + quoted(name));
    if (values_.count(name) != 0 && !spec->repeatable) throw UsageError(name + " is given twice");
    std::string value;
    if (spec->value_name.empty()) {
      if (eq != std::string::npos) throw UsageError(name + " takes no value");
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= argv.size()) {
        throw UsageError(name + " needs a value (" + std::string(spec->value_name) + ")");
      }
      value = argv[++i];
    }
    if (values_.count(name) == 0) values_.emplace(name, value);
    repeated_[name].push_back(std::move(value));
  }
}

std::vector<std::string> Args::get_all(std::string_view name) const {
  const auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>{} : it->second;
}

std::optional<std::string> Args::get(std::string_view name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get_or(std::string_view name, std::string_view fallback) const {
  const auto value = get(name);
  return value ? *value : std::string(fallback);
}

std::int64_t Args::get_int(std::string_view name, std::int64_t fallback, std::int64_t min,
                           std::int64_t max) const {
  const auto text = get(name);
  if (!text) return fallback;
  const std::string flag = std::string(name) + " " + quoted(*text);
  const std::int64_t value = parse_int(*text, name);
  if (value < min || value > max) {
    throw UsageError(flag + ": must be " +
                     (max == INT64_MAX
                          ? ">= " + std::to_string(min)
                          : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]"));
  }
  return value;
}

double Args::get_double(std::string_view name, double fallback) const {
  const auto text = get(name);
  if (!text) return fallback;
  return parse_double(*text, name);
}

std::string format_help(std::string_view usage, std::string_view summary,
                        std::span<const FlagSpec> specs) {
  // Appends only: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string(...) at -O2.
  std::string out = "usage: ";
  out.append(usage).append("\n\n").append(summary).append("\n\nflags:\n");
  for (const FlagSpec& spec : specs) {
    std::string left = "  ";
    if (!spec.short_name.empty()) left.append(spec.short_name).append(", ");
    left.append(spec.name);
    if (!spec.value_name.empty()) left.append(" ").append(spec.value_name);
    left.append(left.size() < 28 ? 28 - left.size() : 2, ' ');
    out.append(left).append(spec.help).append("\n");
  }
  return out;
}

std::string format_mb(std::int64_t bytes, int decimals) {
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, static_cast<double>(bytes) / 1e6);
  return buffer;
}

}  // namespace dcp::cli
