// Launcher and CUDA driver checks of the measuring runner (mlprio/fsdp/launch.hpp).
#include "mlprio/fsdp/launch.hpp"

#include <charconv>
#include <string>

namespace mlprio::fsdp {

namespace {

// A whole number >= lo in variable `name`, or nullopt-like -1 when unset.
int env_int(const EnvLookup& env, const char* name, int lo) {
  const char* s = env(name);
  if (s == nullptr) return -1;
  const std::string text(s);
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo)
    throw ::mlprio::UsageError("environment variable " + std::string(name) + "='" + text +
                               "': expected a whole number >= " + std::to_string(lo));
  return v;
}

}  // namespace

LauncherInfo launcher_info(const EnvLookup& env) {
  LauncherInfo info;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "PMI_SIZE"}) {
    const int n = env_int(env, v, 1);
    if (n >= 1) {
      info.size = n;
      info.size_from = v;
      break;
    }
  }
  for (const char* v :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"}) {
    const int r = env_int(env, v, 0);
    if (r >= 0) {
      info.local_rank = r;
      info.local_rank_from = v;
      break;
    }
  }
  info.pmix = env("PMIX_RANK") != nullptr;
  return info;
}

bool launched_with_ranks(const LauncherInfo& info) {
  return info.size > 1 || info.pmix;
}

void check_mpi_size(const LauncherInfo& info, int mpi_size) {
  if (info.size == 0 || info.size == mpi_size) return;
  throw ::mlprio::RuntimeError(
      "the launcher started " + std::to_string(info.size) + " processes (" + info.size_from +
      ") but MPI sees " + std::to_string(mpi_size) +
      (mpi_size == 1 ? " (each process is a singleton: is mpirun from another MPI than the one "
                       "mlprio-fsdp is linked with? use that MPI's mpirun, or srun --mpi=pmix)"
                     : "") +
      "; refusing to measure, since ranks would not see each other");
}

int device_for_rank(int local_rank, int local_size, int visible_gpus) {
  if (visible_gpus < 1) throw ::mlprio::RuntimeError("no visible GPU for this rank");
  if (local_size > visible_gpus)
    throw ::mlprio::RuntimeError(
        std::to_string(local_size) + " ranks on this node but " + std::to_string(visible_gpus) +
        " visible GPU(s): start at most one rank per GPU (mpirun -n / srun --ntasks-per-node, "
        "or CUDA_VISIBLE_DEVICES)");
  if (local_rank < 0 || local_rank >= local_size)
    throw ::mlprio::RuntimeError("local rank " + std::to_string(local_rank) + " is outside 0.." +
                                 std::to_string(local_size - 1));
  return local_rank;
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

CudaProbeResult classify_cuda(CountStatus status, int count, int driver_version,
                              int runtime_version, const std::string& detail) {
  if (driver_version == 0)  // cudaDriverGetVersion reports 0 when no driver is installed
    return {CudaProbe::no_driver, "no NVIDIA driver is installed (" + detail + ")"};
  if (status == CountStatus::insufficient_driver ||
      (runtime_version > 0 && driver_version < runtime_version))
    return {CudaProbe::driver_too_old,
            "the NVIDIA driver supports CUDA " + cuda_version_text(driver_version) +
                " but this build's CUDA runtime is " + cuda_version_text(runtime_version) +
                ": install the matching cuda-compat package on the nodes, or build mlprio with "
                "the cluster's own CUDA toolkit (-DCMAKE_CUDA_COMPILER=<toolkit>/bin/nvcc, "
                "fsdp_profiler/README.md)" +
                (detail.empty() ? std::string() : " (" + detail + ")")};
  if (status == CountStatus::no_device || (status == CountStatus::ok && count == 0))
    return {CudaProbe::no_device,
            "no CUDA device is visible (" +
                (detail.empty() ? std::string("cudaGetDeviceCount reports 0 devices") : detail) +
                "; check CUDA_VISIBLE_DEVICES and the job's GPU request)"};
  if (status == CountStatus::other_error) return {CudaProbe::error, "CUDA failed: " + detail};
  return {CudaProbe::ok, ""};
}

}  // namespace mlprio::fsdp
