// SPDX-License-Identifier: Apache-2.0
// User masks as .npy files.
#include "dcp/model/mask_file.h"

#include <cstdint>
#include <cstring>

#include "dcp/core/error.h"

#include "dcp/model/mask_builder.h"

namespace dcp {

std::vector<SequenceMask> masks_from_array(const NpyArray& array, const SequenceBatch& batch,
                                           const std::string& name) {
  const std::string what = "mask file " + name;
  expect_npy(array, "<i4", 3, what);
  const std::int64_t rows = array.shape[0];
  const std::int64_t slots = array.shape[1];
  if (array.shape[2] != 2) {
    throw InvalidInput(what + ": last dimension is " + std::to_string(array.shape[2]) +
                       ", expected 2 (start, end)");
  }
  if (slots < 1) throw InvalidInput(what + ": has 0 intervals per row, expected at least 1");
  if (rows != batch.total_tokens()) {
    throw InvalidInput(what + ": has " + std::to_string(rows) + " rows, but the batch has " +
                       std::to_string(batch.total_tokens()) + " tokens");
  }
  std::vector<std::int32_t> values(static_cast<std::size_t>(array.element_count()));
  std::memcpy(values.data(), array.data.data(), values.size() * sizeof(std::int32_t));

  std::vector<SequenceMask> masks;
  masks.reserve(static_cast<std::size_t>(batch.size()));
  std::vector<Interval> row;
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
    const TokenCount length = batch.length(seq);
    MaskBuilder builder(length);
    for (TokenCount i = 0; i < length; ++i) {
      const TokenCount token = batch.offset(seq) + i;
      row.clear();
      for (std::int64_t k = 0; k < slots; ++k) {
        const std::size_t at = static_cast<std::size_t>((token * slots + k) * 2);
        const TokenCount start = values[at];
        const TokenCount end = values[at + 1];
        const auto where = [&] {
          return what + ": token " + std::to_string(token) + " (sequence " + std::to_string(seq) +
                 ", row " + std::to_string(i) + "), slot " + std::to_string(k) + ": interval [" +
                 std::to_string(start) + ", " + std::to_string(end) + ")";
        };
        if (start > end) throw InvalidInput(where() + " has start > end");
        if (start == end) continue;
        if (start < 0 || end > length) {
          throw InvalidInput(where() + " is outside [0, " + std::to_string(length) + "]");
        }
        row.push_back({start, end});
      }
      builder.add_row(i, row);
    }
    masks.push_back(std::move(builder).finish());
  }
  return masks;
}

std::vector<SequenceMask> load_mask_file(const std::string& path, const SequenceBatch& batch) {
  return masks_from_array(read_npy(path), batch, path);
}

void write_mask_file(const std::string& path, const std::vector<SequenceMask>& masks) {
  std::int64_t slots = 1;
  TokenCount rows = 0;
  for (const SequenceMask& mask : masks) {
    if (mask.length() > INT32_MAX) {
      throw InvalidInput("a mask file holds int32 positions; a sequence of " +
                         std::to_string(mask.length()) + " tokens does not fit");
    }
    rows += mask.length();
    for (const MaskSegment& segment : mask.segments()) {
      slots = std::max<std::int64_t>(slots, segment.interval_count);
    }
  }
  std::vector<std::int32_t> values(static_cast<std::size_t>(rows * slots * 2), 0);
  std::size_t at = 0;
  std::vector<Interval> row;
  for (const SequenceMask& mask : masks) {
    for (TokenCount i = 0; i < mask.length(); ++i) {
      mask.row_intervals(i, row);
      for (std::int64_t k = 0; k < slots; ++k) {
        const auto index = static_cast<std::size_t>(k);
        values[at++] = index < row.size() ? static_cast<std::int32_t>(row[index].begin) : 0;
        values[at++] = index < row.size() ? static_cast<std::int32_t>(row[index].end) : 0;
      }
    }
  }
  write_npy(path, "<i4", {rows, slots, 2}, values.data(), values.size() * sizeof(std::int32_t));
}

}  // namespace dcp
