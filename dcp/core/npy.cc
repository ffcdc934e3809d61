// SPDX-License-Identifier: Apache-2.0
// Reading and writing NumPy .npy files.
#include "dcp/core/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string_view>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;

std::size_t item_size_of(const std::string& descr) {
  if (descr.size() < 3) return 0;
  const char order = descr[0];
  const char kind = descr[1];
  const std::string_view digits(descr.data() + 2, descr.size() - 2);
  if (digits.size() != 1) return 0;
  const std::size_t size = static_cast<std::size_t>(digits[0] - '0');
  const bool single_byte = size == 1;
  // Multi-byte types must be little-endian; single bytes carry '|'.
  if (single_byte ? order != '|' : order != '<') return 0;
  switch (kind) {
    case 'b':
      return size == 1 ? 1 : 0;
    case 'i':
    case 'u':
      return (size == 1 || size == 2 || size == 4 || size == 8) ? size : 0;
    case 'f':
      return (size == 2 || size == 4 || size == 8) ? size : 0;
    default:
      return 0;
  }
}

// Finds `'key':` in the header dict and returns the text after the colon, trimmed.
std::string_view header_value(std::string_view header, std::string_view key,
                              const std::string& name) {
  const std::string quoted_key = quoted(key);
  std::size_t pos = header.find(quoted_key);
  if (pos == std::string_view::npos) {
    throw InvalidInput(name + ": .npy header has no " + quoted_key + " entry");
  }
  pos = header.find(':', pos + quoted_key.size());
  if (pos == std::string_view::npos) {
    throw InvalidInput(name + ": .npy header entry " + quoted_key + " has no value");
  }
  return trim(header.substr(pos + 1));
}

}  // namespace

std::int64_t NpyArray::element_count() const {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) count *= extent;
  return count;
}

std::size_t NpyArray::item_size() const { return item_size_of(descr); }

NpyArray parse_npy(const std::vector<std::byte>& bytes, const std::string& name) {
  const auto fail = [&](const std::string& why) -> void {
    throw InvalidInput(name + ": not a valid .npy file: " + why);
  };
  if (bytes.size() < kMagicSize + 4 || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    fail("missing the \\x93NUMPY magic");
  }
  const auto byte_at = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
  const std::uint8_t major = byte_at(6);
  std::size_t header_len = 0;
  std::size_t header_start = 0;
  if (major == 1) {
    header_len = byte_at(8) | (static_cast<std::size_t>(byte_at(9)) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail("truncated header");
    header_len = byte_at(8) | (static_cast<std::size_t>(byte_at(9)) << 8) |
                 (static_cast<std::size_t>(byte_at(10)) << 16) |
                 (static_cast<std::size_t>(byte_at(11)) << 24);
    header_start = 12;
  } else {
    fail("unsupported format version " + std::to_string(major));
  }
  if (header_start + header_len > bytes.size()) fail("truncated header");
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + header_start,
                                header_len);

  NpyArray array;
  // descr: a quoted string.
  std::string_view descr = header_value(header, "descr", name);
  if (descr.empty() || descr.front() != '\'') fail("'descr' is not a string");
  const std::size_t descr_end = descr.find('\'', 1);
  if (descr_end == std::string_view::npos) fail("'descr' is not a string");
  array.descr = std::string(descr.substr(1, descr_end - 1));
  if (item_size_of(array.descr) == 0) {
    fail("unsupported dtype " + quoted(array.descr) +
         " (supported: little-endian bool, integers and floats)");
  }
  // fortran_order: must be False.
  const std::string_view fortran = header_value(header, "fortran_order", name);
  const auto word_is = [&](std::string_view word) {
    return fortran.substr(0, word.size()) == word &&
           (fortran.size() == word.size() || fortran[word.size()] == ',' ||
            fortran[word.size()] == '}' || fortran[word.size()] == ' ');
  };
  if (word_is("False")) {
  } else if (word_is("True")) {
    fail("Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  } else {
    fail("'fortran_order' is neither True nor False");
  }
  // shape: a tuple of integers, possibly empty "()", possibly with a trailing comma.
  const std::string_view shape_text = header_value(header, "shape", name);
  if (shape_text.empty() || shape_text.front() != '(') fail("'shape' is not a tuple");
  const std::size_t shape_end = shape_text.find(')');
  if (shape_end == std::string_view::npos) fail("'shape' is not a tuple");
  const std::string_view inner = shape_text.substr(1, shape_end - 1);
  for (std::string_view item : split(inner, ',')) {
    item = trim(item);
    if (item.empty()) continue;  // "(3,)" has an empty last item.
    const std::int64_t extent = parse_int(item, name + ": .npy shape entry");
    if (extent < 0) fail("negative extent in 'shape'");
    array.shape.push_back(extent);
  }

  // Guard the size computation against overflow before trusting it.
  const std::size_t data_start = header_start + header_len;
  const std::size_t available = bytes.size() - data_start;
  std::size_t expected = array.item_size();
  for (const std::int64_t extent : array.shape) {
    const auto e = static_cast<std::size_t>(extent);
    if (e != 0 && expected > std::numeric_limits<std::size_t>::max() / e) fail("shape too large");
    expected *= e;
  }
  if (available < expected) {
    fail("truncated data: the shape needs " + std::to_string(expected) + " bytes, the file has " +
         std::to_string(available));
  }
  if (available > expected) {
    fail(std::to_string(available - expected) +
         " bytes after the data that the shape does not cover");
  }
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end());
  return array;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open for reading");
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError(path + ": read error");
  std::vector<std::byte> bytes(raw.size());
  if (!raw.empty()) std::memcpy(bytes.data(), raw.data(), raw.size());
  return parse_npy(bytes, path);
}

void expect_npy(const NpyArray& array, const std::string& descr, std::size_t rank,
                const std::string& what) {
  if (array.descr != descr) {
    throw InvalidInput(what + ": dtype is " + quoted(array.descr) + ", expected " + quoted(descr));
  }
  if (array.shape.size() != rank) {
    throw InvalidInput(what + ": has " + std::to_string(array.shape.size()) +
                       " dimensions, expected " + std::to_string(rank));
  }
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temp = path + ".tmp-dcp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(path + ": cannot open for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(temp.c_str());
      throw IoError(path + ": write failed");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    throw IoError(path + ": cannot move the written file into place");
  }
}

void write_npy(const std::string& path, const std::string& descr,
               const std::vector<std::int64_t>& shape, const void* data, std::size_t bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    header += std::to_string(shape[i]);
    header += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
    if (i + 1 < shape.size()) header += " ";
  }
  header += "), }";
  // Pad so that the data starts at a multiple of 64 bytes, ending the header with '\n'.
  const std::size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');

  std::string file(kMagic, kMagicSize);
  file.push_back('\x01');
  file.push_back('\x00');
  file.push_back(static_cast<char>(header.size() & 0xFF));
  file.push_back(static_cast<char>((header.size() >> 8) & 0xFF));
  file += header;
  file.append(static_cast<const char*>(data), bytes);
  write_file_atomically(path, file);
}

}  // namespace dcp
