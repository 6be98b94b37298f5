// Reader tests: committed snippets with hand-checked values for SWF (plain, gzip, malformed,
// unsorted), sacct --parsable2 and the Alibaba pod CSV; Slurm value formats; and, when
// ../shared/data is present, every real trace counted exactly.
#include <unistd.h>

#include <zlib.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/jobs/slurm_format.hpp"
#include "mlprio/jobs/trace.hpp"

namespace mlprio::detail {
bool set_gzip_whole_decode(bool on);  // core/src/jobs/line_reader.hpp
int64_t gzip_whole_decodes();         // gzip files decoded whole so far (all readers)
bool set_sha256_mode(int mode);  // core/src/util/sha256.cpp: 0 automatic, 1 portable rounds only
}  // namespace mlprio::detail

using namespace mlprio;
namespace fs = std::filesystem;

static std::string data(const std::string& f) {
  return std::string(MLPRIO_TEST_DATA) + "/" + f;
}
static std::string shared(const std::string& f) {
  return std::string(MLPRIO_SHARED_DATA) + "/" + f;
}

using mlprio::test::temp_path;

TEST_CASE("SWF: all 18 fields and the header, hand-checked", "[swf]") {
  const Trace t = load_trace(data("small.swf"));
  CHECK(t.format == TraceFormat::SWF);
  CHECK(t.header.max_nodes == 8);
  CHECK(t.header.max_procs == 16);
  CHECK(t.header.max_jobs == 4);
  CHECK(t.header.unix_start_time == 1000000000);
  CHECK(t.header.get("Computer").value() == "test machine");
  REQUIRE(t.jobs.size() == 4);
  CHECK(t.report.blank_lines == 1);
  CHECK(t.report.comment_lines == 7);
  CHECK(t.report.skipped == 0);
  CHECK(t.report.was_sorted);
  const Job& a = t.jobs[0];
  CHECK(a.id == 1);
  CHECK(a.submit == 0);
  CHECK(a.wait == 10);
  CHECK(a.run == 100);
  CHECK(a.alloc_procs == 4);
  CHECK(a.avg_cpu_time == UNKNOWN);
  CHECK(a.used_mem == 1024LL * 1024 * 4);  // 1024 KB per processor x 4
  CHECK(a.req_procs == 4);
  CHECK(a.req_time == 200);
  CHECK(a.req_mem == 2048LL * 1024 * 4);
  CHECK(a.status == JobStatus::COMPLETED);
  CHECK(a.user == 3);
  CHECK(a.group == 1);
  CHECK(a.app == 1);
  CHECK(a.queue == 1);
  CHECK(a.partition == -1);
  CHECK(a.preceding_job == UNKNOWN_INT);
  CHECK(a.think_time == UNKNOWN);
  CHECK(a.start() == 10);
  // Tab-separated line.
  CHECK(t.jobs[1].id == 2);
  CHECK(t.jobs[1].run == 50);
  CHECK(t.jobs[1].req_time == UNKNOWN);
  CHECK(t.jobs[1].status == JobStatus::FAILED);
  CHECK(t.jobs[1].app == 2);
  CHECK(t.jobs[2].status == JobStatus::CANCELLED);
  CHECK(t.jobs[2].run == 0);
  CHECK(t.jobs[3].wait == UNKNOWN);
  CHECK(t.jobs[3].run == UNKNOWN);
  CHECK(t.jobs[3].status == JobStatus::UNKNOWN_STATE);
  CHECK(t.jobs[3].start() == UNKNOWN);
}

TEST_CASE("SWF: gzip input is detected from the bytes", "[swf][gzip]") {
  const Trace plain = load_trace(data("small.swf"));
  const Trace gz = load_trace(data("small.swf.gz"));
  REQUIRE(gz.jobs.size() == plain.jobs.size());
  for (size_t i = 0; i < gz.jobs.size(); ++i) {
    CHECK(gz.jobs[i].id == plain.jobs[i].id);
    CHECK(gz.jobs[i].run == plain.jobs[i].run);
  }
  // A gzip file without a .gz name reads the same.
  const auto tmp = temp_path("mlprio_test_gz_noext.swf");
  fs::copy_file(data("small.swf.gz"), tmp, fs::copy_options::overwrite_existing);
  CHECK(load_trace(tmp.string()).jobs.size() == 4);
  fs::remove(tmp);
}

