// SPDX-License-Identifier: Apache-2.0
// `dcp calibrate`: the cluster file it writes reads back as the text it prints, and bad flags
// exit 2 without writing anything (the mpi runs are tests/apps/calibrate_mpi.sh).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/model/cluster.h"
#include "dcp/model/cluster_file.h"

#include "apps/cli/command_table.h"
#include "tests/apps/cli_testing.h"

namespace dcp::cli {
namespace {

// Small tiles and buffers: the command's wiring, not the machine, is under test.
std::vector<std::string> fast(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"calibrate", "--repeats", "1", "--tile-tokens", "128", "--copy-bytes",
                             "1048576", "--message-bytes", "262144", "--timing-seconds", "0.005"});
  return argv;
}

TEST(CalibrateCommand, WritesAClusterFileThatReadsBackAsThePrintedText) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "dcp_calibrate_test.cluster").string();
  std::filesystem::remove(path);
  const Result r = run(fast({"--out", path}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("forward_tflops"), std::string::npos) << r.out;
  const std::size_t at = r.out.find("\nname = ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string printed = r.out.substr(at + 1);
  EXPECT_EQ(read_all(path), printed);
  const ClusterSpec spec = resolve_cluster(path);
  EXPECT_EQ(spec.name, "cpu-local");
  EXPECT_EQ(spec.shape, (ClusterShape{1, 2}));
  EXPECT_EQ(to_cluster_text(spec), printed);
  EXPECT_NE(r.out.find("note: one process: the inter-node constants are copies"), std::string::npos)
      << r.out;
  std::filesystem::remove(path);
}

TEST(CalibrateCommand, RejectsBadFlagsWithExitStatus2AndWritesNothing) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "dcp_calibrate_bad.cluster").string();
  std::filesystem::remove(path);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"calibrate", "--devices", "0", "--out", path}, "--devices"},
      {{"calibrate", "--devices", "300", "--out", path}, "--devices"},
      {{"calibrate", "--repeats", "0", "--out", path}, "--repeats"},
      {{"calibrate", "--tile-tokens", "32", "--out", path}, "--tile-tokens"},
      {{"calibrate", "--tile-tokens", "x", "--out", path}, "--tile-tokens"},
      {{"calibrate", "--copy-bytes", "1", "--out", path}, "--copy-bytes"},
      {{"calibrate", "--bogus", "--out", path}, "--bogus"},
      {{"calibrate", "--out", path + ".missing/dir/file"}, "--out"},
      {{"calibrate", "--timing-seconds", "0", "--out", path}, "--timing-seconds"},
      {{"calibrate", "--comm", "carrier-pigeon", "--out", path}, "--comm"},
      {{"calibrate", "--nodes", "2", "--out", path}, "--nodes"},
      {{"calibrate", "--max-bytes", "65536", "--out", path}, "--max-bytes"},
      {{"calibrate", "--comm", "mpi", "--devices", "4", "--out", path}, "--devices"},
      {{"calibrate", "--comm", "mpi", "--min-bytes", "65536", "--max-bytes", "4096", "--out", path},
       "--max-bytes"},
  };
  for (const auto& [argv, flag] : cases) {
    const Result r = run(argv);
    EXPECT_EQ(r.status, 2) << flag;
    EXPECT_EQ(r.out, "") << flag;
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path)) << flag;
  }
}

TEST(CalibrateCommand, ExplainsItsFlags) {
  const Result r = run({"calibrate", "--help"});
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--devices", "--repeats", "--tile-tokens", "--out", "--comm", "--nodes",
                           "--devices-per-node", "--min-bytes", "--max-bytes", "--group-peers"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace dcp::cli
