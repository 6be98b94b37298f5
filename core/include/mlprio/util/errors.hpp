// The exception hierarchy every mlprio library throws from, and the exit-code convention the
// three programs (mlprio-replay, mlprio-model, mlprio-fsdp) share:
//
//   0  success
//   1  a runtime failure: writing a result failed, HDF5/MPI/CUDA/XGBoost failed, a bug
//   2  usage or bad input: a command-line parse error, a bad option value, a file that cannot
//      be used (trace, model, snapshot, configuration)
//   3  no device: `mlprio-fsdp measure` without a usable CUDA device
//   128+N  stopped cleanly by signal N (143 SIGTERM, 130 SIGINT), the shell's convention for a
//      process a signal ended: `mlprio-replay sweep` and `mlprio-fsdp sweep` catch the first
//      SIGTERM/SIGINT (util/stop_signal.hpp), stop between units of work and exit so; a second
//      signal ends the process at once. (Under mpirun, mpirun's own exit status is its own.)
//
//   std::runtime_error
//   └── Error                     every mlprio exception
//       ├── UsageError            exit 2: InputError, JsonInputError, ModelError, ConfigError, ...
//       ├── RuntimeError          exit 1: H5Error, MpiError, XgbError, DeviceError, CudaError, ...
//       ├── InvariantError        exit 1: an internal invariant broke (a bug, never bad input)
//       ├── NoDeviceError         exit 3: NoCudaDeviceError
//       └── InterruptedError      exit 128+N: stopped cleanly on signal N
//
// Each main hands its command line to run_program() (cli/include/mlprio/cli/program.hpp), which
// maps CLI11's parse errors to 2 and everything else, in one place, with exit_code_for(). A
// plain std::invalid_argument from a parser is bad input too (exit 2); any other std::exception
// is a runtime failure (exit 1). Header-only, C++17 (the CUDA kernels
// include it through kernels/check.hpp).
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace mlprio {

inline constexpr int EXIT_OK = 0;
inline constexpr int EXIT_RUNTIME_FAILURE = 1;
inline constexpr int EXIT_USAGE = 2;
inline constexpr int EXIT_NO_DEVICE = 3;
inline constexpr int EXIT_SIGNAL_BASE = 128;

// 128 + signo: the status of a run stopped cleanly by signal `signo`.
inline constexpr int exit_code_for_signal(int signo) noexcept {
  return EXIT_SIGNAL_BASE + signo;
}

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Usage or bad input: what the user gave cannot be used. Exit 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A failure while running on good input: I/O, a library, the device. Exit 1.
class RuntimeError : public Error {
 public:
  using Error::Error;
};

// An invariant of a simulation or the allocator model broke: a bug, never bad input. Exit 1.
// (replay::InvariantError and fsdp::InvariantError name this one type.)
class InvariantError : public Error {
 public:
  using Error::Error;
};

// No device to run on (mlprio-fsdp measure without a CUDA device). Exit 3.
class NoDeviceError : public Error {
 public:
  using Error::Error;
};

// A run stopped cleanly on SIGTERM/SIGINT (util/stop_signal.hpp): what was finished is kept as
// the message says. Exit 128 + signo.
class InterruptedError : public Error {
 public:
  InterruptedError(int signo, const std::string& what) : Error(what), signo_(signo) {}
  int signo() const noexcept { return signo_; }

 private:
  int signo_;
};

// The exit code for an exception that reached a program's main (see the table above).
inline int exit_code_for(const std::exception& e) noexcept {
  if (const auto* i = dynamic_cast<const InterruptedError*>(&e); i != nullptr)
    return exit_code_for_signal(i->signo());
  if (dynamic_cast<const NoDeviceError*>(&e) != nullptr) return EXIT_NO_DEVICE;
  if (dynamic_cast<const UsageError*>(&e) != nullptr) return EXIT_USAGE;
  if (dynamic_cast<const std::invalid_argument*>(&e) != nullptr) return EXIT_USAGE;
  return EXIT_RUNTIME_FAILURE;
}

}  // namespace mlprio
