// SPDX-License-Identifier: Apache-2.0
// One-time BLAS configuration shared by the reference and CPU kernels.
#include "dcp/kernels/blas_setup.h"

#include <mutex>

#include <cblas.h>

namespace dcp::kernels {

void ensure_blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace dcp::kernels
