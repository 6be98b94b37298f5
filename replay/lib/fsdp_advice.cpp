// The FSDP advice applied to a job list (see mlprio/replay/fsdp_advice.hpp). The directive text
// of each job goes through the same parser job_submit/mlprio uses (mlprio/model/fsdp_table.hpp),
// so the replay and the plugin can never read a job differently.
#include "mlprio/replay/fsdp_advice.hpp"

#include <cmath>
#include <fstream>
#include <ostream>
#include <random>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/util/text.hpp"

namespace mlprio::replay {

namespace {

// run_s=... and gpu_gib=... out of a line's tokens; the rest stays directive text.
std::string take_extra_keys(std::string_view text, FsdpJob& job, std::string& error) {
  std::string rest;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && util::is_space(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !util::is_space(text[j])) ++j;
    const std::string_view tok = text.substr(i, j - i);
    i = j;
    if (tok.empty()) break;
    if (tok.rfind("run_s=", 0) == 0) {
      const std::string v(tok.substr(6));
      char* end = nullptr;
      const double r = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(r) || r < 0 || r > 1e9)
        error = "run_s=" + v + " (expected seconds, 0..1e9)";
      else
        job.run_s = r;
    } else if (tok.rfind("gpu_gib=", 0) == 0) {
      const auto g = util::parse_int(tok.substr(8));
      if (!g || *g < 1 || *g > model::FSDP_MAX_GPU_GIB)
        error = std::string(tok) + " (expected GiB, 1..65536)";
      else
        job.gpu_gib = *g;
    } else {
      rest += (rest.empty() ? "" : " ") + std::string(tok);
    }
  }
  return rest;
}

}  // namespace

std::vector<FsdpJob> read_fsdp_jobs(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open the FSDP job list");
  std::vector<FsdpJob> jobs;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string_view t = util::trim(line);
    if (t.empty() || t.front() == '#') continue;
    const size_t sp = t.find_first_of(" \t");
    FsdpJob job;
    const auto id = util::parse_int(t.substr(0, sp));
    auto bad = [&](const std::string& what) {
      throw InputError(path, "line " + std::to_string(n) + ": " + what +
                                 " (expected: JOB_ID key=value ..., e.g. `17 model=t5-3b "
                                 "world_size=8 minibatch=20 run_s=36000`)");
    };
    if (!id) bad("'" + std::string(t.substr(0, std::min<size_t>(sp, 32))) + "' is not a job id");
    job.id = *id;
    std::string error;
    job.line = take_extra_keys(sp == std::string_view::npos ? "" : t.substr(sp), job, error);
    if (!error.empty()) bad(error);
    const auto parsed = model::parse_fsdp_directives("#MLPRIO " + job.line);
    if (!parsed.problems.empty()) bad(parsed.problems.front());
    job.directive = parsed.directive;
    if (!job.directive.complete()) bad("no model= and minibatch=");
    if (jobs.size() >= FSDP_JOBS_MAX) bad("more than " + std::to_string(FSDP_JOBS_MAX) + " jobs");
    jobs.push_back(std::move(job));
  }
  return jobs;
}

void write_fsdp_jobs(std::ostream& out, const std::vector<FsdpJob>& jobs) {
  out << "# mlprio-replay fsdp-advice job list: JOB_ID #MLPRIO-training-keys run_s= gpu_gib=\n";
  for (const auto& j : jobs) {
    out << j.id << " " << j.line;
    if (j.run_s >= 0) out << " run_s=" << j.run_s;
    if (j.gpu_gib > 0) out << " gpu_gib=" << j.gpu_gib;
    out << "\n";
  }
}

