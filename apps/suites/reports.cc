// SPDX-License-Identifier: Apache-2.0
// The suites' number formats and report files.
#include "apps/suites/reports.h"

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "dcp/core/error.h"
#include "dcp/core/npy.h"
#include "dcp/core/parse.h"

namespace dcp::suites {

std::string format_scale(double scale) {
  char text[16];
  std::snprintf(text, sizeof text, "x%g", scale);
  return text;
}

std::string format_fixed(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string format_percent(double fraction) { return format_fixed(100 * fraction, 1) + " %"; }

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void create_folder(const std::filesystem::path& folder) {
  if (folder.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error || !std::filesystem::is_directory(folder)) {
    throw InvalidInput("cannot create the folder " + dcp::quoted(folder.string()) +
                       (error ? ": " + error.message() : ""));
  }
}

std::string write_report(const std::string& folder, const std::string& name,
                         const std::string& text) {
  const std::string path = folder + "/" + name;
  write_file_atomically(path, text);
  return path;
}

}  // namespace dcp::suites
