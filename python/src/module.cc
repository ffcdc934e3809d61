// SPDX-License-Identifier: Apache-2.0
// dcp._core: the C++ facade for Python. dcp's errors become Python exceptions: InvalidInput is a
// ValueError, IoError an OSError, a communication failure or any other dcp Error a RuntimeError.
#include "dcp/core/error.h"

#include "dcp/comm/communicator.h"

#include "python/src/bindings.h"
#include <nanobind/nanobind.h>

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "dcp's C++ core: planning, verification, simulation, the executor and calibration";
  // Plans and executors are often still referenced from autograd graphs when the interpreter
  // shuts down, after this module's teardown: not leaks, so no warnings at exit.
  nb::set_leak_warnings(false);
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const dcp::InvalidInput& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const dcp::IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const dcp::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  dcp::python::bind_planning(m);
  dcp::python::bind_executor(m);
  dcp::python::bind_calibration(m);
}
