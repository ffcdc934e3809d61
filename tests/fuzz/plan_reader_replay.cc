// SPDX-License-Identifier: Apache-2.0
// Replays a fixed set of damaged plan files through the fuzz check; runs under ctest in any build.
//
//   dcp_plan_reader_replay [--verbose]          the seeded set (exit 1 on a failed expectation);
//                                               --verbose counts the rejections by reason
//   dcp_plan_reader_replay FILE...              replays inputs, e.g. a crash file from libFuzzer
//   dcp_plan_reader_replay --write-corpus DIR   writes seed inputs for the libFuzzer target
//
// Damage that leaves the checksums alone must always be rejected. Damage behind resealed
// checksums, or inside one section with the section table kept consistent, reaches the header
// and Program readers; there a file may parse or not, and the fuzz check aborts on anything but
// a clean InvalidInput or a canonical parse.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/npy.h"
#include "dcp/core/rng.h"

#include "dcp/program/plan_file/plan_file.h"

#include "tests/fuzz/plan_reader_fuzz.h"
#include "tests/testing/sample_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace dcp::fuzz {
namespace {

constexpr std::uint64_t kSeed = 20251121;
constexpr int kCasesPerKind = 2500;

// Plans to damage: the sample, and variants with longer lists and another shape.
std::vector<Plan> seed_plans() {
  std::vector<Plan> plans = {testing::sample_plan()};
  Plan wide = testing::sample_plan();
  wide.header.strategy = "ring";
  wide.header.seed = ~std::uint64_t{0};
  for (Program& program : wide.forward) {
    program.masks.push_back(TileMask{2, 3, {0, 2, 3}, {0, 1, 2, 3, 1, 2}});
    program.instructions.push_back(Free{});
    program.instruction_stage.push_back(0);
  }
  plans.push_back(std::move(wide));
  return plans;
}

const std::int32_t kInterestingInts[] = {0, 1,   -1,  2,     3,  4,         5,        7,
                                         8, 255, 256, 65536, -2, INT32_MAX, INT32_MIN};

void put_i32(std::string& bytes, std::size_t at, std::int32_t value) {
  const auto bits = static_cast<std::uint32_t>(value);
  for (std::size_t i = 0; i < 4 && at + i < bytes.size(); ++i) {
    bytes[at + i] = static_cast<char>((bits >> (8 * i)) & 0xFF);
  }
}

std::size_t pick(Rng& rng, std::size_t size) {
  return static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(size) - 1));
}

char random_byte(Rng& rng) { return static_cast<char>(rng.uniform_int(0, 255)); }

// One to four random edits of `bytes[lo, hi)`, lengths kept when `same_length`.
std::string damage(std::string bytes, std::size_t lo, std::size_t hi, bool same_length, Rng& rng) {
  const auto edits = rng.uniform_int(1, 4);
  for (std::int64_t e = 0; e < edits && lo < hi && hi <= bytes.size(); ++e) {
    const std::size_t at = lo + pick(rng, hi - lo);
    switch (rng.uniform_int(0, same_length ? 2 : 5)) {
      case 0:
        bytes[at] = static_cast<char>(bytes[at] ^ static_cast<char>(1 << rng.uniform_int(0, 7)));
        break;
      case 1:
        bytes[at] = random_byte(rng);
        break;
      case 2:
        put_i32(bytes, at, kInterestingInts[pick(rng, std::size(kInterestingInts))]);
        break;
      case 3: {
        // One draw per statement: the order of evaluating arguments is unspecified.
        const auto count = static_cast<std::size_t>(rng.uniform_int(1, 8));
        bytes.insert(at, count, random_byte(rng));
        hi += count;
        break;
      }
      case 4: {
        const std::size_t count =
            std::min(hi - at, static_cast<std::size_t>(rng.uniform_int(1, 8)));
        bytes.erase(at, count);
        hi -= count;
        break;
      }
      default:
        bytes.resize(at);
        hi = at;
        break;
    }
  }
  return bytes;
}

struct Tally {
  int parsed = 0;
  int rejected = 0;
  std::map<std::string, int> reasons;  // first words of the messages, for the summary

  void add(const std::optional<std::string>& error) {
    if (!error) {
      ++parsed;
      return;
    }
    ++rejected;
    // "input: forward program of device 1: instructions[3] (load): slot ..." -> the last part
    // before the value, enough to see which checks were reached.
    std::string reason = *error;
    const std::size_t colon = reason.rfind(": ");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    reason = reason.substr(0, reason.find_first_of("0123456789-"));
    ++reasons[reason];
  }
};

// read_program agrees with parse_plan: a file parses whole exactly when its header and every one
// of its Programs read alone, and then the Programs read alone serialize back to the file.
bool read_alone_agrees(const std::string& bytes, bool parsed, const std::string& path) {
  write_file_atomically(path, bytes);
  Plan alone;
  try {
    alone.header = read_plan_header(path);
    const std::int32_t devices = alone.header.cluster.devices();
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      for (std::int32_t device = 0; device < devices; ++device) {
        (pass == Pass::kForward ? alone.forward : alone.backward)
            .push_back(read_program(path, device, pass));
      }
    }
  } catch (const InvalidInput&) {
    return !parsed;
  }
  return parsed && serialize_plan(alone) == bytes;
}