namespace {
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}
void put_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
// The InputError message load_trace gives for `bytes`, or "loaded N jobs".
std::string gzip_outcome(const std::string& bytes, bool strict) {
  const auto tmp = temp_path("mlprio_test_gzip_case.swf.gz");
  put_bytes(tmp, bytes);
  ReadOptions o;
  o.format = TraceFormat::SWF;
  o.strict = strict;
  std::string out;
  try {
    out = "loaded " + std::to_string(load_trace(tmp.string(), o).jobs.size()) + " jobs";
  } catch (const InputError& e) {
    out = e.what();
  }
  fs::remove(tmp);
  return out;
}
}  // namespace

namespace {
// A one-bit change in the trailer's CRC-32, then in its length (little-endian, last 8 bytes), is
// zlib's error, naming which check failed.
void check_trailer_errors(const std::string& bytes) {
  std::string bad_crc = bytes;
  bad_crc[bad_crc.size() - 8] ^= 0x01;
  CHECK_THAT(gzip_outcome(bad_crc, false), Catch::Contains("incorrect data check"));
  std::string bad_len = bytes;
  bad_len[bad_len.size() - 4] ^= 0x01;
  CHECK_THAT(gzip_outcome(bad_len, false), Catch::Contains("incorrect length check"));
}
}  // namespace

TEST_CASE("SWF: a truncated gzip file is an error naming the file, wherever it is cut",
          "[swf][gzip]") {
  // zlib's gzread reported a cut inside the deflate data as a plain end of file: the trace came
  // back shorter, even with --strict. Every cut from the magic on must be an error.
  const std::string bytes = file_bytes(data("small.swf.gz"));
  REQUIRE(bytes.size() > 30);
  for (const bool strict : {false, true})
    for (size_t n = 2; n < bytes.size(); ++n) {
      INFO("cut at " << n << " of " << bytes.size() << (strict ? ", strict" : ""));
      const std::string r = gzip_outcome(bytes.substr(0, n), strict);
      CHECK_THAT(r, Catch::Contains("truncated or corrupt gzip") &&
                        Catch::Contains("mlprio_test_gzip_case.swf.gz"));
    }
  CHECK(gzip_outcome(bytes, true) == "loaded 4 jobs");
}

TEST_CASE("SWF: gzip trailer checks, concatenated members and trailing bytes", "[swf][gzip]") {
  const std::string bytes = file_bytes(data("small.swf.gz"));
  // `cat a.gz b.gz` is one gzip file holding both.
  CHECK(gzip_outcome(bytes + bytes, true) == "loaded 8 jobs");
  CHECK(gzip_outcome(bytes + bytes + bytes, false) == "loaded 12 jobs");
  check_trailer_errors(bytes);
  // A second member cut short, and bytes after the last member that are not a member.
  CHECK_THAT(gzip_outcome(bytes + bytes.substr(0, bytes.size() / 2), false),
             Catch::Contains("truncated or corrupt gzip"));
  CHECK_THAT(gzip_outcome(bytes + "x", false), Catch::Contains("not another gzip member"));
  CHECK_THAT(gzip_outcome(bytes + "garbage", false), Catch::Contains("not another gzip member"));
}

TEST_CASE("A line longer than 1 MiB is an error naming file and line, strict or not",
          "[swf][errors]") {
  // No limit let one newline-free line (a 9 MB gzip of zeros) grow to gigabytes in memory.
  const auto tmp = temp_path("mlprio_test_long_line.swf");
  const std::string job = "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n";
  for (const bool strict : {false, true}) {
    std::ofstream(tmp) << "; MaxNodes: 4\n" << job << std::string(3 << 20, '0') << "\n" << job;
    ReadOptions o;
    o.format = TraceFormat::SWF;
    o.strict = strict;
    CHECK_THROWS_WITH(load_trace(tmp.string(), o),
                      Catch::Contains("mlprio_test_long_line.swf:3") &&
                          Catch::Contains("longer than 1048576 bytes"));
  }
  // Just under the limit is still a line (here a malformed one, skipped and counted).
  std::ofstream(tmp) << job << std::string((1 << 20) - 2, '0') << "\n" << job;
  const Trace t = load_trace(tmp.string());
  CHECK(t.jobs.size() == 2);
  CHECK(t.report.skipped == 1);
  fs::remove(tmp);
}

