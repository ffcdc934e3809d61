// SPDX-License-Identifier: Apache-2.0
// The element-wise loops of the softmax (row max, shifted exp with sum, softmax gradient), with a
// vectorised polynomial exp chosen once at run time for the CPU (AVX-512, AVX2+FMA or portable).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace dcp::kernels {

// One implementation of the loops. The selection happens once per process (vector_math()), and
// the kernels fetch the table once per call, so no inner loop tests the ISA.
struct VectorMath {
  std::string_view isa;
  // max(x[0..n)), -inf when n == 0 or every element is -inf.
  float (*max)(const float* x, std::size_t n);
  // x[i] = exp(x[i] - shift) in place and returns the sum of the new x. `shift` must be finite.
  // exp uses range reduction by ln 2 and a degree-7 polynomial (relative error below 2^-22);
  // arguments below -87 (masked -inf included) give exactly 0, so a masked key never leaks.
  float (*exp_shift_sum)(float* x, std::size_t n, float shift);
  // ds[i] = p[i] * (ds[i] - delta): dS from dP (in ds) and P.
  void (*softmax_grad)(float* ds, const float* p, std::size_t n, float delta);
};

// The fastest implementation this CPU runs, chosen on the first call.
const VectorMath& vector_math();

// Every implementation this CPU can run (the portable one first), for tests.
std::vector<const VectorMath*> supported_vector_math();

}  // namespace dcp::kernels
