// SPDX-License-Identifier: Apache-2.0
// Running dcp commands in-process from tests, the files they read and the files they write.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/npy.h"

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

// A float32 .npy of `shape` holding values in [-0.5, 0.5) from `seed`.
inline void write_f4(const std::string& path, std::vector<std::int64_t> shape, std::uint64_t seed) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  std::vector<float> values(static_cast<std::size_t>(n));
  std::uint64_t x = seed;
  for (float& v : values) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1 << 24) - 0.5);
  }
  write_npy(path, "<f4", shape, values.data(), values.size() * sizeof(float));
}

// Inputs for `dcp attention`, named after `tag` so that tests running at once do not share files.
struct AttentionFiles {
  std::string dir, q, k, v, dout;
  explicit AttentionFiles(const std::string& tag)
      : dir(temp_path(tag + "_out")),
        q(temp_path(tag + "_q.npy")),
        k(temp_path(tag + "_k.npy")),
        v(temp_path(tag + "_v.npy")),
        dout(temp_path(tag + "_do.npy")) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    write_f4(q, {300, 4, 8}, 1);
    write_f4(k, {300, 2, 8}, 2);
    write_f4(v, {300, 2, 8}, 3);
    write_f4(dout, {300, 4, 8}, 4);
  }
  ~AttentionFiles() {
    std::filesystem::remove_all(dir);
    for (const auto& path : {q, k, v, dout}) std::filesystem::remove(path);
  }
  std::vector<std::string> args(std::vector<std::string> extra) const {
    std::vector<std::string> argv = {
        "attention", "--q",       q,          "--k",          k,    "--v",       v,  "--do",
        dout,        "--seqlens", "200,99,1", "--block-size", "64", "--out-dir", dir};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
};

}  // namespace dcp::cli
