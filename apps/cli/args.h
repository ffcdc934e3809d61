// SPDX-License-Identifier: Apache-2.0
// Declared command-line flags and their strict parsing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp::cli {

// A usage error: unknown flag, missing value, a value that does not parse. Exit status 2.
class UsageError : public InvalidInput {
 public:
  using InvalidInput::InvalidInput;
};

struct FlagSpec {
  std::string_view name;        // "--heads"
  std::string_view value_name;  // "N"; empty for a boolean flag
  std::string_view help;
  std::string_view short_name = {};  // "-o": another spelling of `name`; empty for none
  bool repeatable = false;           // may be given several times (get_all)
};

// Flags as given: "--name value", "--name=value", or "--name" for booleans. Each flag at most once
// unless its spec is repeatable (get: its first value; get_all: every value in order);
// no positional arguments unless the command declares how many it takes.
class Args {
 public:
  // Throws UsageError naming the offending argument.
  Args(std::span<const FlagSpec> specs, std::span<const std::string> argv,
       std::size_t max_positional = 0);

  bool has(std::string_view name) const { return values_.count(std::string(name)) != 0; }
  std::optional<std::string> get(std::string_view name) const;
  std::vector<std::string> get_all(std::string_view name) const;
  std::string get_or(std::string_view name, std::string_view fallback) const;
  // Integer flag with a lower bound; the error names the flag and the value.
  std::int64_t get_int(std::string_view name, std::int64_t fallback, std::int64_t min,
                       std::int64_t max = INT64_MAX) const;
  double get_double(std::string_view name, double fallback) const;
  bool flag(std::string_view name) const { return has(name); }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, std::vector<std::string>, std::less<>> repeated_;
  std::vector<std::string> positional_;
};

// Bytes as megabytes (1e6) with `decimals` digits, for tables.
std::string format_mb(std::int64_t bytes, int decimals);

// The help text of a command: usage line, summary and one line per flag.
std::string format_help(std::string_view usage, std::string_view summary,
                        std::span<const FlagSpec> specs);

// Runs `body`; an InvalidInput (or IoError) thrown inside is rethrown as a UsageError whose message
// starts with `context` (e.g. "--mask 'x'"), so that every error names the flag it came from.
template <typename F>
auto with_flag(const std::string& context, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const UsageError&) {
    throw;
  } catch (const InvalidInput& e) {
    throw UsageError(context + ": " + e.what());
  } catch (const IoError& e) {
    throw UsageError(context + ": " + e.what());
  }
}

// A comma-separated flag value parsed item by item (`fallback` when the flag is absent); an item's
// error names the flag. Throws UsageError for an empty list.
template <typename T, typename Parse>
std::vector<T> list_flag(const Args& args, std::string_view flag, std::string_view fallback,
                         Parse parse) {
  std::vector<T> values;
  const std::string text = args.get_or(flag, fallback);
  for (const std::string_view item : split(text, ',')) {
    values.push_back(with_flag(std::string(flag), [&] { return parse(trim(item)); }));
  }
  if (values.empty()) throw UsageError(std::string(flag) + ": give at least one value");
  return values;
}

}  // namespace dcp::cli
