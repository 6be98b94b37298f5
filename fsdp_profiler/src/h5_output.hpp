// HDF5 output of mlprio-fsdp through mlprio::h5 (core/io). The layout is documented in
// fsdp_profiler/README.md; files carry Provenance kind "fsdp" and are renamed into place only
// when complete.
#pragma once

#include <string>

#include "mlprio/fsdp/measure.hpp"
#include "mlprio/fsdp/snapshot.hpp"
#include "mlprio/fsdp/sweep.hpp"

namespace mlprio::fsdp {

// Root attribute `fsdp_layout_version` of every file written here. 1 (files without the
// attribute): /sweep, /measure, /replay. 2: the same groups, and a file may also hold /truth,
// what PyTorch itself measured (written by fsdp_profiler/validate/truth_h5.py, which declares
// the same number). Change both together.
inline constexpr int FSDP_LAYOUT_VERSION = 2;

struct RunInfo {
  std::string command_line;
  std::string config_json;  // the run's configuration as JSON text
  std::string input_sha256;
};

void write_replay_h5(const std::string& path, const RunInfo& info, const ReplayResult& r);
void write_sweep_h5(const std::string& path, const RunInfo& info, const SweepResult& r);
// The sweep layout of the allocator model's fields, plus /measure: what the GPU measured.
void write_measure_h5(const std::string& path, const RunInfo& info, const MeasureResult& r,
                      const LatencyModel& fitted);

}  // namespace mlprio::fsdp
