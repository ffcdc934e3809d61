// SPDX-License-Identifier: Apache-2.0
// Strict parsing of numbers and lists from user text.
#include "dcp/core/parse.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "dcp/core/error.h"

namespace dcp {

std::string quoted(std::string_view text) {
  // Built by appending: GCC 12 warns falsely (-Wrestrict) on "'" + std::string(...) at -O2.
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('\'');
  out.append(text);
  out.push_back('\'');
  return out;
}

std::string_view trim(std::string_view text) {
  const auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

std::int64_t parse_int(std::string_view text, std::string_view what) {
  std::int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (!text.empty() && text.front() == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != last) {
    throw InvalidInput(std::string(what) + ": " + quoted(text) + " is not an integer");
  }
  if (ec == std::errc::result_out_of_range) {
    throw InvalidInput(std::string(what) + ": " + quoted(text) + " is out of range");
  }
  return value;
}

double parse_double(std::string_view text, std::string_view what) {
  // std::from_chars for double is available in libstdc++ 11+, and does not depend on the locale.
  double value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (!text.empty() && text.front() == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc() || ptr != last || !std::isfinite(value)) {
    throw InvalidInput(std::string(what) + ": " + quoted(text) + " is not a finite number");
  }
  return value;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      pieces.push_back(text.substr(start));
      return pieces;
    }
    pieces.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

std::vector<std::int64_t> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<std::int64_t> values;
  if (trim(text).empty()) {
    throw InvalidInput(std::string(what) + ": the list is empty");
  }
  for (std::string_view item : split(text, ',')) {
    item = trim(item);
    if (item.empty()) {
      throw InvalidInput(std::string(what) + ": " + quoted(text) + " has an empty item");
    }
    values.push_back(parse_int(item, what));
  }
  return values;
}

}  // namespace dcp
