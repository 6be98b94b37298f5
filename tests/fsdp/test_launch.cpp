// Launcher and CUDA-driver decisions of `mlprio-fsdp measure` (mlprio/fsdp/launch.hpp), from
// environment tables and version numbers: no MPI launcher or GPU needed.
#include <map>
#include <string>

#include <catch2/catch.hpp>

#include "mlprio/fsdp/launch.hpp"

using namespace mlprio::fsdp;

namespace {
EnvLookup table(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}
}  // namespace

TEST_CASE("launcher: sizes from Open MPI, Slurm and PMI, PMIX_RANK is a rank and not a size") {
  const auto ompi =
      launcher_info(table({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}}));
  CHECK(ompi.size == 4);
  CHECK(ompi.size_from == "OMPI_COMM_WORLD_SIZE");
  CHECK(ompi.local_rank == 3);
  CHECK(launched_with_ranks(ompi));

  const auto srun = launcher_info(table({{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_LOCALID", "1"}}));
  CHECK(srun.size == 8);
  CHECK(srun.local_rank == 1);
  CHECK(srun.local_rank_from == "SLURM_LOCALID");

  // PMIx only: rank 5 is not a size of 5; MPI is started and tells the size.
  const auto pmix = launcher_info(table({{"PMIX_RANK", "5"}}));
  CHECK(pmix.size == 0);
  CHECK(pmix.pmix);
  CHECK(launched_with_ranks(pmix));
  // Rank 0 under PMIx is still launched (the old check read "0" as a size and missed it).
  CHECK(launched_with_ranks(launcher_info(table({{"PMIX_RANK", "0"}}))));

  const auto alone = launcher_info(table({}));
  CHECK_FALSE(launched_with_ranks(alone));
  CHECK(alone.local_rank == -1);
  // A one-task srun step is not "ranks".
  CHECK_FALSE(launched_with_ranks(launcher_info(table({{"SLURM_STEP_NUM_TASKS", "1"}}))));
}

TEST_CASE("launcher: a malformed variable is named") {
  CHECK_THROWS_WITH(launcher_info(table({{"OMPI_COMM_WORLD_SIZE", "four"}})),
                    Catch::Contains("OMPI_COMM_WORLD_SIZE='four'"));
  CHECK_THROWS_AS(launcher_info(table({{"SLURM_LOCALID", "-1"}})), mlprio::UsageError);
  CHECK_THROWS_AS(launcher_info(table({{"PMI_SIZE", "0"}})), mlprio::UsageError);
}

TEST_CASE("MPI must agree with the launcher: singletons from a foreign mpirun are refused") {
  const auto four = launcher_info(table({{"OMPI_COMM_WORLD_SIZE", "4"}}));
  CHECK_NOTHROW(check_mpi_size(four, 4));
  CHECK_THROWS_WITH(check_mpi_size(four, 1), Catch::Contains("singleton"));
  CHECK_THROWS_AS(check_mpi_size(four, 2), mlprio::RuntimeError);
  CHECK_NOTHROW(check_mpi_size(launcher_info(table({{"PMIX_RANK", "0"}})), 3));  // no size to check
}

TEST_CASE("one GPU per local rank, and more ranks than GPUs on a node is refused") {
  CHECK(device_for_rank(0, 1, 1) == 0);
  CHECK(device_for_rank(3, 4, 8) == 3);
  CHECK_THROWS_WITH(device_for_rank(2, 4, 2),
                    Catch::Contains("4 ranks on this node but 2 visible GPU(s)"));
  CHECK_THROWS_AS(device_for_rank(0, 1, 0), mlprio::RuntimeError);
}

TEST_CASE("CUDA probe: no driver and no device are no GPU but an old driver is a fault") {
  // No driver at all (cudaDriverGetVersion gives 0; the runtime says "insufficient driver").
  auto r =
      classify_cuda(CountStatus::insufficient_driver, 0, 0, 13000, "cudaErrorInsufficientDriver");
  CHECK(r.kind == CudaProbe::no_driver);
  // A 12.4 driver under a CUDA 13.0 runtime: both versions and what to do.
  r = classify_cuda(CountStatus::insufficient_driver, 0, 12040, 13000,
                    "cudaErrorInsufficientDriver");
  CHECK(r.kind == CudaProbe::driver_too_old);
  CHECK_THAT(r.message, Catch::Contains("CUDA 12.4") && Catch::Contains("runtime is 13.0") &&
                            Catch::Contains("cuda-compat"));
  // Devices hidden (CUDA_VISIBLE_DEVICES="") or absent.
  CHECK(classify_cuda(CountStatus::no_device, 0, 13000, 13000, "cudaErrorNoDevice").kind ==
        CudaProbe::no_device);
  CHECK(classify_cuda(CountStatus::ok, 0, 13000, 13000, "").kind == CudaProbe::no_device);
  // A GPU that is there but broken is an error (the GPU tests fail, not skip).
  CHECK(classify_cuda(CountStatus::other_error, 0, 13000, 13000, "cudaErrorInitializationError")
            .kind == CudaProbe::error);
  CHECK(classify_cuda(CountStatus::ok, 2, 13010, 13000, "").kind == CudaProbe::ok);
  CHECK(cuda_version_text(12040) == "12.4");
  CHECK(cuda_version_text(13000) == "13.0");
}