TEST_CASE("SWF: malformed lines are skipped and counted with file, line and field",
          "[swf][errors]") {
  const Trace t = load_trace(data("malformed.swf"));
  REQUIRE(t.jobs.size() == 2);
  CHECK(t.jobs[0].id == 1);
  CHECK(t.jobs[1].id == 4);
  CHECK(t.report.skipped == 3);
  REQUIRE(t.report.first_errors.size() == 3);
  const auto& e0 = t.report.first_errors[0];
  CHECK(e0.line == 3);
  CHECK(e0.field == "field 4 (run_time)");
  CHECK(e0.what().find("malformed.swf:3: field 4 (run_time): 'x10' is not a number") !=
        std::string::npos);
  CHECK(t.report.first_errors[1].line == 4);
  CHECK(t.report.first_errors[1].message.find("found 8") != std::string::npos);
  CHECK(t.report.first_errors[2].line == 6);
  CHECK(t.report.first_errors[2].field == "field 2 (submit_time)");
}

TEST_CASE("SWF: --strict stops at the first malformed line", "[swf][errors]") {
  ReadOptions o;
  o.strict = true;
  try {
    load_trace(data("malformed.swf"), o);
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(e.detail().line == 3);
    CHECK(e.detail().field == "field 4 (run_time)");
    CHECK(std::string(e.what()).find("malformed.swf:3") != std::string::npos);
  }
}

TEST_CASE("SWF: max_reported bounds the kept errors, not the count", "[swf][errors]") {
  ReadOptions o;
  o.max_reported = 1;
  const Trace t = load_trace(data("malformed.swf"), o);
  CHECK(t.report.skipped == 3);
  CHECK(t.report.first_errors.size() == 1);
}

TEST_CASE("Unsorted traces are sorted stably and the report says so", "[swf][sort]") {
  const Trace t = load_trace(data("unsorted.swf"));
  CHECK_FALSE(t.report.was_sorted);
  CHECK(t.report.out_of_order == 2);  // 10 after 30, and 10 after 20
  REQUIRE(t.jobs.size() == 4);
  CHECK(t.jobs[0].id == 2);  // submit 10, first in file among the ties
  CHECK(t.jobs[1].id == 4);  // submit 10
  CHECK(t.jobs[2].id == 3);
  CHECK(t.jobs[3].id == 1);
}

TEST_CASE("Missing file and unknown format are clear errors", "[errors]") {
  CHECK_THROWS_WITH(load_trace("/nonexistent/trace.swf"),
                    Catch::Contains("/nonexistent/trace.swf") && Catch::Contains("cannot open"));
  const auto tmp = temp_path("mlprio_test_garbage.txt");
  std::ofstream(tmp) << "hello world\nthis is not a trace\n";
  CHECK_THROWS_WITH(load_trace(tmp.string()), Catch::Contains("--format"));
  fs::remove(tmp);
}

TEST_CASE("Slurm value formats", "[sacct]") {
  CHECK(parse_slurm_duration("00:00:00").value() == 0);
  CHECK(parse_slurm_duration("01:00:30").value() == 3630);
  CHECK(parse_slurm_duration("1-12:00:00").value() == 129600);
  CHECK(parse_slurm_duration("18-15:54:58").value() == 18 * 86400 + 15 * 3600 + 54 * 60 + 58);
  CHECK(parse_slurm_duration("05:30").value() == 330);
  CHECK(parse_slurm_duration("05:30.250").value() == Approx(330.25));
  CHECK(parse_slurm_duration("2-06").value() == 2 * 86400 + 6 * 3600);
  CHECK(parse_slurm_duration("90").value() == 5400);  // minutes, as in -t 90
  CHECK_FALSE(parse_slurm_duration("1:2:3:4"));
  CHECK_FALSE(parse_slurm_duration("ab:cd"));
  CHECK(is_slurm_none("UNLIMITED"));
  CHECK(is_slurm_none("Unknown"));
  CHECK(is_slurm_none("None"));
  CHECK(parse_slurm_time("2024-03-01T10:00:00").value() == 1709287200);
  CHECK_FALSE(parse_slurm_time("2024-13-01T10:00:00"));
  char per = 0;
  CHECK(parse_slurm_mem("2800Mc", &per).value() == 2800LL << 20);
  CHECK(per == 'c');
  CHECK(parse_slurm_mem("4Gn", &per).value() == 4LL << 30);
  CHECK(per == 'n');
  CHECK(parse_slurm_mem("33600M").value() == 33600LL << 20);
  CHECK(parse_slurm_mem("512").value() == 512LL << 20);
  auto t = parse_tres("billing=12,cpu=12,gres/gpu=2,mem=33600M,node=1");
  REQUIRE(t);
  CHECK(t->cpu == 12);
  CHECK(t->gpu == 2);
  CHECK(t->mem == 33600LL << 20);
  CHECK(t->node == 1);
  CHECK(parse_tres("cpu=4,gres/gpu:a100=2,gres/gpu:v100=1")->gpu == 3);
  CHECK_FALSE(parse_tres("cpu"));
}

