// SPDX-License-Identifier: Apache-2.0
// One-time BLAS configuration shared by the reference and CPU kernels.
#pragma once

namespace dcp::kernels {

// Pins OpenBLAS to one thread, once per process: dcp runs its own threads and calls BLAS from
// each of them, and OpenBLAS's own pool on top would oversubscribe the cores.
void ensure_blas_single_threaded();

}  // namespace dcp::kernels
