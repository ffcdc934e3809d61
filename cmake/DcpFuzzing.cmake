# SPDX-License-Identifier: Apache-2.0
# DCP_BUILD_FUZZERS: libFuzzer targets (tests/fuzz). They need a compiler that ships libFuzzer
# (clang), the address and undefined sanitizers, and the test tree. Every dcp library then carries
# libFuzzer's coverage instrumentation, so the fuzzer sees the branches inside the readers.
if(DCP_BUILD_FUZZERS)
  if(NOT DCP_BUILD_TESTS)
    message(FATAL_ERROR "DCP_BUILD_FUZZERS needs DCP_BUILD_TESTS=ON (the targets live in tests/fuzz)")
  endif()
  if(NOT DCP_SANITIZE STREQUAL "address,undefined")
    message(FATAL_ERROR "DCP_BUILD_FUZZERS needs DCP_SANITIZE=address,undefined")
  endif()
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer)
  check_cxx_source_compiles([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }
]] DCP_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT DCP_HAVE_LIBFUZZER)
    message(FATAL_ERROR "DCP_BUILD_FUZZERS: ${CMAKE_CXX_COMPILER} (${CMAKE_CXX_COMPILER_ID}) "
                        "cannot build libFuzzer targets; configure with CXX=clang++")
  endif()
  target_compile_options(dcp_sanitizers INTERFACE -fsanitize=fuzzer-no-link)
endif()
