// The SWF reader's vector line scans (AVX-512 and AVX2) against its byte loop: every job, every
// report figure and every error message the same, on hostile generated lines and on the real
// traces. The paths run in one process through the reader's internal switch
// (core/src/jobs/swf_scan.hpp); each vector path this CPU has is compared (an AVX-512 machine
// runs both), and on a CPU with neither the test cases report themselves skipped.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "mlprio/jobs/trace.hpp"

namespace mlprio::detail {
bool set_swf_scan_mode(int mode);  // core/src/jobs/swf_scan.hpp: 0 auto, 1 byte loop, 2 AVX-512,
                                   // 3 AVX2
}

using namespace mlprio;
namespace fs = std::filesystem;
using mlprio::test::temp_path;

namespace {

bool same_double(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;  // -0.0 and 0.0 differ
}

struct Read {
  std::vector<Job> jobs;
  ReadReport report;
  TraceHeader header;
  std::vector<std::string> queues;
};

// The vector scans this CPU has (modes 2 and 3 of set_swf_scan_mode), each labelled.
std::vector<std::pair<int, const char*>> vector_modes() {
  std::vector<std::pair<int, const char*>> m;
  if (detail::set_swf_scan_mode(2)) m.emplace_back(2, "AVX-512");
  if (detail::set_swf_scan_mode(3)) m.emplace_back(3, "AVX2");
  detail::set_swf_scan_mode(0);
  return m;
}
constexpr const char* NO_VECTOR_SCAN = "this CPU has neither vector scan: nothing to compare";

// The file through the streaming reader, the byte loop (mode 1) or a vector scan (2, 3).
Read read_with(const std::string& path, int mode) {
  detail::set_swf_scan_mode(mode);
  ReadOptions opts;
  opts.max_reported = 1000000;
  auto r = open_job_reader(path, opts);
  Read out;
  Job j;
  while (r->next(j)) out.jobs.push_back(j);
  out.report = r->report();
  out.header = r->header();
  for (int32_t i = 0; i < static_cast<int32_t>(r->names().queues.size()); ++i)
    out.queues.emplace_back(r->names().queues.name(i));
  detail::set_swf_scan_mode(0);
  return out;
}

void require_same_job(const Job& a, const Job& b) {
  REQUIRE(a.id == b.id);
  REQUIRE(same_double(a.submit, b.submit));
  REQUIRE(same_double(a.wait, b.wait));
  REQUIRE(same_double(a.run, b.run));
  REQUIRE(a.alloc_procs == b.alloc_procs);
  REQUIRE(a.req_procs == b.req_procs);
  REQUIRE(same_double(a.avg_cpu_time, b.avg_cpu_time));
  REQUIRE(same_double(a.req_time, b.req_time));
  REQUIRE(a.req_mem == b.req_mem);
  REQUIRE(a.used_mem == b.used_mem);
  REQUIRE(a.status == b.status);
  REQUIRE(a.user == b.user);
  REQUIRE(a.group == b.group);
  REQUIRE(a.app == b.app);
  REQUIRE(a.queue == b.queue);
  REQUIRE(a.partition == b.partition);
  REQUIRE(a.preceding_job == b.preceding_job);
  REQUIRE(same_double(a.think_time, b.think_time));
}

void require_same(const Read& a, const Read& b) {
  REQUIRE(a.jobs.size() == b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    INFO("job " << i);
    require_same_job(a.jobs[i], b.jobs[i]);
  }
  REQUIRE(a.report.lines == b.report.lines);
  REQUIRE(a.report.skipped == b.report.skipped);
  REQUIRE(a.report.blank_lines == b.report.blank_lines);
  REQUIRE(a.report.comment_lines == b.report.comment_lines);
  REQUIRE(a.report.jobs == b.report.jobs);
  REQUIRE(a.report.was_sorted == b.report.was_sorted);
  REQUIRE(a.report.out_of_order == b.report.out_of_order);
  REQUIRE(a.report.first_errors.size() == b.report.first_errors.size());
  for (size_t i = 0; i < a.report.first_errors.size(); ++i) {
    REQUIRE(a.report.first_errors[i].line == b.report.first_errors[i].line);
    REQUIRE(a.report.first_errors[i].field == b.report.first_errors[i].field);
    REQUIRE(a.report.first_errors[i].message == b.report.first_errors[i].message);
  }
  REQUIRE(a.header.max_nodes == b.header.max_nodes);
  REQUIRE(a.header.max_procs == b.header.max_procs);
  REQUIRE(a.queues == b.queues);
}

// A field drawn to hit the vector scan's edges: 1..17 digits, signs, -0, a lone '-', '+', decimals,
// exponents, letters, bytes >= 0x80, NUL, and the 21-column layout's brace lists.
std::string random_field(std::mt19937_64& rng) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const auto digits = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += static_cast<char>('0' + pick(10));
    return s;
  };
  switch (pick(24)) {
    case 0:
      return "-1";
    case 1:
      return "-0";
    case 2:
      return "0";
    case 3:
      return "-";
    case 4:
      return "+" + digits(1 + pick(4));
    case 5:
      return digits(1 + pick(5)) + "." + digits(1 + pick(3));
    case 6:
      return digits(1 + pick(2)) + "e" + digits(1);
    case 7:
      return digits(14 + pick(4));  // around the 15-digit limit
    case 8:
      return "-" + digits(14 + pick(4));
    case 9:
      return "abc";
    case 10:
      return std::string("1\x80", 2);
    case 11:
      return std::string("7\0", 2);
    case 12:
      return "{1,2}";
    case 13:
      return "--1";
    case 14:
      return "1-2";
    case 15:
      return "99999999999999";
    case 16:
      return "999999999999999";
    case 17:
      return "-" + digits(8 + pick(2));
    default:
      return digits(1 + pick(9));
  }
}

