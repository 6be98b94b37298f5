// Writes replay, sweep and measure results to HDF5 (layout in fsdp_profiler/README.md).
#include "h5_output.hpp"

#include <cstring>
#include <tuple>
#include <vector>

#include "mlprio/io/hdf5.hpp"

namespace mlprio::fsdp {

namespace {

struct PointRow {
  int64_t mbs;
  double retries_per_step;
  int64_t first_step_retries;
  int8_t oom;
  int64_t ooms;
  int64_t peak_reserved_bytes;
  int64_t peak_allocated_bytes;
  double fragmentation;
  double alloc_overhead_ms_per_step;
};

h5::Provenance provenance(const RunInfo& info) {
  return h5::Provenance{"fsdp", info.command_line, info.config_json, info.input_sha256};
}

void set_command(h5::WriteFile& f, std::string_view command) {
  f.root().set_attr("fsdp_command", command);
  f.root().set_attr("fsdp_layout_version", static_cast<int64_t>(FSDP_LAYOUT_VERSION));
}

void write_series(const h5::Group& g, const std::vector<MemorySample>& s) {
  std::vector<int64_t> op, step, phase, alloc, reserved, active;
  for (const auto& x : s) {
    op.push_back(x.op);
    step.push_back(x.step);
    phase.push_back(x.phase);
    alloc.push_back(x.allocated_bytes);
    reserved.push_back(x.reserved_bytes);
    active.push_back(x.active_bytes);
  }
  g.write_column("op", std::span<const int64_t>(op));
  g.write_column("step", std::span<const int64_t>(step));
  g.write_column("phase", std::span<const int64_t>(phase));
  g.write_column("allocated_bytes", std::span<const int64_t>(alloc));
  g.write_column("reserved_bytes", std::span<const int64_t>(reserved));
  g.write_column("active_bytes", std::span<const int64_t>(active));
  g.set_attr("phase_names", std::string_view("0=init,1=forward,2=backward,3=optimizer"));
}

void write_stats(const h5::Group& g, const MemoryStats& st) {
  for (const auto& [k, v] : st.flatten()) g.set_attr(k, static_cast<int64_t>(v));
}

}  // namespace

void write_replay_h5(const std::string& path, const RunInfo& info, const ReplayResult& r) {
  h5::WriteFile f(path, provenance(info));
  set_command(f, "replay");
  const h5::Group g = f.root().create_group("replay");
  g.set_attr("device_index", static_cast<int64_t>(r.device_index));
  g.set_attr("entries", r.entries);
  g.set_attr("allocs", r.allocs);
  g.set_attr("frees", r.frees);
  g.set_attr("failed_allocs", r.failed_allocs);
  g.set_attr("unmatched_frees", r.unmatched_frees);
  write_stats(g.create_group("memory_stats"), r.stats);
  const h5::Group s = g.create_group("series");
  std::vector<int64_t> entry, alloc, reserved, active;
  for (const auto& x : r.series) {
    entry.push_back(x.entry);
    alloc.push_back(x.allocated_bytes);
    reserved.push_back(x.reserved_bytes);
    active.push_back(x.active_bytes);
  }
  s.write_column("entry", std::span<const int64_t>(entry));
  s.write_column("allocated_bytes", std::span<const int64_t>(alloc));
  s.write_column("reserved_bytes", std::span<const int64_t>(reserved));
  s.write_column("active_bytes", std::span<const int64_t>(active));
  f.commit();
}

namespace {

// /sweep of either command.
void write_sweep_group(h5::WriteFile& f, const SweepResult& r) {
  const h5::Group g = f.root().create_group("sweep");
  g.set_attr("max_safe_mbs", r.max_safe_mbs);
  g.set_attr("first_bad_mbs", r.first_bad_mbs);
  std::vector<PointRow> rows;
  for (const auto& p : r.points)
    rows.push_back(PointRow{p.mbs, p.retries_per_step, p.first_step_retries,
                            static_cast<int8_t>(p.oom), p.ooms, p.peak_reserved, p.peak_allocated,
                            p.fragmentation, p.alloc_overhead_ms_per_step});
  h5::CompoundType<PointRow> type;
  type.add("mbs", &PointRow::mbs)
      .add("retries_per_step", &PointRow::retries_per_step)
      .add("first_step_retries", &PointRow::first_step_retries)
      .add("oom", &PointRow::oom)
      .add("ooms", &PointRow::ooms)
      .add("peak_reserved_bytes", &PointRow::peak_reserved_bytes)
      .add("peak_allocated_bytes", &PointRow::peak_allocated_bytes)
      .add("fragmentation", &PointRow::fragmentation)
      .add("alloc_overhead_ms_per_step", &PointRow::alloc_overhead_ms_per_step);
  g.write_table("points", type, std::span<const PointRow>(rows));
  const h5::Group series = g.create_group("series");
  for (const auto& [mbs, samples] : r.series) {
    const h5::Group s = series.create_group("mbs_" + std::to_string(mbs));
    s.set_attr("mbs", mbs);
    write_series(s, samples);
  }
}

struct MeasuredRow {
  int64_t mbs;
  double step_ms;
  double first_step_ms;
  double device_call_ms_per_step;
  double retry_sync_ms_per_step;
  double compute_ms_per_step;
  double samples_per_s;
  int64_t collectives_per_step;
};

}  // namespace

void write_sweep_h5(const std::string& path, const RunInfo& info, const SweepResult& r) {
  h5::WriteFile f(path, provenance(info));
  set_command(f, "sweep");
  write_sweep_group(f, r);
  f.commit();
}

void write_measure_h5(const std::string& path, const RunInfo& info, const MeasureResult& r,
                      const LatencyModel& fitted) {
  h5::WriteFile f(path, provenance(info));
  set_command(f, "measure");
  SweepResult sr;
  for (const auto& mp : r.points) sr.points.push_back(mp.model);
  sr.max_safe_mbs = r.max_safe_mbs;
  sr.first_bad_mbs = r.first_bad_mbs;
  sr.series = r.series;
  write_sweep_group(f, sr);
  const h5::Group g = f.root().create_group("measure");
  g.set_attr("gpu", std::string_view(r.device_name));
  g.set_attr("ranks", static_cast<int64_t>(r.ranks));
  g.set_attr("capacity_bytes", static_cast<int64_t>(r.capacity));
  g.set_attr("fitted_latency", std::string_view(latency_text(fitted)));
  const DeviceCallTimes& t = r.calls;
  for (const auto& [name, n, us] :
       {std::tuple{"malloc", t.mallocs, t.malloc_us}, std::tuple{"free", t.frees, t.free_us},
        std::tuple{"map", t.maps, t.map_us}, std::tuple{"unmap", t.unmaps, t.unmap_us},
        std::tuple{"sync", t.syncs, t.sync_us}, std::tuple{"failed", t.failed, t.failed_us}}) {
    g.set_attr(std::string(name) + "_calls", n);
    g.set_attr(std::string(name) + "_ms", us / 1000.0);
  }
  std::vector<MeasuredRow> rows;
  for (const auto& mp : r.points)
    rows.push_back(MeasuredRow{mp.model.mbs, mp.step_ms, mp.first_step_ms,
                               mp.device_call_ms_per_step, mp.retry_sync_ms_per_step,
                               mp.compute_ms_per_step, mp.samples_per_s, mp.collectives_per_step});
  h5::CompoundType<MeasuredRow> type;
  type.add("mbs", &MeasuredRow::mbs)
      .add("step_ms", &MeasuredRow::step_ms)
      .add("first_step_ms", &MeasuredRow::first_step_ms)
      .add("device_call_ms_per_step", &MeasuredRow::device_call_ms_per_step)
      .add("retry_sync_ms_per_step", &MeasuredRow::retry_sync_ms_per_step)
      .add("compute_ms_per_step", &MeasuredRow::compute_ms_per_step)
      .add("samples_per_s", &MeasuredRow::samples_per_s)
      .add("collectives_per_step", &MeasuredRow::collectives_per_step);
  g.write_table("points", type, std::span<const MeasuredRow>(rows));
  f.commit();
}

}  // namespace mlprio::fsdp
