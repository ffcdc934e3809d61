// SPDX-License-Identifier: Apache-2.0
// Kernel kinds by name and the factory that builds a kernel set.
#include <string>

#include "dcp/core/error.h"

#include "dcp/kernels/attention_kernels.h"
#include "dcp/kernels/cpu/cpu_attention.h"
#include "dcp/kernels/reference/reference_attention.h"

namespace dcp::kernels {

std::string_view to_string(KernelKind kind) {
  switch (kind) {
    case KernelKind::kReference:
      return "reference";
    case KernelKind::kCpu:
      return "cpu";
  }
  return "unknown";
}

KernelKind parse_kernel_kind(std::string_view name) {
  if (name == "reference") return KernelKind::kReference;
  if (name == "cpu") return KernelKind::kCpu;
  throw InvalidInput("unknown kernel kind '" + std::string(name) +
                     "' (expected 'reference' or 'cpu')");
}

std::unique_ptr<AttentionKernels> make_kernels(KernelKind kind, int threads) {
  if (threads < 1) {
    throw InvalidInput("kernel thread count must be at least 1, got " + std::to_string(threads));
  }
  switch (kind) {
    case KernelKind::kReference:
      return std::make_unique<ReferenceKernels>();
    case KernelKind::kCpu:
      return std::make_unique<CpuKernels>(threads);
  }
  throw InvalidInput("unknown kernel kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace dcp::kernels
