// SPDX-License-Identifier: Apache-2.0
// Running dcp commands in-process from tests, and the files they write.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/cli/command_table.h"

namespace dcp::cli {

struct Result {
  int status;
  std::string out;
  std::string err;
};

inline Result run(const std::vector<std::string>& argv) {
  std::ostringstream out, err;
  const int status = run_main(argv, out, err);
  return {status, out.str(), err.str()};
}

// Every bad input: exit 2, nothing on stdout, one line on stderr that contains `fragment`.
inline void expect_usage_error(const std::vector<std::string>& argv, const std::string& fragment) {
  const Result r = run(argv);
  std::string joined;
  for (const auto& a : argv) joined += a + " ";
  EXPECT_EQ(r.status, 2) << joined;
  EXPECT_EQ(r.out, "") << joined;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << joined << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("dcp_cli_test_" + name)).string();
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace dcp::cli
