// Queue order 'external:CMD': an outside program decides. CMD is started once, at the first
// scheduling pass (so that checking a policy name starts nothing), through /bin/sh -c in its own
// process group, with one end of a socket pair as its stdin and stdout (its stderr is ours). Each
// pass sends one request line and reads one answer line under --external-timeout. A late answer
// is still owed: it is read and thrown away before the next answer, so the stream stays in step.
// An agent that closes its end, dies, or stops reading its requests ends the run with an error
// naming the event time. The protocol is in replay/README.md, "External and LLM policies".
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "mlprio/replay/simulator.hpp"
#include "policy_agent.hpp"

namespace mlprio::replay::detail {
namespace {

// Longest answer line read; a longer one is malformed (and skipped up to its newline).
constexpr size_t MAX_ANSWER_BYTES = size_t{64} << 20;

std::string time_text(double t) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", t);
  return b;
}

class ExternalPolicy final : public AgentPolicy {
 public:
  ExternalPolicy(std::string name, std::string command, const PolicyOptions& opts)
      : AgentPolicy(std::move(name), opts), command_(std::move(command)) {
    if (command_.empty())
      throw ConfigError("policy 'external:' needs a command, e.g. external:python3 agent.py");
  }
  ~ExternalPolicy() override { stop(); }
  ExternalPolicy(const ExternalPolicy&) = delete;
  ExternalPolicy& operator=(const ExternalPolicy&) = delete;

 protected:
  AgentAnswer ask(const QueueSnapshot& snap) override {
    if (pid_ <= 0) start(snap.state.now);
    std::string req = agent_request_json(snap);
    req += '\n';
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(options().timeout));
    send_all(req, snap.state.now, deadline);
    ++owed_;
    AgentAnswer a;
    std::string line;
    while (owed_ > 0) {
      const int got = read_line(line, snap.state.now, deadline);
      if (got == 0) {
        a.status = AgentReply::LATE;
        a.error = "no answer within " + std::to_string(options().timeout) + " s";
        return a;
      }
      --owed_;
      if (owed_ > 0) continue;  // an answer to an earlier request that came too late
      if (got < 0) {
        a.status = AgentReply::MALFORMED;
        a.error = "an answer line longer than " + std::to_string(MAX_ANSWER_BYTES) + " bytes";
        return a;
      }
    }
    if (!parse_agent_answer(line, a.ids, &a.error)) {
      a.status = AgentReply::MALFORMED;
      return a;
    }
    a.status = AgentReply::OK;
    return a;
  }

 private:
  void start(double now) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw RuntimeError("external agent: socketpair failed: " + std::string(std::strerror(errno)));
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      ::close(sv[0]);
      ::close(sv[1]);
      throw RuntimeError("external agent: fork failed: " + std::string(std::strerror(err)));
    }
    if (pid == 0) {  // the child: only async-signal-safe calls until exec
      ::setpgid(0, 0);
      if (::dup2(sv[1], 0) < 0 || ::dup2(sv[1], 1) < 0) ::_exit(126);
      ::close_range(3, ~0U, 0);  // nothing else of ours (journal, HDF5, MPI sockets) leaks
      ::execl("/bin/sh", "sh", "-c", command_.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so the group exists whichever side runs first
    ::close(sv[1]);
    fd_ = sv[0];
    pid_ = pid;
    const int flags = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
    (void)now;
  }

  [[noreturn]] void died(double now, const std::string& what) {
    std::string status = "still running";
    if (pid_ > 0) {
      // It closed its end or stopped reading: give it a moment to exit, to report how it ended.
      int st = 0;
      pid_t r = 0;
      for (int k = 0; k < 100 && (r = ::waitpid(pid_, &st, WNOHANG)) == 0; ++k)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (r == pid_) {
        pid_ = -1;
        if (WIFEXITED(st))
          status = "exit status " + std::to_string(WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
          status = "killed by signal " + std::to_string(WTERMSIG(st));
      }
    }
    stop();
    throw RuntimeError("external agent '" + command_ + "' " + what + " at event time " +
                       time_text(now) + " (" + status +
                       "); its own messages, if any, are on stderr above");
  }

  void send_all(const std::string& data, double now,
                std::chrono::steady_clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t w = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (w > 0) {
        done += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_for(POLLOUT, deadline))
          died(now, "stopped reading its requests (none taken within --external-timeout)");
        continue;
      }
      died(now, "closed its stdin or ended");
    }
  }

  // Waits for `events` on fd_ until the deadline; false on time-out.
  bool wait_for(short events, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) return false;
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return true;  // let the read or write report it
      if (r == 0 && std::chrono::steady_clock::now() >= deadline) return false;
    }
  }

  // One line into `line`: 1 read, 0 time-out, -1 too long (skipped up to its newline).
  int read_line(std::string& line, double now, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        const bool too_long = skipping_;
        skipping_ = false;
        line.assign(buf_, 0, nl);
        buf_.erase(0, nl + 1);
        return too_long ? -1 : 1;
      }
      if (buf_.size() > MAX_ANSWER_BYTES) {
        buf_.clear();
        skipping_ = true;
      }
      char tmp[65536];
      const ssize_t r = ::recv(fd_, tmp, sizeof tmp, 0);
      if (r > 0) {
        buf_.append(tmp, static_cast<size_t>(r));
        continue;
      }
      // ECONNRESET: it ended with our request unread, which is the same story.
      if (r == 0 || errno == ECONNRESET) died(now, "closed its stdout or ended without an answer");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!wait_for(POLLIN, deadline)) return 0;
        continue;
      }
      died(now, "could not be read from (" + std::string(std::strerror(errno)) + ")");
    }
  }

  // Closes its end, gives it a second to exit on end of input, then kills its process group.
  void stop() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (pid_ <= 0) return;
    int st = 0;
    for (int k = 0; k < 100; ++k) {
      if (::waitpid(pid_, &st, WNOHANG) != 0) {
        ::kill(-pid_, SIGKILL);  // whatever it left behind in its group
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(-pid_, SIGKILL);
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  std::string command_;
  int fd_ = -1;
  pid_t pid_ = -1;
  int64_t owed_ = 0;  // answers not read yet (the current one and late ones)
  std::string buf_;
  bool skipping_ = false;
};

}  // namespace

std::unique_ptr<QueuePolicy> make_external_policy(std::string_view name,
                                                  const PolicyOptions& opts) {
  std::string command(name.substr(name.find(':') + 1));
  return std::make_unique<ExternalPolicy>(std::string(name), std::move(command), opts);
}

}  // namespace mlprio::replay::detail
