// bench_hw_counters: runs a command and prints the CPU's hardware counters for it (user space,
// the command and every process and thread it starts): cycles, instructions, branches, branch
// misses and L1 data-cache read misses, with instructions per cycle and misses per branch. A
// small stand-in for `perf stat` where linux-tools is not installed (a borrowed GPU host, a
// container), used by bench/replay_speed_ratios.sh (HW_COUNTERS=1) to tell a replay's stalls from
// its instruction count. Where the kernel exposes no counters (many virtual machines, or
// kernel.perf_event_paranoid above 2) it says so and still runs the command.
//
//   bench_hw_counters [--json] CMD [ARGS...]
//
// The counts go to stderr (or, with --json, one JSON object on stderr's last line); the command's
// own output is left alone. Exits with the command's status (128 + the signal where it was
// killed; 127 where it could not be started).
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

struct Counter {
  const char* name;
  uint32_t type;
  uint64_t config;
  int fd = -1;
  double value = -1;  // scaled by enabled/running time where the kernel multiplexed it
};

constexpr uint64_t l1d_read_miss() {
  return PERF_COUNT_HW_CACHE_L1D | (uint64_t{PERF_COUNT_HW_CACHE_OP_READ} << 8) |
         (uint64_t{PERF_COUNT_HW_CACHE_RESULT_MISS} << 16);
}

// Opens one counter on `pid` (stopped before exec), enabled when it calls exec.
int open_counter(const Counter& c, pid_t pid) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = c.type;
  a.config = c.config;
  a.disabled = 1;
  a.enable_on_exec = 1;
  a.inherit = 1;  // children and threads too
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  return static_cast<int>(syscall(SYS_perf_event_open, &a, pid, -1, -1, 0));
}

int usage() {
  std::fprintf(stderr, "usage: bench_hw_counters [--json] CMD [ARGS...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int first = 1;
  bool json = false;
  if (first < argc && std::strcmp(argv[first], "--json") == 0) {
    json = true;
    ++first;
  }
  if (first >= argc) return usage();

  // The child waits on a pipe until its counters are open, then execs: counting starts at the
  // exec, so this program's own work is not counted.
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) {
    std::perror("bench_hw_counters: pipe");
    return 127;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("bench_hw_counters: fork");
    return 127;
  }
  if (pid == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(127);
    execvp(argv[first], argv + first);
    std::fprintf(stderr, "bench_hw_counters: cannot run %s: %s\n", argv[first],
                 std::strerror(errno));
    _exit(127);
  }
  close(go[0]);

  std::array<Counter, 5> counters{{
      {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
      {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
      {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
      {"branch_misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
      {"l1d_read_misses", PERF_TYPE_HW_CACHE, l1d_read_miss()},
  }};
  std::string unavailable;
  for (Counter& c : counters) {
    c.fd = open_counter(c, pid);
    if (c.fd < 0)
      unavailable +=
          std::string(unavailable.empty() ? "" : ", ") + c.name + " (" + std::strerror(errno) + ")";
  }
  if (write(go[1], "x", 1) != 1) std::perror("bench_hw_counters: starting the command");
  close(go[1]);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status)
                                   : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 127);

  for (Counter& c : counters) {
    if (c.fd < 0) continue;
    uint64_t v[3] = {};  // value, time enabled, time running
    if (read(c.fd, v, sizeof v) == static_cast<ssize_t>(sizeof v) && v[2] > 0)
      c.value = static_cast<double>(v[0]) * static_cast<double>(v[1]) / static_cast<double>(v[2]);
    close(c.fd);
  }
  const auto get = [&](const char* name) {
    for (const Counter& c : counters)
      if (std::strcmp(c.name, name) == 0) return c.value;
    return -1.0;
  };
  const double cycles = get("cycles"), instructions = get("instructions");
  const double branches = get("branches"), misses = get("branch_misses");
  const double ipc = cycles > 0 && instructions >= 0 ? instructions / cycles : -1;
  const double miss_rate = branches > 0 && misses >= 0 ? misses / branches : -1;

  if (json) {
    std::string s = "{\"exit\": " + std::to_string(rc);
    for (const Counter& c : counters)
      if (c.value >= 0) s += ", \"" + std::string(c.name) + "\": " + std::to_string(c.value);
    if (ipc >= 0) s += ", \"ipc\": " + std::to_string(ipc);
    if (miss_rate >= 0) s += ", \"branch_miss_rate\": " + std::to_string(miss_rate);
    if (!unavailable.empty()) s += ", \"unavailable\": \"" + unavailable + "\"";
    std::fprintf(stderr, "%s}\n", s.c_str());
    return rc;
  }
  for (const Counter& c : counters)
    if (c.value >= 0) std::fprintf(stderr, "%-16s %.0f\n", c.name, c.value);
  if (ipc >= 0) std::fprintf(stderr, "%-16s %.3f\n", "ipc", ipc);
  if (miss_rate >= 0) std::fprintf(stderr, "%-16s %.4f\n", "branch_miss_rate", miss_rate);
  if (!unavailable.empty())
    std::fprintf(stderr, "bench_hw_counters: counters unavailable here: %s\n", unavailable.c_str());
  return rc;
}
