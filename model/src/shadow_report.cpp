// `mlprio-model shadow-report`: what the plugins would have done in mode=shadow (the
// "site_factor/mlprio: shadow: JobId=..." lines of slurmctld's log) set against what the jobs did
// (a sacct dump or any trace with job ids): how many refusals would have hit jobs that failed,
// how many filled limits would have killed jobs, and whether the SITE order follows run times.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "mlprio/model/features.hpp"
#include "model_tool.hpp"

namespace mlprio::model {
namespace {

// "HH:MM:SS" or "D-HH:MM:SS" -> seconds; NaN when malformed.
double parse_slurm_duration(const std::string& s) {
  int d = 0, h = 0, m = 0, sec = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%d-%d:%d:%d%c", &d, &h, &m, &sec, &tail) == 4)
    return ((d * 24.0 + h) * 60.0 + m) * 60.0 + sec;
  if (std::sscanf(s.c_str(), "%d:%d:%d%c", &h, &m, &sec, &tail) == 3 && h >= 0 && m >= 0 &&
      sec >= 0)
    return (h * 60.0 + m) * 60.0 + sec;
  return std::nan("");
}

// Average ranks (ties share the mean rank), for Spearman's rho.
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    const double mean = 0.5 * static_cast<double>(i + j) + 1.0;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = mean;
    i = j + 1;
  }
  return r;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : std::nan("");
}

}  // namespace

ShadowLog read_shadow_log(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open the slurmctld log");  // "<path>: cannot ..."
  ShadowLog log;
  std::unordered_map<int64_t, size_t> seen;
  const std::string marker = "site_factor/mlprio: shadow: JobId=";
  std::string line;
  size_t lineno = 0;
  auto bad = [&](const std::string& field) {
    if (log.malformed++ == 0)
      log.first_malformed = path + ":" + std::to_string(lineno) + ": field " + field;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.size() > (1 << 20)) continue;  // not one of ours
    const size_t at = line.find(marker);
    if (at == std::string::npos) continue;
    ShadowRecord r;
    size_t pos = at + marker.size();
    char* end = nullptr;
    const long long id = std::strtoll(line.c_str() + pos, &end, 10);
    if (end == line.c_str() + pos || id <= 0) {
      bad("JobId");
      continue;
    }
    r.job_id = id;
    bool ok = true;
    pos = static_cast<size_t>(end - line.c_str());
    while (ok && pos < line.size()) {
      while (pos < line.size() && line[pos] == ' ') ++pos;
      size_t stop = line.find(' ', pos);
      if (stop == std::string::npos) stop = line.size();
      const std::string tok = line.substr(pos, stop - pos);
      pos = stop;
      const size_t eq = tok.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
      if (k == "user") {
        r.user = v;
      } else if (k == "would_site") {
        char* e = nullptr;
        r.site = std::strtod(v.c_str(), &e);
        if (e == v.c_str() || *e) bad("would_site"), ok = false;
      } else if (k == "mlprio_shadow_limit") {
        r.limit_s = parse_slurm_duration(v);
        if (std::isnan(r.limit_s)) bad("mlprio_shadow_limit"), ok = false;
      } else if (k == "mlprio_shadow_refuse" || k == "mlprio_shadow_warn") {
        char* e = nullptr;
        r.fail_prob = std::strtod(v.c_str(), &e);
        if (e == v.c_str() || *e) bad(k), ok = false;
        r.flagged = true;
      }
    }
    if (!ok) continue;
    if (std::isnan(r.site)) {
      bad("would_site");
      continue;
    }
    if (seen.emplace(r.job_id, log.records.size()).second) log.records.push_back(r);  // first wins
  }
  return log;
}

nlohmann::json shadow_report(const ShadowLog& log, const Trace& trace) {
  std::unordered_map<int64_t, const Job*> by_id;
  for (const Job& j : trace.jobs) by_id.emplace(j.id, &j);
  size_t found = 0, flagged = 0, flagged_failed = 0, unflagged = 0, unflagged_failed = 0;
  size_t limited = 0, past_limit = 0;
  std::vector<double> site, run;
  for (const ShadowRecord& r : log.records) {
    auto it = by_id.find(r.job_id);
    if (it == by_id.end()) continue;
    const Job& j = *it->second;
    ++found;
    const bool failed = is_failure(j.status);
    if (r.flagged) {
      ++flagged;
      flagged_failed += failed;
    } else {
      ++unflagged;
      unflagged_failed += failed;
    }
    if (!std::isnan(r.limit_s) && j.run >= 0) {
      ++limited;
      past_limit += j.run > r.limit_s;
    }
    if (j.run >= 0) {
      site.push_back(r.site);
      run.push_back(j.run);
    }
  }
  nlohmann::json out;
  out["recorded"] = log.records.size();
  out["found"] = found;
  out["malformed_lines"] = log.malformed;
  if (log.malformed) out["first_malformed"] = log.first_malformed;
  out["flagged"] = flagged;
  out["flagged_failed"] = flagged_failed;
  out["unflagged"] = unflagged;
  out["unflagged_failed"] = unflagged_failed;
  out["limited"] = limited;
  out["past_limit"] = past_limit;
  out["site_run_spearman"] = site.size() >= 2 ? pearson(ranks(site), ranks(run)) : std::nan("");
  if (!std::isfinite(out["site_run_spearman"].get<double>())) out["site_run_spearman"] = nullptr;
  out["site_run_pairs"] = site.size();
  return out;
}

std::string format_shadow_report(const nlohmann::json& r) {
  auto pct = [](size_t a, size_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%",
                  b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0);
    return std::string(buf);
  };
  const auto g = [&](const char* k) { return r[k].get<size_t>(); };
  std::string s = "jobs recorded in shadow mode: " + std::to_string(g("recorded")) +
                  ", found in the trace: " + std::to_string(g("found")) + "\n";
  s += "would refuse or warn: " + std::to_string(g("flagged")) +
       " (of which failed: " + std::to_string(g("flagged_failed")) + ", " +
       pct(g("flagged_failed"), g("flagged")) +
       "); not flagged: " + std::to_string(g("unflagged")) +
       " (of which failed: " + std::to_string(g("unflagged_failed")) + ", " +
       pct(g("unflagged_failed"), g("unflagged")) + ")\n";
  s += "would fill a time limit: " + std::to_string(g("limited")) +
       " (of which ran past it: " + std::to_string(g("past_limit")) + ", " +
       pct(g("past_limit"), g("limited")) + ", would have been killed)\n";
  if (r["site_run_spearman"].is_null()) {
    s += "SITE vs run time: fewer than two jobs with a run time\n";
  } else {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "SITE vs run time: Spearman rho %.3f over %zu jobs (negative: shorter jobs "
                  "ranked first)\n",
                  r["site_run_spearman"].get<double>(), g("site_run_pairs"));
    s += buf;
  }
  if (g("malformed_lines"))
    s += "skipped " + std::to_string(g("malformed_lines")) +
         " malformed shadow lines (first: " + r["first_malformed"].get<std::string>() + ")\n";
  return s;
}

}  // namespace mlprio::model
