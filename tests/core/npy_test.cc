// SPDX-License-Identifier: Apache-2.0
// .npy files round-trip, and every way a file can be broken is a clear InvalidInput.
#include "dcp/core/npy.h"

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

namespace dcp {
namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out(text.size());
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::string npy_file(const std::string& header, const std::string& data, char major = 1) {
  std::string file = "\x93NUMPY";
  file.push_back(major);
  file.push_back('\0');
  file.push_back(static_cast<char>(header.size() & 0xFF));
  file.push_back(static_cast<char>(header.size() >> 8));
  if (major != 1) file += std::string(2, '\0');
  return file + header + data;
}

TEST(Npy, WriteThenReadRoundTrips) {
  const std::string path = (std::filesystem::temp_directory_path() / "dcp_npy_test.npy").string();
  const std::vector<std::int32_t> values = {1, -2, 3, 4, 5, 6};
  write_npy(path, "<i4", {3, 1, 2}, values.data(), values.size() * 4);
  const NpyArray array = read_npy(path);
  EXPECT_EQ(array.descr, "<i4");
  EXPECT_EQ(array.shape, (std::vector<std::int64_t>{3, 1, 2}));
  ASSERT_EQ(array.data.size(), 24u);
  EXPECT_EQ(std::memcmp(array.data.data(), values.data(), 24), 0);
  std::filesystem::remove(path);
}

TEST(Npy, ReadsOneDimensionalAndScalarShapes) {
  const NpyArray vec =
      parse_npy(bytes_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n",
                                  std::string(8, '\0'))),
                "v");
  EXPECT_EQ(vec.shape, (std::vector<std::int64_t>{2}));
  const NpyArray scalar =
      parse_npy(bytes_of(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n",
                                  std::string(8, '\0'))),
                "s");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.element_count(), 1);
}

void expect_invalid(const std::string& file, const std::string& fragment) {
  try {
    parse_npy(bytes_of(file), "bad.npy");
    ADD_FAILURE() << "accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.npy"), std::string::npos) << e.what();
  }
}

TEST(Npy, RejectsBrokenFilesWithAClearMessage) {
  const std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }\n";
  expect_invalid("", "magic");
  expect_invalid("PK\x03\x04 not numpy", "magic");
  expect_invalid(npy_file(header, std::string(15, '\0')), "truncated data");
  expect_invalid(npy_file(header, std::string(17, '\0')), "bytes after the data");
  expect_invalid(npy_file(header, std::string(16, '\0'), 9), "unsupported format version 9");
  expect_invalid(npy_file(header, "").substr(0, 20), "truncated header");
  expect_invalid(
      npy_file("{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }\n", std::string(4, '\0')),
      "unsupported dtype '>i4'");
  expect_invalid(
      npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (1,), }\n", std::string(4, '\0')),
      "Fortran");
  expect_invalid(npy_file("{'descr': '<i4', 'fortran_order': False}\n", ""), "no 'shape'");
  expect_invalid(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (-1,), }\n", ""),
                 "negative");
  expect_invalid(
      npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }\n",
               ""),
      "too large");
}

TEST(Npy, SurvivesEveryTruncationAndRandomCorruption) {
  const std::string good = npy_file(
      "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 1, 2), }\n", std::string(24, '\1'));
  for (std::size_t cut = 0; cut < good.size(); ++cut) {
    EXPECT_THROW(parse_npy(bytes_of(good.substr(0, cut)), "cut.npy"), InvalidInput) << cut;
  }
  Rng rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bad = good;
    for (int flips = 0; flips < 3; ++flips) {
      bad[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(bad.size()) - 1))] =
          static_cast<char>(rng.uniform_int(0, 255));
    }
    try {
      const NpyArray array = parse_npy(bytes_of(bad), "fuzz.npy");
      EXPECT_EQ(array.data.size(),
                static_cast<std::size_t>(array.element_count()) * array.item_size());
    } catch (const InvalidInput&) {
    }
  }
}

TEST(Npy, MissingFileIsAnIoError) { EXPECT_THROW(read_npy("/nonexistent/dcp.npy"), IoError); }

}  // namespace
}  // namespace dcp
