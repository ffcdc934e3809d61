# SPDX-License-Identifier: Apache-2.0
# Warning flags shared by every dcp target, applied through the dcp_warnings interface target.
add_library(dcp_warnings INTERFACE)
target_compile_options(dcp_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough)
if(DCP_WARNINGS_AS_ERRORS)
  target_compile_options(dcp_warnings INTERFACE -Werror)
endif()