int run_seeded_set(bool verbose) {
  Rng rng(kSeed);
  int failures = 0;
  Tally raw;
  Tally resealed;
  Tally header;
  Tally section;
  int read_alone = 0;
  int disagreements = 0;
  const std::string path =
      (std::filesystem::temp_directory_path() / "dcp_plan_reader_replay.plan").string();
  for (const Plan& plan : seed_plans()) {
    const std::string bytes = serialize_plan(plan);
    const PlanFileSummary summary = parse_plan_summary(bytes, "seed");
    const auto header_bytes = static_cast<std::size_t>(summary.header_bytes);
    if (check_plan_bytes(bytes)) {
      std::fprintf(stderr, "the undamaged seed plan does not parse\n");
      return 1;
    }
    for (int i = 0; i < kCasesPerKind; ++i) {
      // Checksums left alone: must be rejected.
      const std::string damaged = damage(bytes, 0, bytes.size(), false, rng);
      if (damaged != bytes) {
        const std::optional<std::string> error = check_plan_bytes(damaged);
        raw.add(error);
        if (!error) {
          std::fprintf(stderr, "case %d: damage without resealing was accepted\n", i);
          ++failures;
        }
      }
      // Anywhere, checksums recomputed.
      const std::string anywhere = reseal_plan_bytes(damage(bytes, 0, bytes.size(), true, rng));
      resealed.add(check_plan_bytes(anywhere));
      // The header fields after the preamble, checksums recomputed.
      const bool same_length = rng.uniform_int(0, 3) > 0;
      const std::string in_header =
          reseal_plan_bytes(damage(bytes, 20, header_bytes - 8, same_length, rng));
      header.add(check_plan_bytes(in_header));
      // Inside one section, with any edit; the section table follows.
      const std::size_t index = pick(rng, summary.sections.size());
      const PlanSection& target = summary.sections[index];
      const std::string payload = bytes.substr(static_cast<std::size_t>(target.offset),
                                               static_cast<std::size_t>(target.bytes));
      const std::string changed = damage(payload, 0, payload.size(), false, rng);
      const std::string file = replace_plan_section(bytes, index, changed);
      section.add(check_plan_bytes(file));
      if (i % 25 == 0) {
        for (const std::string* input : {&anywhere, &in_header, &file}) {
          ++read_alone;
          if (!read_alone_agrees(*input, !check_plan_bytes(*input), path)) {
            std::fprintf(stderr, "case %d: read_program disagrees with parse_plan\n", i);
            ++disagreements;
          }
        }
      }
      // The libFuzzer entry on the same inputs (it also reseals what it is given).
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(damaged.data()), damaged.size());
    }
  }
  const auto report = [&](const char* name, const Tally& tally) {
    std::printf("%-30s %6d parsed %6d rejected, %zu distinct reasons\n", name, tally.parsed,
                tally.rejected, tally.reasons.size());
    if (!verbose) return;
    for (const auto& [reason, count] : tally.reasons)
      std::printf("  %6d  %s\n", count, reason.c_str());
  };
  report("damage, checksums kept", raw);
  report("damage anywhere, resealed", resealed);
  report("damage in the header, resealed", header);
  report("damage in a section", section);
  std::printf("%-30s %6d files, %d disagree with parse_plan\n", "read_program per device",
              read_alone, disagreements);
  failures += disagreements;
  std::filesystem::remove(path);
  // The point of resealing: most rejections must come from checks behind the checksums.
  for (const Tally* tally : {&resealed, &header, &section}) {
    int checksum = 0;
    for (const auto& [reason, count] : tally->reasons) {
      if (reason.find("checksum") != std::string::npos) checksum += count;
    }
    if (checksum * 2 > tally->rejected) {
      std::fprintf(stderr, "%d of %d rejections stopped at a checksum\n", checksum,
                   tally->rejected);
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

int replay_files(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot open for reading\n", argv[i]);
      return 2;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const std::optional<std::string> error = check_plan_bytes(bytes);
    std::printf("%s: %s\n", argv[i], error ? error->c_str() : "parsed");
  }
  return 0;
}

int write_corpus(const std::string& dir) {
  std::filesystem::create_directories(dir);
  int n = 0;
  for (const Plan& plan : seed_plans()) {
    write_file_atomically(dir + "/seed_" + std::to_string(n++) + ".plan", serialize_plan(plan));
  }
  std::printf("wrote %d seed inputs to %s\n", n, dir.c_str());
  return 0;
}

}  // namespace
}  // namespace dcp::fuzz

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-corpus") {
    return dcp::fuzz::write_corpus(argv[2]);
  }
  if (argc == 2 && std::string(argv[1]) == "--verbose") return dcp::fuzz::run_seeded_set(true);
  if (argc > 1) return dcp::fuzz::replay_files(argc, argv);
  return dcp::fuzz::run_seeded_set(false);
}