std::vector<FsdpJob> generate_fsdp_jobs(const model::FsdpTable& table, size_t n, uint64_t seed) {
  std::vector<const model::FsdpEntry*> entries;
  for (const auto& e : table.entries())
    if (!e.key.expandable_segments && e.max_safe_mbs > 0) entries.push_back(&e);
  if (entries.empty())
    throw UsageError("the table has no entry with a safe minibatch to draw jobs from");
  std::mt19937_64 rng(seed);
  std::vector<FsdpJob> jobs;
  for (size_t i = 0; i < n; ++i) {
    const model::FsdpEntry& e = *entries[rng() % entries.size()];
    // Minibatches from a little below the safe one to the OOM point (or a few above the safe
    // one): users push the minibatch towards the memory limit.
    const int64_t hi = e.oom_mbs ? e.oom_mbs : e.max_safe_mbs + 4;
    const int64_t lo = std::max<int64_t>(1, e.max_safe_mbs - std::max<int64_t>(2, hi / 8));
    const int64_t mbs = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    FsdpJob j;
    j.id = static_cast<int64_t>(i + 1);
    j.run_s = std::round(
        3600.0 * std::exp(std::uniform_real_distribution<double>(0.0, std::log(48.0))(rng)));
    j.gpu_gib = e.key.gpu_memory_gib;
    j.line = "model=" + e.key.model + " world_size=" + std::to_string(e.key.world_size) +
             " sharding=" + e.key.sharding + " precision=" + e.key.precision +
             " ac=" + (e.key.activation_checkpointing ? "1" : "0") +
             " minibatch=" + std::to_string(mbs);
    j.directive = model::parse_fsdp_directives("#MLPRIO " + j.line).directive;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

FsdpAdviceReport apply_fsdp_advice(const model::FsdpTable& table, const std::vector<FsdpJob>& jobs,
                                   int64_t default_gpu_gib) {
  FsdpAdviceReport r;
  for (const FsdpJob& j : jobs) {
    ++r.jobs;
    const model::FsdpAdvice a =
        model::advise(table, j.directive, j.gpu_gib > 0 ? j.gpu_gib : default_gpu_gib, 0);
    FsdpAdviceRow row;
    row.id = j.id;
    row.verdict = a.verdict;
    row.gpus = j.directive.world_size;
    row.minibatch = j.directive.minibatch;
    row.max_safe_mbs = a.entry ? a.entry->max_safe_mbs : -1;
    row.run_s = row.advised_run_s = j.run_s;
    switch (a.verdict) {
      case model::FsdpVerdict::NO_ADVICE:
        ++r.no_advice;
        break;
      case model::FsdpVerdict::OK:
        ++r.ok;
        break;
      case model::FsdpVerdict::RETRIES:
        ++r.retries;
        break;
      case model::FsdpVerdict::OOM:
        ++r.oom;
        break;
    }
    if (j.run_s < 0) {
      ++r.unknown_run;
      r.rows.push_back(row);
      continue;
    }
    const double gh = j.run_s * static_cast<double>(row.gpus) / 3600.0;
    r.gpu_hours += gh;
    if (a.verdict == model::FsdpVerdict::RETRIES) {
      row.penalty = a.penalty;
      row.advised_run_s = j.run_s * (1.0 - a.penalty);
      r.gpu_hours_retry += gh;
      r.gpu_hours_saved += gh * a.penalty;
    } else if (a.verdict == model::FsdpVerdict::OOM) {
      r.gpu_hours_oom += gh;
    }
    r.rows.push_back(row);
  }
  return r;
}

nlohmann::ordered_json FsdpAdviceReport::to_json(bool with_rows) const {
  nlohmann::ordered_json j = {{"format", "mlprio-fsdp-advice-report"},
                              {"version", 1},
                              {"jobs", jobs},
                              {"no_advice", no_advice},
                              {"ok", ok},
                              {"retries", retries},
                              {"oom", oom},
                              {"unknown_run", unknown_run},
                              {"gpu_hours", gpu_hours},
                              {"gpu_hours_retry", gpu_hours_retry},
                              {"gpu_hours_saved", gpu_hours_saved},
                              {"gpu_hours_oom", gpu_hours_oom}};
  if (with_rows) {
    static const char* const V[] = {"no_advice", "ok", "retries", "oom"};
    j["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      j["rows"].push_back({{"id", r.id},
                           {"verdict", V[static_cast<int>(r.verdict)]},
                           {"gpus", r.gpus},
                           {"minibatch", r.minibatch},
                           {"max_safe_mbs", r.max_safe_mbs},
                           {"penalty", r.penalty},
                           {"run_s", r.run_s},
                           {"advised_run_s", r.advised_run_s}});
  }
  return j;
}

}  // namespace mlprio::replay
