// What the launcher and the CUDA driver say, reduced to the decisions `mlprio-fsdp measure` takes
// before it touches a GPU: is this process one of several ranks, does MPI agree with the
// launcher, which GPU does a rank use, and is "no device" really no device or a driver too old
// for this build's CUDA runtime. Pure functions of their inputs (environment lookups and version
// numbers), so they are tested on machines without MPI launchers or GPUs.
#pragma once

#include <functional>
#include <string>

#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

// getenv, or a table in tests; returns nullptr for an unset variable.
using EnvLookup = std::function<const char*(const char*)>;

struct LauncherInfo {
  int size = 0;           // processes the launcher started; 0 when none says
  std::string size_from;  // the variable that said so
  int local_rank = -1;    // this process's rank on its node; -1 when none says
  std::string local_rank_from;
  bool pmix = false;  // PMIX_RANK is set: a PMIx launcher, which names no size
};

// Reads the launcher's variables: sizes from OMPI_COMM_WORLD_SIZE, SLURM_STEP_NUM_TASKS,
// PMI_SIZE (first set wins; PMIX_RANK is a rank, never a size); local ranks from
// OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, PMI_LOCAL_RANK. A value that is
// not a whole number >= 0 (>= 1 for sizes) is a UsageError naming the variable.
LauncherInfo launcher_info(const EnvLookup& env);

// Whether to initialise MPI: the launcher started more than one process, or a PMIx launcher did.
bool launched_with_ranks(const LauncherInfo& info);

// Throws RuntimeError when MPI's world size differs from the launcher's: typically an `mpirun`
// of another MPI than the one this program is linked with, which starts every process as a
// singleton (each would then measure alone, all on GPU 0).
void check_mpi_size(const LauncherInfo& info, int mpi_size);

// The GPU of a rank: its local rank. Throws RuntimeError when its node has more ranks than
// visible GPUs (two ranks on one GPU would share its memory and measure nonsense).
int device_for_rank(int local_rank, int local_size, int visible_gpus);

// What cudaGetDeviceCount's outcome means, told apart with cudaDriverGetVersion and
// cudaRuntimeGetVersion (versions as CUDA encodes them: 1000 * major + 10 * minor).
enum class CountStatus { ok, insufficient_driver, no_device, other_error };
enum class CudaProbe { ok, no_driver, driver_too_old, no_device, error };
struct CudaProbeResult {
  CudaProbe kind = CudaProbe::error;
  std::string message;  // for the user; empty when ok
};
CudaProbeResult classify_cuda(CountStatus status, int count, int driver_version,
                              int runtime_version, const std::string& detail);

// 13000 -> "13.0", 12040 -> "12.4".
std::string cuda_version_text(int version);

// The driver cannot run this build's CUDA runtime: exit 1 (a fault to fix, not "no GPU").
class CudaDriverError : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

}  // namespace mlprio::fsdp
