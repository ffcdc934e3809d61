// SPDX-License-Identifier: Apache-2.0
// Strict parsing of numbers and lists from user text; every failure names the text and its role.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dcp {

// Parses a whole string as a base-10 integer ("12", "-3"); no trailing characters, no overflow.
// `what` names the value in the error message, e.g. "--heads".
// Throws InvalidInput on failure.
std::int64_t parse_int(std::string_view text, std::string_view what);

// Parses a whole string as a finite floating-point number. Throws InvalidInput on failure.
double parse_double(std::string_view text, std::string_view what);

// Parses "1,2,3" (spaces around items allowed) into integers. An empty item is an error.
std::vector<std::int64_t> parse_int_list(std::string_view text, std::string_view what);

// Splits on a separator, keeping empty pieces.
std::vector<std::string_view> split(std::string_view text, char separator);

// Removes leading and trailing ASCII whitespace.
std::string_view trim(std::string_view text);

// Quotes a user-supplied value for an error message: 'value'. The std::string overload is an
// exact match, so that a std::string argument never picks std::quoted, which argument-dependent
// lookup also finds wherever <iomanip> is included.
std::string quoted(std::string_view text);
inline std::string quoted(const std::string& text) { return quoted(std::string_view(text)); }

}  // namespace dcp
