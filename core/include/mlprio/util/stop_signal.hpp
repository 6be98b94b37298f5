// A clean stop on SIGTERM or SIGINT for long loops (`mlprio-replay sweep`, `mlprio-fsdp sweep`):
// while a StopOnSignal is alive, the first SIGTERM or SIGINT only records its number, which the
// loop reads with stop_signal() between units of work (a task, a minibatch size) and then stops
// cleanly: what is finished is kept (journaled), nothing half-written is left, and the program
// exits with exit_code_for_signal() (128 + signal number: 143 for SIGTERM, 130 for SIGINT; see
// errors.hpp). The handler is installed with SA_RESETHAND, so a second signal of the same kind
// has its default effect and ends the process at once (what a user pressing Ctrl-C twice wants).
// A signal inherited as ignored (nohup; `cmd &` in a script without job control) stays ignored.
// The destructor puts the previous handlers back. Header-only, C++17.
#pragma once

#include <signal.h>

#include <csignal>
#include <cstring>
#include <string>

#include "mlprio/util/errors.hpp"

namespace mlprio::util {

namespace detail {
inline volatile std::sig_atomic_t g_stop_signal = 0;
inline void record_stop_signal(int signo) {
  if (g_stop_signal == 0) g_stop_signal = signo;
}
}  // namespace detail

// The first SIGTERM/SIGINT received while a StopOnSignal was alive, or 0.
inline int stop_signal() noexcept {
  return static_cast<int>(detail::g_stop_signal);
}

// "SIGTERM", "SIGINT" or "signal N" for messages.
inline std::string signal_name(int signo) {
  if (signo == SIGTERM) return "SIGTERM";
  if (signo == SIGINT) return "SIGINT";
  return "signal " + std::to_string(signo);
}

class StopOnSignal {
 public:
  StopOnSignal() noexcept {
    detail::g_stop_signal = 0;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = detail::record_stop_signal;
    sigemptyset(&sa.sa_mask);
    // SA_RESTART: a blocking call (MPI, I/O) goes on after the handler; the flag is polled.
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    // A signal the process inherited as ignored (nohup, `cmd &` in a script) stays ignored.
    ::sigaction(SIGTERM, nullptr, &old_term_);
    ::sigaction(SIGINT, nullptr, &old_int_);
    if (old_term_.sa_handler != SIG_IGN) ::sigaction(SIGTERM, &sa, nullptr);
    if (old_int_.sa_handler != SIG_IGN) ::sigaction(SIGINT, &sa, nullptr);
  }
  ~StopOnSignal() {
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGINT, &old_int_, nullptr);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

}  // namespace mlprio::util