TEST_CASE("sacct --parsable2: jobs, steps, TRES, states, Unknown/None, hand-checked", "[sacct]") {
  const Trace t = load_trace(data("small_sacct.txt"));
  CHECK(t.format == TraceFormat::SACCT);
  REQUIRE(t.jobs.size() == 4);
  CHECK(t.report.ignored == 1);  // 100.batch
  CHECK(t.report.skipped == 0);
  CHECK_FALSE(t.report.was_sorted);  // 101_3 was submitted before 100
  const Job& c = t.jobs[0];          // sorted: 101_3 (raw id 105) first
  CHECK(c.id == 105);
  CHECK(c.submit == 1709283600);
  CHECK(c.wait == UNKNOWN);
  CHECK(c.run == UNKNOWN);
  CHECK(c.req_time == 129600);
  CHECK(c.status == JobStatus::CANCELLED);
  CHECK(c.alloc_procs == UNKNOWN_INT);
  CHECK(c.req_procs == 4);
  CHECK(c.req_mem == 11200LL << 20);
  CHECK(c.req_gpus == 0);
  CHECK(t.names.users.name(c.user) == "bob");
  CHECK(t.names.qos.name(c.qos) == "long");
  const Job& a = t.jobs[1];
  CHECK(a.id == 100);
  CHECK(a.submit == 1709287200);
  CHECK(a.wait == 300);
  CHECK(a.run == 3630);
  CHECK(a.req_time == 7200);
  CHECK(a.status == JobStatus::COMPLETED);
  CHECK(a.alloc_procs == 8);
  CHECK(a.alloc_nodes == 1);
  CHECK(a.req_mem == 32LL << 30);
  CHECK(a.req_gpus == 2);
  CHECK(a.alloc_gpus == 2);
  CHECK(a.used_mem == 20LL << 30);  // folded from the .batch step's MaxRSS
  CHECK(t.names.users.name(a.user) == "alice");
  CHECK(t.names.partitions.name(a.partition) == "gpu");
  CHECK(t.names.accounts.name(a.account) == "proj1");
  CHECK(t.names.job_names.name(a.name) == "llama-lora");
  const Job& b = t.jobs[2];
  CHECK(b.id == 102);
  CHECK(b.wait == 60);
  CHECK(b.run == 7200);
  CHECK(b.req_time == UNKNOWN);  // UNLIMITED
  CHECK(b.status == JobStatus::TIMEOUT);
  CHECK(b.exit_code == 0);
  CHECK(b.req_nodes == 2);  // "2-4"
  CHECK(b.req_mem == 8LL << 30);
  CHECK(b.req_gpus == 8);  // typed gres summed
  CHECK(b.alloc_gpus == 8);
  const Job& d = t.jobs[3];
  CHECK(d.status == JobStatus::OUT_OF_MEMORY);
  CHECK(d.exit_code == 0);
  CHECK(d.req_time == 600);
}

TEST_CASE("sacct: malformed fields name the column; --parsable trailing bar accepted",
          "[sacct][errors]") {
  const auto tmp = temp_path("mlprio_test_bad_sacct.txt");
  {
    std::ofstream o(tmp);
    o << "JobID|Submit|Start|Elapsed|Timelimit|State|\n"
      << "1|2024-01-01T00:00:00|2024-01-01T00:01:00|00:10:00|01:00:00|COMPLETED|\n"
      << "2|yesterday|2024-01-01T00:01:00|00:10:00|01:00:00|COMPLETED|\n"
      << "3|2024-01-01T00:00:00|2024-01-01T00:01:00|ten minutes|01:00:00|COMPLETED|\n"
      << "4|2024-01-01T00:00:00|2024-01-01T00:01:00|00:10:00|\n";
  }
  const Trace t = load_trace(tmp.string());
  REQUIRE(t.jobs.size() == 1);
  CHECK(t.jobs[0].run == 600);
  CHECK(t.jobs[0].req_time == 3600);
  REQUIRE(t.report.skipped == 3);
  CHECK(t.report.first_errors[0].field == "Submit");
  CHECK(t.report.first_errors[0].line == 3);
  CHECK(t.report.first_errors[1].field == "Elapsed");
  CHECK(t.report.first_errors[2].field == "line");
  ReadOptions strict;
  strict.strict = true;
  CHECK_THROWS_WITH(load_trace(tmp.string(), strict), Catch::Contains(":3: Submit"));
  fs::remove(tmp);
}

