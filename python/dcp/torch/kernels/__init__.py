# SPDX-License-Identifier: Apache-2.0
"""The kernels of dcp.torch's Triton device (dcp.torch._device), imported by their users only:
importing this package imports neither Triton nor FlashAttention.

- triton_kernels.py (launches, checks, tiles) and _triton_jit.py (device code): dcp's Triton
  attention, copy, merge, sum and conversion kernels.
- The flash route (DCPExecutor(attention_kernels="flash" | "auto"), docs/gpu.md):
  varlen_windows.py (the FlashAttention windows that give a tile mask's keys), varlen_route.py (a
  pass's attention tables as varlen calls, once per prepare), varlen_runner.py (an instruction's
  calls: gathers, kernel, merges and scatters into the slots), varlen_kernels.py (torch's
  FlashAttention ops, and an fp64 emulation of their contract for the CPU tests) and
  kernel_selection.py (the kernel per class of tiles, from a timing table).
- kernel_timing.py: the calibration's device calls on the Triton kernels, timed with CUDA events
  (time_calls, subtiles: dcp.calibrate's seam)."""
