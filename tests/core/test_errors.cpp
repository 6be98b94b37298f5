// The exception hierarchy and the exit-code convention of mlprio/util/errors.hpp, on core's
// exception types: bad input exits 2, a runtime failure 1, no device 3.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>

#include "mlprio/io/hdf5.hpp"
#include "mlprio/io/json_input.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/llm_advisor.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio/util/secret_file.hpp"

using mlprio::exit_code_for;

TEST_CASE("exit codes: bad input 2, runtime failure 1, no device 3", "[errors]") {
  CHECK(exit_code_for(mlprio::InputError("t.swf", "cannot open")) == 2);
  CHECK(exit_code_for(mlprio::io::JsonInputError("not valid JSON")) == 2);
  CHECK(exit_code_for(mlprio::model::ModelError("model file m.json: corrupt")) == 2);
  CHECK(exit_code_for(mlprio::model::AdvisorError("AdvisorConfig.base_url is invalid")) == 2);
  CHECK(exit_code_for(mlprio::SecretFileError("key file is world-readable")) == 2);
  CHECK(exit_code_for(mlprio::RangeError("--nodes: out of range")) == 2);
  CHECK(exit_code_for(std::invalid_argument("--mbs: not a number")) == 2);

  CHECK(exit_code_for(mlprio::h5::H5Error("cannot create HDF5 file")) == 1);
  CHECK(exit_code_for(mlprio::InvariantError("replay invariant broken")) == 1);
  CHECK(exit_code_for(mlprio::RuntimeError("write failed")) == 1);
  CHECK(exit_code_for(std::runtime_error("plain")) == 1);
  CHECK(exit_code_for(std::bad_alloc()) == 1);

  CHECK(exit_code_for(mlprio::NoDeviceError("no CUDA device")) == 3);
}

TEST_CASE("every mlprio exception is an mlprio::Error and keeps its message", "[errors]") {
  const mlprio::InputError e("t.swf", "cannot open: No such file or directory");
  const mlprio::Error& base = e;
  CHECK(std::string(base.what()) == "t.swf: cannot open: No such file or directory");
  CHECK_THROWS_AS(throw mlprio::model::ModelError("x"), mlprio::UsageError);
  CHECK_THROWS_AS(throw mlprio::h5::H5Error("x"), mlprio::RuntimeError);
  CHECK_THROWS_AS(throw mlprio::RangeError("x"), mlprio::Error);
}

TEST_CASE("no library or program throws a std:: exception type; each throws an mlprio::Error",
          "[errors]") {
  namespace fs = std::filesystem;
  const fs::path root(MLPRIO_SOURCE_DIR);
  size_t files = 0;
  for (const char* dir :
       {"core", "cli", "replay", "model", "fsdp_profiler", "kernels", "slurm_plugin"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".h"))
        continue;
      ++files;
      std::ifstream in(e.path());
      size_t line_no = 0;
      for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.find("throw std::") != std::string::npos)
          FAIL_CHECK(e.path().string() << ":" << line_no << ": " << line);
      }
    }
  }
  CHECK(files > 100);
}