TEST_CASE("sacct: '|' inside a job name or constraint is recovered", "[sacct]") {
  const auto tmp = temp_path("mlprio_test_pipe_sacct.txt");
  {
    std::ofstream o(tmp);
    o << "JobID|JobName|Constraints|Submit|Start|Elapsed|State\n"
      << "1|a|b|x|y|z|2024-01-01T00:00:00|2024-01-01T00:01:00|00:10:00|COMPLETED\n"
      << "2|plain||2024-01-01T00:00:00|2024-01-01T00:02:00|00:05:00|FAILED\n";
  }
  const Trace t = load_trace(tmp.string());
  REQUIRE(t.jobs.size() == 2);
  CHECK(t.report.skipped == 0);
  CHECK(t.jobs[0].run == 600);
  CHECK(t.jobs[0].wait == 60);
  // Two free-text columns: the first plausible split gives JobName "a" and Constraints "b|x|y|z".
  CHECK(t.names.job_names.name(t.jobs[0].name) == "a");
  CHECK(t.jobs[1].status == JobStatus::FAILED);
  fs::remove(tmp);
}

TEST_CASE("sacct: '|' repair stays fast with many free-text columns", "[sacct]") {
  // Trying every way of sharing 8 stray '|' among 60 free-text columns (C(67, 8) ways) hung on
  // one short line; the first plausible way must still be found, and found at once.
  const auto tmp = temp_path("mlprio_test_many_free_sacct.txt");
  {
    std::ofstream o(tmp);
    o << "JobID|Submit|Elapsed|State";
    for (int i = 0; i < 60; ++i) o << "|Comment";
    o << "|Start\n";
    // 7 stray pipes, in the 3rd and 60th comments; the last column is a typed one.
    o << "1|2024-01-01T00:00:00|00:10:00|COMPLETED";
    for (int i = 0; i < 60; ++i) o << (i == 2 ? "|a|b|c|d" : i == 59 ? "|e|f|g|h|i" : "|x");
    o << "|2024-01-01T00:01:00\n";
    // 8 stray pipes, unrepairable: Start is not a time however the pieces are shared (the old
    // search tried all C(67, 8) ways).
    o << "2|2024-01-01T00:00:00|00:10:00|COMPLETED";
    for (int i = 0; i < 60; ++i) o << (i == 0 ? "|a|b|c|d|e|f|g|h|i" : "|x");
    o << "|soon\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Trace t = load_trace(tmp.string());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(secs < 5.0);
  REQUIRE(t.jobs.size() == 1);
  CHECK(t.jobs[0].id == 1);
  CHECK(t.jobs[0].wait == 60);
  CHECK(t.report.skipped == 1);
  fs::remove(tmp);
}

TEST_CASE("Alibaba GPU pod CSV, hand-checked", "[alibaba]") {
  const Trace t = load_trace(data("small_alibaba.csv"));
  CHECK(t.format == TraceFormat::ALIBABA);
  REQUIRE(t.jobs.size() == 4);
  const Job& p0 = t.jobs[0];
  CHECK(p0.id == 0);
  CHECK(p0.submit == 0);
  CHECK(p0.wait == 0);
  CHECK(p0.run == 12537496);
  CHECK(p0.req_procs == 12);
  CHECK(p0.req_mem == 16384LL << 20);
  CHECK(p0.req_gpus == 1);
  CHECK(p0.status == JobStatus::RUNNING);
  const Job& p1 = t.jobs[1];
  CHECK(p1.id == 1);
  CHECK(p1.wait == 9);
  CHECK(p1.run == 12902960 - 427070);
  CHECK(p1.req_gpus == Approx(0.46));
  CHECK(p1.status == JobStatus::COMPLETED);
  const Job& p17 = t.jobs[2];
  CHECK(p17.req_procs == 88);
  CHECK(p17.req_gpus == 8);
  CHECK(p17.status == JobStatus::FAILED);
  CHECK(t.names.partitions.name(p17.partition) == "V100M16|V100M32");
  const Job& p20 = t.jobs[3];
  CHECK(p20.req_procs == 1);  // 500 milli-CPU rounds up to one processor
  CHECK(p20.status == JobStatus::PENDING);
  CHECK(p20.wait == UNKNOWN);
  CHECK(p20.run == UNKNOWN);
}

TEST_CASE("write_swf round-trips through the SWF reader", "[swf][writer]") {
  const Trace a = load_trace(data("small.swf"));
  const auto tmp = temp_path("mlprio_test_roundtrip.swf");
  {
    std::ofstream o(tmp);
    write_swf(o, a.header, a.jobs);
  }
  const Trace b = load_trace(tmp.string());
  CHECK(b.header.max_nodes == a.header.max_nodes);
  CHECK(b.header.max_procs == a.header.max_procs);
  CHECK(b.header.unix_start_time == a.header.unix_start_time);
  REQUIRE(b.jobs.size() == a.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    CHECK(b.jobs[i].id == a.jobs[i].id);
    CHECK(b.jobs[i].submit == a.jobs[i].submit);
    CHECK(b.jobs[i].wait == a.jobs[i].wait);
    CHECK(b.jobs[i].run == a.jobs[i].run);
    CHECK(b.jobs[i].req_mem == a.jobs[i].req_mem);
    CHECK(b.jobs[i].used_mem == a.jobs[i].used_mem);
    CHECK(b.jobs[i].status == a.jobs[i].status);
    CHECK(b.jobs[i].user == a.jobs[i].user);
  }
  fs::remove(tmp);
}

TEST_CASE("file_sha256 matches the SHA-256 test vector", "[sha256]") {
  const auto tmp = temp_path("mlprio_test_sha.txt");
  std::ofstream(tmp) << "abc";
  CHECK(file_sha256(tmp.string()) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::ofstream(tmp, std::ios::trunc).close();
  CHECK(file_sha256(tmp.string()) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  fs::remove(tmp);
}

namespace {
std::string gzip_bytes(const std::string& plain) {  // one gzip member, zlib's default level
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, plain.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}
}  // namespace

TEST_CASE("SWF: a large gzip file reads the same decoded whole as streamed through zlib",
          "[swf][gzip][whole]") {
  if (!mlprio::detail::set_gzip_whole_decode(true))
    MLPRIO_SKIP("built without libdeflate: every gzip file streams through zlib");
  // 40,000 jobs (about 2.5 MB of text, many fills of the reader's buffer).
  LublinOptions o;
  o.nodes = 128;
  o.seed = 9;
  Trace t;
  t.header.max_nodes = 128;
  t.jobs = generate_lublin(o, 40000);
  std::ostringstream text;
  write_swf(text, t.header, t.jobs);
  const std::string bytes = gzip_bytes(text.str());
  const auto whole_before = mlprio::detail::gzip_whole_decodes();
  put_bytes(temp_path("mlprio_test_gzip_case.swf.gz"), bytes);
  const Trace whole = load_trace(temp_path("mlprio_test_gzip_case.swf.gz").string());
  CHECK(mlprio::detail::gzip_whole_decodes() == whole_before + 1);  // it did take the file
  mlprio::detail::set_gzip_whole_decode(false);
  const Trace streamed = load_trace(temp_path("mlprio_test_gzip_case.swf.gz").string());
  mlprio::detail::set_gzip_whole_decode(true);
  REQUIRE(whole.jobs.size() == t.jobs.size());
  REQUIRE(streamed.jobs.size() == whole.jobs.size());
  for (size_t i = 0; i < whole.jobs.size(); ++i)
    if (whole.jobs[i].id != streamed.jobs[i].id ||
        whole.jobs[i].submit != streamed.jobs[i].submit ||
        whole.jobs[i].run != streamed.jobs[i].run ||
        whole.jobs[i].procs() != streamed.jobs[i].procs())
      FAIL("job " << i << " differs");
  // Files it declines are read by zlib, with zlib's verdict: two members, a bad CRC-32, a bad
  // length, cuts past the first block, bytes after the member.
  CHECK(gzip_outcome(bytes + bytes, true) == "loaded 80000 jobs");
  check_trailer_errors(bytes);
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;  // corrupt data in the middle
  CHECK_THAT(gzip_outcome(flipped, false), Catch::Contains("truncated or corrupt gzip"));
  for (size_t cut : {bytes.size() / 3, bytes.size() - 9, bytes.size() - 1})
    CHECK_THAT(gzip_outcome(bytes.substr(0, cut), false),
               Catch::Contains("truncated or corrupt gzip"));
  CHECK_THAT(gzip_outcome(bytes + "x", false), Catch::Contains("not another gzip member"));
  CHECK(mlprio::detail::gzip_whole_decodes() == whole_before + 1);  // none of those was taken
  CHECK(gzip_outcome(bytes, true) == "loaded 40000 jobs");
  CHECK(mlprio::detail::gzip_whole_decodes() == whole_before + 2);
}

TEST_CASE("file_sha256: the SHA extensions and the portable rounds give the same digests",
          "[sha256]") {
  if (!mlprio::detail::set_sha256_mode(0))
    MLPRIO_SKIP("this CPU has no SHA extensions: there is one path only");
  const auto tmp = temp_path("mlprio_test_sha_paths.bin");
  std::mt19937_64 rng(5);
  std::string data(3 << 20, '\0');
  for (auto& ch : data) ch = static_cast<char>(rng());
  const auto digest = [&](size_t n, int mode) {
    std::ofstream(tmp, std::ios::binary | std::ios::trunc)
        .write(data.data(), static_cast<std::streamsize>(n));
    mlprio::detail::set_sha256_mode(mode);
    return file_sha256(tmp.string());
  };
  // Every length around the block and padding boundaries, then inputs that cross the 1 MiB reads.
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 200; ++n) lengths.push_back(n);
  for (size_t n : {size_t{1} << 20, (size_t{1} << 20) + 55, (size_t{3} << 20) - 9, size_t{3} << 20})
    lengths.push_back(n);
  for (size_t n : lengths) {
    const std::string hw = digest(n, 0), sw = digest(n, 1);
    if (hw != sw) FAIL("length " << n << ": " << hw << " vs " << sw);
  }
  mlprio::detail::set_sha256_mode(0);
  // The FIPS 180-4 two-block vector through the hardware path.
  std::ofstream(tmp, std::ios::trunc) << "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(file_sha256(tmp.string()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  fs::remove(tmp);
}

// ---- the real traces in ../shared/data, counted exactly ----
struct RealTrace {
  const char* file;
  size_t jobs;
  bool sorted;
  int64_t skipped = 0;  // malformed records the file really has
};

TEST_CASE("Every real trace in ../shared/data is read completely", "[shared]") {
  if (!fs::exists(shared("swf")))
    MLPRIO_SKIP("../shared/data not found at " << MLPRIO_SHARED_DATA
                                               << ": real-trace checks not run");
  const RealTrace traces[] = {
      {"swf/lublin_1.swf", 10000, true},
      {"swf/lublin_2.swf", 10000, true},
      {"swf/hpc2n_subset.swf", 3170, true},
      {"swf/metacentrum_wagap_2013.swf", 17900, true},
      {"swf/mira.swf", 22508, true},
      {"swf/theta.swf", 23387, false},
      {"swf/NASA-iPSC-1993-3.1-cln.swf.gz", 18239, true},
      {"swf/LCG-2005.swf.gz", 188041, true},
      {"gpu/alibaba_v2023_openb_pod_list_default.csv", 8152, true},
      // 15 records: 12 jobs (four with '|' inside JobName/Constraints, recovered), 2 job
      // steps, and line 16, a fragment of a record whose start is missing.
      {"slurm_sim/tests_slurmanalyser_slurmparser_test_sacctlog_sacct_dump2101.log", 12, true, 1},
  };
  for (const auto& rt : traces) {
    INFO(rt.file);
    ReadOptions opts;
    opts.strict = rt.skipped == 0;
    const Trace t = load_trace(shared(rt.file), opts);
    CHECK(t.report.skipped == rt.skipped);
    CHECK(t.jobs.size() == rt.jobs);
    CHECK(t.report.was_sorted == rt.sorted);
    for (size_t i = 1; i < t.jobs.size(); ++i) REQUIRE(t.jobs[i - 1].submit <= t.jobs[i].submit);
  }
}

TEST_CASE("Real trace quirks: headers, extended layouts, blank line", "[shared]") {
  if (!fs::exists(shared("swf"))) MLPRIO_SKIP("../shared/data not found at " << MLPRIO_SHARED_DATA);
  const Trace mira = load_trace(shared("swf/mira.swf"));
  CHECK(mira.header.max_nodes == 49152);
  CHECK(mira.jobs.front().req_procs == 512);
  const Trace hpc2n = load_trace(shared("swf/hpc2n_subset.swf"));
  CHECK(hpc2n.report.blank_lines == 1);
  const Trace meta = load_trace(shared("swf/metacentrum_wagap_2013.swf"));
  CHECK(meta.header.max_nodes == -1);  // no header in this file
  CHECK(meta.jobs.front().id == 0);
  CHECK(meta.jobs.front().req_mem == 68719476736LL);  // bytes per job in the 21-column layout
  CHECK(meta.names.queues.size() > 1);
  const Trace lcg = load_trace(shared("swf/LCG-2005.swf.gz"));
  CHECK(lcg.header.unix_start_time == 1132444805);
  CHECK(lcg.header.max_procs == 24515);
  const Trace theta = load_trace(shared("swf/theta.swf"));
  CHECK(theta.report.out_of_order > 0);
}

TEST_CASE("jobcomp/filetxt: slurmctld's completion log, hand-checked", "[jobcomp]") {
  const auto tmp = temp_path("mlprio_test_jobcomp.log");
  {
    std::ofstream f(tmp);
    f << "JobId=7 UserId=alice(1001) GroupId=users(100) Name=my job JobState=COMPLETED "
         "Partition=debug TimeLimit=60 StartTime=2026-11-22T14:18:41 EndTime=2026-11-22T14:19:41 "
         "NodeList=n1 NodeCnt=1 ProcCnt=4 WorkDir=/home/alice/dir with space ReservationName= "
         "Tres=cpu=4,mem=1000M,node=1,billing=4,gres/gpu=2 Account=ml QOS=normal WcKey= Cluster=c "
         "SubmitTime=2026-11-22T14:18:30 EligibleTime=2026-11-22T14:18:30 DerivedExitCode=0:0 "
         "ExitCode=0:0 \n"
      << "JobId=8 UserId=bob(1002) GroupId=users(100) Name=wrap JobState=CANCELLED Partition=gpu "
         "TimeLimit=UNLIMITED StartTime=Unknown EndTime=2026-11-22T14:20:00 NodeList=(null) "
         "NodeCnt=0 ProcCnt=0 WorkDir=/tmp ReservationName= Tres=cpu=1,node=1 Account= QOS=normal "
         "WcKey= Cluster=c SubmitTime=2026-11-22T14:19:00 EligibleTime=2026-11-22T14:19:00 "
         "DerivedExitCode=0:0 ExitCode=0:0 \n"
      << "JobId=9 UserId=bob(1002) Name=truncated\n"
      << "JobId=10 UserId=bob(1002) GroupId=users(100) Name=x JobState=TIMEOUT Partition=gpu "
         "TimeLimit=abc StartTime=2026-11-22T14:19:00 EndTime=2026-11-22T14:20:00 NodeList=n1 "
         "NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1 Account= QOS= WcKey= "
         "Cluster=c SubmitTime=2026-11-22T14:19:00 EligibleTime=2026-11-22T14:19:00 "
         "DerivedExitCode=0:0 ExitCode=0:0 \n";
  }
  REQUIRE(detect_trace_format(tmp.string()) == TraceFormat::JOBCOMP);
  const Trace t = load_trace(tmp.string());
  REQUIRE(t.jobs.size() == 2);
  const Job& a = t.jobs[0];
  CHECK(a.id == 7);
  CHECK(t.names.users.name(a.user) == "alice");
  CHECK(t.names.job_names.name(a.name) == "my job");
  CHECK(a.status == JobStatus::COMPLETED);
  CHECK(a.req_time == 3600);
  CHECK(a.wait == 11);
  CHECK(a.run == 60);
  CHECK(a.req_procs == 4);
  CHECK(a.req_nodes == 1);
  CHECK(a.req_gpus == 2);
  CHECK(a.req_mem == 1000LL * 1024 * 1024);
  CHECK(t.names.accounts.name(a.account) == "ml");
  const Job& b = t.jobs[1];
  CHECK(b.status == JobStatus::CANCELLED);
  CHECK(b.req_time < 0);  // UNLIMITED
  CHECK(b.run < 0);       // never started
  CHECK(t.report.skipped == 2);
  REQUIRE(t.report.first_errors.size() == 2);
  CHECK(t.report.first_errors[0].line == 3);
  CHECK(t.report.first_errors[0].field == "GroupId");
  CHECK(t.report.first_errors[1].field == "TimeLimit");
  ReadOptions strict;
  strict.strict = true;
  CHECK_THROWS_AS(load_trace(tmp.string(), strict), InputError);
  fs::remove(tmp);
}
