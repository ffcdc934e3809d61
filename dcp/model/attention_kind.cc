// SPDX-License-Identifier: Apache-2.0
#include "dcp/model/attention_kind.h"

#include <set>

#include "dcp/core/error.h"

namespace dcp {

void validate_kind_name(std::string_view name) {
  const auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  };
  bool ok = !name.empty() && name.size() <= kMaxKindNameBytes;
  for (const char c : name) ok = ok && allowed(c);
  if (!ok) {
    throw InvalidInput("attention kind name '" + std::string(name) + "' must be 1 to " +
                       std::to_string(kMaxKindNameBytes) + " characters of A-Z a-z 0-9 _ . -");
  }
}

void validate_kinds(const std::vector<AttentionKind>& kinds, const SequenceBatch& batch) {
  if (kinds.empty()) throw InvalidInput("no attention kinds given");
  if (kinds.size() > kMaxKinds) {
    throw InvalidInput(std::to_string(kinds.size()) + " attention kinds given; at most " +
                       std::to_string(kMaxKinds));
  }
  std::set<std::string, std::less<>> seen;
  for (const AttentionKind& kind : kinds) {
    validate_kind_name(kind.name);
    if (!seen.insert(kind.name).second) {
      throw InvalidInput("attention kind '" + kind.name + "' given twice");
    }
    if (kind.layers < 1 || kind.layers > kMaxKindLayers) {
      throw InvalidInput("attention kind '" + kind.name + "': " + std::to_string(kind.layers) +
                         " layers; a kind has 1 to " + std::to_string(kMaxKindLayers));
    }
    if (static_cast<SeqIndex>(kind.masks.size()) != batch.size()) {
      throw InvalidInput("attention kind '" + kind.name + "': masks for " +
                         std::to_string(kind.masks.size()) + " sequences, the batch has " +
                         std::to_string(batch.size()));
    }
    for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
      const TokenCount length = kind.masks[static_cast<std::size_t>(seq)].length();
      if (length != batch.length(seq)) {
        throw InvalidInput("attention kind '" + kind.name + "': the mask of sequence " +
                           std::to_string(seq) + " is for " + std::to_string(length) +
                           " tokens, the sequence has " + std::to_string(batch.length(seq)));
      }
    }
  }
}

std::size_t kind_index(const std::vector<std::string>& names, std::string_view name) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return i;
  }
  std::string listed;
  for (const std::string& known : names) listed += (listed.empty() ? "" : ", ") + known;
  throw InvalidInput("no attention kind '" + std::string(name) + "' in the plan (it has " + listed +
                     ")");
}

std::pair<std::string, std::string> split_kind_assignment(std::string_view text,
                                                          std::string_view what) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    throw InvalidInput("'" + std::string(text) + "': give " + std::string(what) + " as NAME=VALUE");
  }
  std::string name(text.substr(0, eq));
  validate_kind_name(name);
  return {std::move(name), std::string(text.substr(eq + 1))};
}

}  // namespace dcp
