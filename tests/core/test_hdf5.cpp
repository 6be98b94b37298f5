// HDF5 layer tests: provenance attributes, compound tables and columns read back, the
// temporary-name-then-rename crash safety, and refusal of files that are not mlprio's.
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "../support/skip.hpp"
#include "mlprio/io/hdf5.hpp"

using namespace mlprio;
namespace fs = std::filesystem;

namespace {

struct Row {
  int64_t id;
  double start;
  int32_t procs;
  int8_t flag;
  char policy[16];
};

h5::CompoundType<Row> row_type() {
  return h5::CompoundType<Row>{}
      .add("id", &Row::id)
      .add("start", &Row::start)
      .add("procs", &Row::procs)
      .add("flag", &Row::flag)
      .add("policy", &Row::policy);
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("mlprio_test_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace

TEST_CASE("HDF5: attributes, tables and columns round-trip", "[hdf5]") {
  const auto path = temp_file("roundtrip.h5");
  std::vector<Row> rows(40000);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = Row{static_cast<int64_t>(i),
                  0.5 * static_cast<double>(i),
                  static_cast<int32_t>(i % 97),
                  static_cast<int8_t>(i % 2),
                  {}};
    std::snprintf(rows[i].policy, sizeof rows[i].policy, "p%zu", i % 7);
  }
  std::vector<double> series = {1.5, 2.5, -3.0};
  std::vector<int64_t> counts = {7, 8, 9, 10};
  {
    h5::WriteFile f(path.string(), {"test", "mlprio test --x", "{\"a\":1}", "abc123"});
    auto g = f.root().create_group("run0");
    g.set_attr("policy", std::string_view("fcfs"));
    g.set_attr("jobs", int64_t{40000});
    g.set_attr("avg_wait", 12.25);
    g.write_table("jobs", row_type(), std::span<const Row>(rows));
    g.write_column("queue_length", std::span<const double>(series));
    g.write_column("counts", std::span<const int64_t>(counts));
    g.write_column("empty", std::span<const double>());
    CHECK_FALSE(fs::exists(path));  // not visible under its final name before commit
    f.commit();
  }
  REQUIRE(fs::exists(path));
  h5::ReadFile r(path.string(), "test");
  auto& root = r.root();
  CHECK(root.attr_string("format") == "mlprio");
  CHECK(root.attr_int("format_version") == h5::FORMAT_VERSION);
  CHECK(root.attr_string("command_line") == "mlprio test --x");
  CHECK(root.attr_string("config") == "{\"a\":1}");
  CHECK(root.attr_string("input_sha256") == "abc123");
  CHECK_FALSE(root.attr_string("git_commit").empty());
  CHECK(root.attr_string("tool_version") == h5::tool_version());
  CHECK(root.children() == std::vector<std::string>{"run0"});
  auto g = root.open_group("run0");
  CHECK(g.attr_string("policy") == "fcfs");
  CHECK(g.attr_int("jobs") == 40000);
  CHECK(g.attr_double("avg_wait") == 12.25);
  const auto back = g.read_table("jobs", row_type());
  REQUIRE(back.size() == rows.size());
  for (size_t i = 0; i < rows.size(); i += 997) {
    CHECK(back[i].id == rows[i].id);
    CHECK(back[i].start == rows[i].start);
    CHECK(back[i].procs == rows[i].procs);
    CHECK(back[i].flag == rows[i].flag);
    CHECK(std::strcmp(back[i].policy, rows[i].policy) == 0);
  }
  CHECK(g.read_column_double("queue_length") == series);
  CHECK(g.read_column_int("counts") == counts);
  CHECK(g.read_column_double("empty").empty());
  CHECK_THROWS_AS(g.open_group("nope"), h5::H5Error);
  CHECK_THROWS_WITH(h5::ReadFile(path.string(), "replay"), Catch::Contains("expected 'replay'"));
  fs::remove(path);
}

TEST_CASE("HDF5: rows appended in blocks of any size read back as one table", "[hdf5][append]") {
  const auto path = temp_file("append.h5");
  std::vector<Row> rows(70001);  // more than four chunks, the last one partial
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = Row{static_cast<int64_t>(i) * 3,
                  0.25 * static_cast<double>(i),
                  static_cast<int32_t>(i % 89),
                  static_cast<int8_t>(i % 3),
                  {}};
    std::snprintf(rows[i].policy, sizeof rows[i].policy, "u%zu", i % 11);
  }
  std::vector<double> values(rows.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0 / static_cast<double>(i + 1);
  // Blocks below, at and above the chunk (16384 rows), and a block that starts mid-chunk.
  const std::vector<size_t> blocks = {1, 16383, 0, 16384, 5, 33000, 4228};
  {
    h5::WriteFile f(path.string(), {"test", "", "", ""});
    auto g = f.root().create_group("run0");
    h5::Appender table = g.append_table("jobs", row_type());
    h5::Appender column = g.append_column("values", h5::FieldType::FLOAT64);
    h5::Appender never = g.append_column("never", h5::FieldType::INT64);
    size_t at = 0;
    for (size_t b : blocks) {
      table.append(std::span<const Row>(rows.data() + at, b));
      column.append(std::span<const double>(values.data() + at, b));
      at += b;
      CHECK(table.rows() == at);
    }
    REQUIRE(at == rows.size());
    // A row of another size is refused, naming both sizes, and nothing is appended.
    const std::vector<int64_t> wrong = {1};
    CHECK_THROWS_WITH(table.append(std::span<const int64_t>(wrong)),
                      Catch::Contains("8 bytes") && Catch::Contains(std::to_string(sizeof(Row))));
    CHECK(table.rows() == rows.size());
    table.flush();
    table.flush();  // twice is harmless
    column.flush();
    never.flush();
    f.commit();
  }
  h5::ReadFile r(path.string(), "test");
  auto g = r.root().open_group("run0");
  const auto back = g.read_table("jobs", row_type());
  REQUIRE(back.size() == rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (back[i].id != rows[i].id || back[i].start != rows[i].start ||
        back[i].procs != rows[i].procs || back[i].flag != rows[i].flag ||
        std::strcmp(back[i].policy, rows[i].policy) != 0) {
      FAIL("row " << i << " differs");
    }
  }
  CHECK(g.read_column_double("values") == values);
  CHECK(g.read_column_int("never").empty());
  fs::remove(path);
}

TEST_CASE("HDF5: a writer that never commits leaves no file behind", "[hdf5][crash]") {
  const auto path = temp_file("abandoned.h5");
  {
    h5::WriteFile f(path.string(), {"test", "", "", ""});
    f.root().create_group("partial");
    REQUIRE(fs::exists(f.temp_path()));
    // An exception unwinding through here must not publish the file.
  }
  CHECK_FALSE(fs::exists(path));
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path()))
    CHECK(e.path().filename().string().find("abandoned.h5.tmp") == std::string::npos);
}