std::string random_separator(std::mt19937_64& rng) {
  switch (rng() % 12) {
    case 0:
      return "\t";
    case 1:
      return "  ";
    case 2:
      return " \t ";
    case 3:
      return "\v";
    case 4:
      return "\f";
    default:
      return " ";
  }
}

}  // namespace

TEST_CASE("SWF vector scan: the same jobs, counts and errors as the byte loop on hostile lines",
          "[swf][scan]") {
  const auto modes = vector_modes();
  if (modes.empty()) MLPRIO_SKIP(NO_VECTOR_SCAN);
  std::mt19937_64 rng(20261126);
  const fs::path path = temp_path("scan.swf");
  {
    std::ofstream out(path, std::ios::binary);
    out << "; MaxNodes: 64\n; MaxProcs: 128\n";
    for (int line = 0; line < 40000; ++line) {
      switch (rng() % 200) {  // now and then a line that is no job
        case 0:
          out << "\n";
          continue;
        case 1:
          out << " \t \r\n";
          continue;
        case 2:
          out << "; Note: a comment between jobs\n";
          continue;
        case 3:
          out << ";MaxProcs: " << (rng() % 4096) << "\n";
          continue;
        case 4:
          out << "  ; indented comment 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\n";
          continue;
        default:
          break;
      }
      // Mostly plain lines of 18/19/21 fields, with one hostile field now and then, and field
      // counts around the accepted ones.
      int fields = 18;
      switch (rng() % 10) {
        case 0:
          fields = 16 + static_cast<int>(rng() % 8);
          break;
        case 1:
          fields = 19;
          break;
        case 2:
          fields = 21;
          break;
        default:
          break;
      }
      const bool hostile = rng() % 4 == 0;
      std::string s = rng() % 20 == 0 ? " " : "";
      for (int f = 0; f < fields; ++f) {
        if (f > 0) s += random_separator(rng);
        if (f == 1) {
          s += std::to_string(line * 7 + static_cast<int>(rng() % 5));  // mostly sorted submits
        } else if (hostile && rng() % 6 == 0) {
          s += random_field(rng);
        } else if (f >= 18 && fields == 21) {
          s += f == 19 ? "q" + std::to_string(rng() % 3) : "{x}";
        } else {
          s += std::to_string(static_cast<int64_t>(rng() % 2000) - 1);
        }
      }
      if (rng() % 30 == 0) s += std::string(40 + rng() % 60, ' ') + "9";  // past 64/128 bytes
      s += rng() % 15 == 0 ? "\r\n" : "\n";
      out << s;
    }
  }
  const Read scalar = read_with(path.string(), 1);
  CHECK(scalar.jobs.size() > 20000);         // most lines are jobs
  CHECK(scalar.report.skipped > 1000);       // and the hostile ones are many
  CHECK(scalar.report.comment_lines > 400);  // comments and blank lines between jobs
  CHECK(scalar.report.blank_lines > 200);
  for (const auto& [mode, name] : modes) {
    INFO(name);
    require_same(scalar, read_with(path.string(), mode));
  }
  // Strict mode: the same first error, naming the same line, field and problem.
  const auto first_error = [&](int mode) {
    detail::set_swf_scan_mode(mode);
    ReadOptions strict;
    strict.strict = true;
    LineError e;
    try {
      load_trace(path.string(), strict);
    } catch (const InputError& x) {
      e = x.detail();
    }
    detail::set_swf_scan_mode(0);
    return e;
  };
  const LineError s1 = first_error(1);
  CHECK(s1.line > 0);
  for (const auto& [mode, name] : modes) {
    INFO(name);
    const LineError s2 = first_error(mode);
    CHECK(s1.line == s2.line);
    CHECK(s1.field == s2.field);
    CHECK(s1.message == s2.message);
  }
  fs::remove(path);
}

