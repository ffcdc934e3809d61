# SPDX-License-Identifier: Apache-2.0
# dcp_add_test(NAME SOURCES ... DEPS ... LABELS ...): one GoogleTest binary registered with ctest.
include(GoogleTest)
# Extra compile flags for the test binaries alone, after the build type's: the ci preset builds
# them at -O0, since test code is mostly GoogleTest's macros, which take several times longer to
# optimise than to run, while the libraries they test keep the build type's optimisation.
set(DCP_TEST_CXX_FLAGS "" CACHE STRING "Extra compile flags for the test binaries")
separate_arguments(_dcp_test_cxx_flags NATIVE_COMMAND "${DCP_TEST_CXX_FLAGS}")
function(dcp_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main dcp_warnings)
  target_compile_options(${name} PRIVATE ${_dcp_test_cxx_flags})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
