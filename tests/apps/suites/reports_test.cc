// SPDX-License-Identifier: Apache-2.0
// The suites' number formats, and their report files: written only into the folder given.
#include "apps/suites/reports.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

namespace dcp::suites {
namespace {

std::filesystem::path temp_folder(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("dcp_suites_test_" + name);
}

TEST(SuiteReports, FormatNumbersForTables) {
  EXPECT_EQ(format_fixed(2.345, 2), "2.35");
  EXPECT_EQ(format_fixed(7, 0), "7");
  EXPECT_EQ(format_percent(0.125), "12.5 %");
  EXPECT_EQ(format_scale(0.5), "x0.5");
  EXPECT_EQ(format_scale(4), "x4");
}

TEST(SuiteReports, TakesTheMedianOfAnyCount) {
  EXPECT_EQ(median_of({}), 0);
  EXPECT_EQ(median_of({3, 1, 2}), 2);
  EXPECT_EQ(median_of({4, 1, 3, 2}), 2.5);
}

TEST(SuiteReports, WritesAReportIntoTheFolderItIsGiven) {
  const std::filesystem::path root = temp_folder("reports");
  std::filesystem::remove_all(root);
  const std::string folder = (root / "a" / "b").string();
  create_folder(folder);
  ASSERT_TRUE(std::filesystem::is_directory(folder));
  create_folder(folder);  // a folder that exists is fine
  create_folder("");      // so is no folder
  const std::string path = write_report(folder, "report.md", "# Report\n");
  EXPECT_EQ(path, folder + "/report.md");
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "# Report\n");
  std::filesystem::remove_all(root);
}

TEST(SuiteReports, RefusesAFolderBehindAFile) {
  const std::filesystem::path root = temp_folder("blocked");
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  const std::filesystem::path file = root / "file";
  { std::ofstream(file) << "not a folder"; }
  try {
    create_folder(file / "report");
    ADD_FAILURE() << "a folder behind a file was made";
  } catch (const InvalidInput& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot create the folder '" + (file / "report").string() + "'"),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(file / "report"));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace dcp::suites