TEST_CASE("SWF vector scan: exact values at the edges, -0 included", "[swf][scan]") {
  const auto modes = vector_modes();
  if (modes.empty()) MLPRIO_SKIP(NO_VECTOR_SCAN);
  const fs::path path = temp_path("edges.swf");
  {
    std::ofstream out(path, std::ios::binary);
    // 15 digits (largest plain), 16 digits (read by parse_double), -0 as a run time, a line of
    // 63, 64 and 127 bytes, fields across the 64-byte boundary.
    out << "999999999999999 1 -1 -0 4 -1 -1 4 60 -1 1 7 8 9 10 11 -1 -1\n";
    out << "1234567890123456 2 -1 5 4 -1 -1 4 60 -1 1 7 8 9 10 11 -1 -1\n";
    out << "3 3 -1 5 4 -1 -1 4 60 -1 1 7 8 9 10 11 -1 " + std::string(9, '1') + "\n";
    out << "4 4 -1 5 4 -1 -1 4 60 -1 1 7 8 9 10 11 -1 " + std::string(10, '1') + "\n";
    out << "5 5 -1 5 4 -1 -1 4 60 -1 1 7 8 9 10 " + std::string(40, '2') + "\n";
    out << "6 6 -1 5 4 -1 -1 4 60 -1 1 7 8 9 10 11" + std::string(20, ' ') + "123456789012345" +
               std::string(20, ' ') + "-7\n";
  }
  const Read scalar = read_with(path.string(), 1);
  for (const auto& [mode, name] : modes) {
    INFO(name);
    const Read vector = read_with(path.string(), mode);
    require_same(scalar, vector);
    REQUIRE(vector.jobs.size() == 5);  // the 40-digit field is skipped
    CHECK(vector.jobs[0].id == 999999999999999);
    CHECK(std::signbit(vector.jobs[0].run));  // -0 is not "unknown", and keeps its sign
    CHECK(vector.jobs[1].id == 1234567890123456);
    CHECK(vector.jobs[2].think_time == 111111111.0);
    CHECK(vector.jobs[3].think_time == 1111111111.0);
    CHECK(vector.jobs[4].preceding_job == 123456789012345);
    CHECK(vector.jobs[4].think_time == -7.0);
  }
  fs::remove(path);
}

TEST_CASE("SWF vector scan: every shared SWF trace reads the same both ways",
          "[swf][scan][shared]") {
  const fs::path dir = fs::path(MLPRIO_SHARED_DATA) / "swf";
  if (!fs::exists(dir)) MLPRIO_SKIP("../shared/data not found at " << MLPRIO_SHARED_DATA);
  const auto modes = vector_modes();
  if (modes.empty()) MLPRIO_SKIP(NO_VECTOR_SCAN);
  int traces = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".swf") == std::string::npos || name.find(".machines") != std::string::npos)
      continue;
    INFO(name);
    const Read scalar = read_with(e.path().string(), 1);
    for (const auto& [mode, scan] : modes) {
      INFO(scan);
      require_same(scalar, read_with(e.path().string(), mode));
    }
    ++traces;
  }
  CHECK(traces >= 6);
}
