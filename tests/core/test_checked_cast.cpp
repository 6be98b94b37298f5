// Range-checked double -> integer conversion (mlprio/util/checked_cast.hpp) and its use by the
// readers: numbers out of a field's range are malformed fields naming the field and the range,
// never integers wrapped by an undefined cast (1e300 GPUs read as none).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include "mlprio/jobs/slurm_format.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/util/checked_cast.hpp"

using namespace mlprio;
namespace fs = std::filesystem;

namespace {
// Loads `text` in strict mode; returns the InputError message or "ok".
std::string strict_outcome(const std::string& name, const std::string& text, TraceFormat f) {
  const auto tmp = fs::temp_directory_path() / ("mlprio_test_range_" + name);
  std::ofstream(tmp) << text;
  ReadOptions o;
  o.format = f;
  o.strict = true;
  std::string out = "ok";
  try {
    load_trace(tmp.string(), o);
  } catch (const InputError& e) {
    out = e.what();
  }
  fs::remove(tmp);
  return out;
}
const std::string SWF_OK = "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n";
}  // namespace

TEST_CASE("to_integer: the edges of every integer type", "[checked_cast]") {
  CHECK_FALSE(to_integer<int64_t>(1e300));
  CHECK_FALSE(to_integer<int64_t>(9223372036854775808.0));  // 2^63
  CHECK(*to_integer<int64_t>(9223372036854774784.0) == 9223372036854774784LL);
  CHECK(*to_integer<int64_t>(-9223372036854775808.0) == std::numeric_limits<int64_t>::min());
  CHECK_FALSE(to_integer<uint64_t>(18446744073709551616.0));  // 2^64
  CHECK_FALSE(to_integer<uint64_t>(-1.0));
  CHECK_FALSE(to_integer<int32_t>(2147483648.0));
  CHECK_FALSE(to_integer<int32_t>(std::nan("")));
  CHECK_FALSE(to_integer<int32_t>(std::numeric_limits<double>::infinity()));
  CHECK(*to_integer<int32_t>(-2.9) == -2);  // truncation toward zero
  CHECK_FALSE(to_integer<int64_t>(7.0, 0, 6));
  CHECK_THROWS_WITH(
      checked_cast<int64_t>(1.5e19, "--capacity", 1, 100),
      Catch::Contains("--capacity: 1.5e+19 is out of range") && Catch::Contains("[1, 100]"));
  CHECK(checked_mul(int64_t{1} << 41, int64_t{1} << 22) == std::nullopt);  // 2^63
  CHECK(*checked_mul(int64_t{1} << 40, int64_t{1} << 20) == int64_t{1} << 60);
}

TEST_CASE("SWF: counts and memory out of range are malformed fields",
          "[swf][errors][checked_cast]") {
  REQUIRE(strict_outcome("ok.swf", SWF_OK, TraceFormat::SWF) == "ok");
  // 1e300 allocated processors used to become whatever the undefined cast gave.
  CHECK_THAT(strict_outcome("procs.swf", "1 0 10 100 1e300 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n",
                            TraceFormat::SWF),
             Catch::Contains("field 5 (allocated_procs)") && Catch::Contains("out of range"));
  CHECK_THAT(strict_outcome("user.swf", "1 0 10 100 4 -1 -1 4 200 -1 1 3e9 1 -1 -1 -1 -1 -1\n",
                            TraceFormat::SWF),
             Catch::Contains("field 12 (user_id)"));
  // 2^50 KB per processor x 2^20 processors overflows 64 bits.
  CHECK_THAT(
      strict_outcome("mem.swf",
                     "1 0 10 100 1048576 -1 -1 1048576 200 1125899906842624 1 1 1 -1 -1 -1 -1 -1\n",
                     TraceFormat::SWF),
      Catch::Contains("field 10 (requested_memory)") && Catch::Contains("2^62"));
  CHECK_THAT(strict_outcome("header.swf", "; MaxNodes: 1e300\n" + SWF_OK, TraceFormat::SWF),
             Catch::Equals("ok"));  // an unreadable header value is "absent" (-1)
}

TEST_CASE("Alibaba: 1e300 GPUs is a malformed field, not a pod needing none",
          "[alibaba][errors][checked_cast]") {
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  REQUIRE(strict_outcome("ok.csv", header + "p1,1000,512,1,1000,,LS,Succeeded,0,100,10\n",
                         TraceFormat::ALIBABA) == "ok");
  CHECK_THAT(strict_outcome("gpu.csv", header + "p1,1000,512,1e300,1000,,LS,Succeeded,0,100,10\n",
                            TraceFormat::ALIBABA),
             Catch::Contains("num_gpu") && Catch::Contains("out of range"));
  CHECK_THAT(strict_outcome("cpu.csv", header + "p1,1e300,512,1,1000,,LS,Succeeded,0,100,10\n",
                            TraceFormat::ALIBABA),
             Catch::Contains("cpu_milli"));
  CHECK_THAT(strict_outcome("mem.csv", header + "p1,1000,1e300,1,1000,,LS,Succeeded,0,100,10\n",
                            TraceFormat::ALIBABA),
             Catch::Contains("memory_mib"));
}

TEST_CASE("sacct: memory, counts and GPUs out of range are malformed fields",
          "[sacct][errors][checked_cast]") {
  const std::string header = "JobID|Submit|ReqCPUS|ReqMem|ReqTRES\n";
  const std::string ok = "1|2024-01-01T00:00:00|4|4000Mc|cpu=4,gres/gpu=2\n";
  REQUIRE(strict_outcome("ok.txt", header + ok, TraceFormat::SACCT) == "ok");
  CHECK_THAT(strict_outcome("mem.txt", header + "1|2024-01-01T00:00:00|4|1e300M|cpu=4\n",
                            TraceFormat::SACCT),
             Catch::Contains("ReqMem"));
  // 2^40 MiB per CPU x 2^30 CPUs: each fits, the product does not.
  CHECK_THAT(strict_outcome("memc.txt",
                            header + "1|2024-01-01T00:00:00|1073741824|1099511627776Mc|cpu=4\n",
                            TraceFormat::SACCT),
             Catch::Contains("ReqMem") && Catch::Contains("4 EiB"));
  CHECK_THAT(strict_outcome("cpus.txt", header + "1|2024-01-01T00:00:00|1e30|4000M|cpu=4\n",
                            TraceFormat::SACCT),
             Catch::Contains("ReqCPUS"));
  CHECK_THAT(strict_outcome("gpus.txt", header + "1|2024-01-01T00:00:00|4|4000M|gres/gpu=1e300\n",
                            TraceFormat::SACCT),
             Catch::Contains("ReqTRES"));
  CHECK_FALSE(parse_slurm_mem("inf"));
  CHECK_FALSE(parse_slurm_duration("nan"));
  CHECK_FALSE(parse_slurm_duration("inf"));
  CHECK_FALSE(parse_tres("cpu=1e300"));
}
