// SPDX-License-Identifier: Apache-2.0
// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0, C order only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dcp {

// One array loaded from a .npy file. `descr` is NumPy's dtype string, e.g. "<i4" or "<f4";
// data holds the raw little-endian elements in C order.
struct NpyArray {
  std::string descr;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;

  std::int64_t element_count() const;
  std::size_t item_size() const;
};

// Reads a whole .npy file. Throws IoError if the file cannot be opened, and InvalidInput naming
// the file if it is not a well-formed C-order .npy of a supported dtype (bool, int8..int64,
// uint8..uint64, float16/32/64, little-endian) whose data size matches its shape.
NpyArray read_npy(const std::string& path);

// Same, from bytes already in memory; `name` is used in error messages.
NpyArray parse_npy(const std::vector<std::byte>& bytes, const std::string& name);

// Throws InvalidInput unless the array has dtype `descr` and the given rank.
// `what` names the array in the message (e.g. "--mask-file masks.npy").
void expect_npy(const NpyArray& array, const std::string& descr, std::size_t rank,
                const std::string& what);

// Writes an array as .npy version 1.0. The file appears whole or not at all: the bytes go to a
// temporary file in the same directory that is renamed into place. Throws IoError on failure.
void write_npy(const std::string& path, const std::string& descr,
               const std::vector<std::int64_t>& shape, const void* data, std::size_t bytes);

// Writes bytes to `path` through a temporary file and a rename. Throws IoError on failure.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace dcp
