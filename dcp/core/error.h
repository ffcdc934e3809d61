// SPDX-License-Identifier: Apache-2.0
// Error types: InvalidInput for anything a user supplied wrongly, Error for everything else.
#pragma once

#include <stdexcept>
#include <string>

namespace dcp {

// Base of every exception dcp throws on purpose. The message is one line, complete on its own.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller's input is wrong (a flag, a mask spec, a file). The message names the offending value.
// The command line maps it to exit status 2.
class InvalidInput : public Error {
 public:
  using Error::Error;
};

// A file could not be read or written.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace dcp
