// SPDX-License-Identifier: Apache-2.0
// Kernel kinds parse from their names and the factory builds each kind.
#include <string>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {
namespace {

TEST(KernelKind, ParsesItsOwnNames) {
  for (KernelKind kind : {KernelKind::kReference, KernelKind::kCpu}) {
    EXPECT_EQ(parse_kernel_kind(to_string(kind)), kind);
  }
  EXPECT_EQ(to_string(KernelKind::kReference), "reference");
  EXPECT_EQ(to_string(KernelKind::kCpu), "cpu");
}

TEST(KernelKind, ParseRejectsAnUnknownNameAndNamesIt) {
  try {
    parse_kernel_kind("cuda-ish");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("cuda-ish"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_kernel_kind(""), InvalidInput);
  EXPECT_THROW(parse_kernel_kind("CPU"), InvalidInput);
}

TEST(MakeKernels, BuildsEachKindUnderItsName) {
  EXPECT_EQ(make_kernels(KernelKind::kReference, 1)->name(), "reference");
  EXPECT_EQ(make_kernels(KernelKind::kCpu, 2)->name(), "cpu");
}

TEST(MakeKernels, RejectsFewerThanOneThread) {
  EXPECT_THROW(make_kernels(KernelKind::kCpu, 0), InvalidInput);
}

}  // namespace
}  // namespace dcp::kernels