TEST_CASE("HDF5: a process killed mid-write never leaves a file that looks complete",
          "[hdf5][crash]") {
  const auto path = temp_file("killed.h5");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    h5::WriteFile f(path.string(), {"test", "", "", ""});
    std::vector<double> big(1 << 20, 1.0);
    f.root().write_column("big", std::span<const double>(big));
    ::_exit(0);  // dies without commit and without running destructors, like a SIGKILL
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK_FALSE(fs::exists(path));
  // Whatever the dead writer left lives under the temporary name only.
  const auto tmp = path.string() + ".tmp." + std::to_string(child);
  if (fs::exists(tmp)) fs::remove(tmp);
}

TEST_CASE("HDF5: a full disk is an error naming the file, leaves no file, and exits cleanly",
          "[hdf5][crash]") {
  // A file-size limit makes every write past 64 KiB fail with EFBIG, as a full disk fails with
  // ENOSPC. The child reports through its exit status: 0 = the right error, 1 = a wrong one;
  // it then exits normally, running HDF5's exit handler (which used to segfault on the file whose
  // flush had failed).
  const auto path = temp_file("full.h5");
  std::fflush(nullptr);  // the child exits through exit(): nothing buffered to print twice
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int code = 1;
    try {
      h5::WriteFile f(path.string(), {"test", "", "", ""});
      std::vector<double> noise(1 << 18);  // 2 MiB that deflate cannot shrink below the limit
      uint64_t x = 88172645463325252ULL;
      for (auto& v : noise) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v = static_cast<double>(x);
      }
      f.root().write_column("noise", std::span<const double>(noise));
      f.commit();
    } catch (const h5::H5Error& e) {
      const std::string m = e.what();
      if (m.find(path.string()) != std::string::npos &&
          m.find("File too large") != std::string::npos)
        code = 0;
      else
        std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
    }
    std::exit(code);  // runs atexit handlers, HDF5's included
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  INFO("status " << status);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path.string() + ".tmp." + std::to_string(child)));
}

TEST_CASE("HDF5: files that are not mlprio's are refused with a reason", "[hdf5][errors]") {
  const auto missing = temp_file("missing.h5");
  CHECK_THROWS_WITH(h5::ReadFile(missing.string()), Catch::Contains("cannot open"));
  const auto text = temp_file("text.h5");
  std::ofstream(text) << "not hdf5";
  CHECK_THROWS_WITH(h5::ReadFile(text.string()), Catch::Contains("not an HDF5 file"));
  const auto foreign = temp_file("foreign.h5");
  const hid_t f = H5Fcreate(foreign.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  CHECK_THROWS_WITH(h5::ReadFile(foreign.string()), Catch::Contains("not an mlprio result file"));
  CHECK_THROWS_WITH(h5::WriteFile("/nonexistent/dir/x.h5", {"test", "", "", ""}),
                    Catch::Contains("writable"));
  fs::remove(text);
  fs::remove(foreign);
}

TEST_CASE("HDF5: h5py reads what we write (when python3-h5py is installed)", "[hdf5][python]") {
  if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0)
    MLPRIO_SKIP("python3-h5py not installed for /usr/bin/python3 (Debian's)");
  const auto path = temp_file("h5py.h5");
  {
    h5::WriteFile f(path.string(), {"test", "cmd", "", ""});
    std::vector<Row> rows(3);
    rows[1].id = 42;
    std::strcpy(rows[1].policy, "easy");
    f.root().write_table("jobs", row_type(), std::span<const Row>(rows));
    f.commit();
  }
  const std::string cmd =
      "/usr/bin/python3 -c \"import h5py,sys; f=h5py.File('" + path.string() +
      "','r'); assert f.attrs['format']=='mlprio', f.attrs['format']; j=f['jobs'][:]; "
      "assert j['id'][1]==42; assert j['policy'][1]==b'easy'; print('ok')\"";
  CHECK(std::system(cmd.c_str()) == 0);
  fs::remove(path);
}
