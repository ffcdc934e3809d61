// SPDX-License-Identifier: Apache-2.0
// What the suites' reports share: the number formats of their tables, and writing report files
// into the folder their caller names (a suite never chooses where its reports go).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace dcp::suites {

// `value` with `decimals` digits after the point, for tables.
std::string format_fixed(double value, int decimals);
// A fraction as a percentage with one decimal: "12.5 %".
std::string format_percent(double fraction);
// The median (the mean of the middle two for an even count; 0 for none).
double median_of(std::vector<double> values);
// A length scale as tables and progress show it: "x0.5".
std::string format_scale(double scale);

// Creates `folder` and the folders above it, so that a run of minutes does not end at a folder
// that is not there; nothing for an empty path or a folder that exists. Throws InvalidInput
// "cannot create the folder 'FOLDER'" (with the system's reason where it gives one).
void create_folder(const std::filesystem::path& folder);

// Writes `text` atomically to `folder` + "/" + `name` and returns that path. Throws what
// write_file_atomically throws (InvalidInput or IoError naming the path).
std::string write_report(const std::string& folder, const std::string& name,
                         const std::string& text);

}  // namespace dcp::suites
