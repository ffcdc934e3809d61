// SPDX-License-Identifier: Apache-2.0
// Mask files: arbitrary per-row intervals round-trip exactly; malformed files are rejected clearly.
#include "dcp/model/mask_file.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/npy.h"
#include "dcp/core/rng.h"

#include "dcp/model/mask_spec.h"

#include "tests/testing/brute_force_mask.h"
#include "tests/testing/mask_checks.h"

namespace dcp {
namespace {

NpyArray int32_array(std::vector<std::int64_t> shape, const std::vector<std::int32_t>& values) {
  NpyArray array;
  array.descr = "<i4";
  array.shape = std::move(shape);
  array.data.resize(values.size() * sizeof(std::int32_t));
  if (!values.empty()) std::memcpy(array.data.data(), values.data(), array.data.size());
  return array;
}

std::string error_of(const NpyArray& array, const SequenceBatch& batch) {
  try {
    masks_from_array(array, batch, "m.npy");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(MaskFile, RandomPerRowIntervalsMatchTheirUnionElementByElement) {
  Rng rng(99);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<TokenCount> lengths;
    for (auto s = rng.uniform_int(1, 3); s > 0; --s) lengths.push_back(rng.uniform_int(1, 90));
    const SequenceBatch batch(lengths);
    const auto slots = rng.uniform_int(1, 4);
    std::vector<std::int32_t> values;
    std::vector<std::vector<char>> expected;
    for (const TokenCount length : lengths) {
      expected.emplace_back(static_cast<std::size_t>(length * length), 0);
      for (TokenCount i = 0; i < length; ++i) {
        for (std::int64_t k = 0; k < slots; ++k) {
          TokenCount s = rng.uniform_int(0, length), e = rng.uniform_int(0, length);
          if (s > e) std::swap(s, e);
          if (rng.uniform_int(0, 3) == 0) s = e = 0;  // unused slot
          values.push_back(static_cast<std::int32_t>(s));
          values.push_back(static_cast<std::int32_t>(e));
          for (TokenCount j = s; j < e; ++j)
            expected.back()[static_cast<std::size_t>(i * length + j)] = 1;
        }
      }
    }
    const auto masks =
        masks_from_array(int32_array({batch.total_tokens(), slots, 2}, values), batch, "t");
    ASSERT_EQ(masks.size(), lengths.size());
    for (std::size_t s = 0; s < masks.size(); ++s) {
      testing::expect_normal_form(masks[s]);
      ASSERT_EQ(testing::dense_mask(masks[s]), expected[s]);
    }
  }
}

TEST(MaskFile, WrittenBuiltInMasksLoadBackIdenticallyAndCompactly) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "dcp_mask_file_test.npy").string();
  const SequenceBatch batch({700, 33, 1});
  for (const char* spec : {"causal", "lambda:sink=5,window=40", "shared_question",
                           "causal_blockwise:block=32,local=2", "chunked:chunk=48"}) {
    const auto masks = build_batch_mask(parse_mask_spec(spec), batch);
    write_mask_file(path, masks);
    const auto loaded = load_mask_file(path, batch);
    for (std::size_t s = 0; s < masks.size(); ++s) {
      EXPECT_EQ(testing::dense_mask(loaded[s]), testing::dense_mask(masks[s])) << spec;
      EXPECT_EQ(loaded[s].segments().size(), masks[s].segments().size()) << spec;
    }
  }
  std::filesystem::remove(path);
}

TEST(MaskFile, RejectsMalformedArraysNamingTheProblem) {
  const SequenceBatch batch({2, 1});
  const std::vector<std::int32_t> ok = {0, 1, 0, 2, 0, 1};
  EXPECT_EQ(error_of(int32_array({3, 1, 2}, ok), batch), "(accepted)");
  EXPECT_NE(error_of(int32_array({2, 1, 2}, {0, 1, 0, 2}), batch)
                .find("has 2 rows, but the batch has 3 tokens"),
            std::string::npos);
  EXPECT_NE(error_of(int32_array({3, 2}, ok), batch).find("has 2 dimensions, expected 3"),
            std::string::npos);
  EXPECT_NE(error_of(int32_array({3, 1, 2}, {0, 1, 0, 3, 0, 1}), batch).find("is outside [0, 2]"),
            std::string::npos);
  EXPECT_NE(error_of(int32_array({3, 1, 2}, {0, 1, -1, 2, 0, 1}), batch)
                .find("token 1 (sequence 0, row 1)"),
            std::string::npos);
  EXPECT_NE(error_of(int32_array({3, 1, 2}, {1, 0, 0, 2, 0, 1}), batch).find("start > end"),
            std::string::npos);
  EXPECT_NE(error_of(int32_array({1, 3, 2}, ok), batch).find("has 1 rows"), std::string::npos);
  NpyArray wrong_dtype = int32_array({3, 1, 2}, ok);
  wrong_dtype.descr = "<f4";
  EXPECT_NE(error_of(wrong_dtype, batch).find("dtype is '<f4', expected '<i4'"), std::string::npos);
  EXPECT_NE(error_of(int32_array({3, 0, 2}, {}), batch).find("0 intervals per row"),
            std::string::npos);
  EXPECT_NE(error_of(int32_array({3, 1, 3}, {0, 1, 0, 0, 2, 0, 0, 1, 0}), batch)
                .find("last dimension is 3"),
            std::string::npos);
}

TEST(MaskFile, MissingFileIsAnIoError) {
  EXPECT_THROW(load_mask_file("/nonexistent/dcp/mask.npy", SequenceBatch({1})), IoError);
}

}  // namespace
}  // namespace dcp
