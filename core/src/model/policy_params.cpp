// The model file's "policy" object <-> PolicyParams: what `mlprio-replay tune` chose, read back by
// the replayer (--estimate model:FILE) and by site_factor/mlprio. Every value is checked for type,
// finiteness and range, because slurmctld reads this file.
#include <cmath>
#include <string>

#include "mlprio/model/model_file.hpp"

namespace mlprio::model {
namespace {

double number_in(const nlohmann::json& j, const char* key, double lo, double hi, double def) {
  if (!j.contains(key)) return def;
  const auto& v = j[key];
  if (!v.is_number()) throw ModelError(std::string("\"policy.") + key + "\" is not a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw ModelError(std::string("\"policy.") + key + "\" = " + std::to_string(x) +
                     " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

std::string one_of(const nlohmann::json& j, const char* key, std::initializer_list<const char*> ok,
                   const std::string& def) {
  if (!j.contains(key)) return def;
  const auto& v = j[key];
  std::string valid;
  if (v.is_string())
    for (const char* o : ok)
      if (v.get<std::string>() == o) return o;
  for (const char* o : ok) valid += (valid.empty() ? "" : ", ") + std::string(o);
  throw ModelError(std::string("\"policy.") + key + "\" must be one of " + valid);
}

}  // namespace

nlohmann::json policy_to_json(const PolicyParams& p) {
  nlohmann::json j;
  j["age_weight"] = p.score.age_weight;
  j["starvation_limit"] = p.score.starvation_limit;
  j["size_weight"] = p.score.size_weight;
  j["fail_weight"] = p.score.fail_weight;
  j["request_weight"] = p.score.request_weight;
  j["fairshare_weight"] = p.score.fairshare_weight;
  j["backfill_estimate"] = p.backfill_estimate;
  j["correction"] = p.correction;
  j["backfill_order"] = p.backfill_order;
  j["tuned_by"] = p.tuned_by;
  return j;
}

PolicyParams policy_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw ModelError("\"policy\" is not an object");
  PolicyParams p;
  p.score.age_weight = number_in(j, "age_weight", 0, 64, p.score.age_weight);
  p.score.starvation_limit = number_in(j, "starvation_limit", 1, 1e9, p.score.starvation_limit);
  p.score.size_weight = number_in(j, "size_weight", -64, 64, p.score.size_weight);
  p.score.fail_weight = number_in(j, "fail_weight", 0, 64, p.score.fail_weight);
  p.score.request_weight = number_in(j, "request_weight", 0, 1, p.score.request_weight);
  p.score.fairshare_weight = number_in(j, "fairshare_weight", 0, 64, p.score.fairshare_weight);
  p.backfill_estimate =
      one_of(j, "backfill_estimate", {"point", "upper", "request", "last2"}, p.backfill_estimate);
  p.correction = one_of(j, "correction", {"none", "request", "tsafrir"}, p.correction);
  p.backfill_order = one_of(j, "backfill_order", {"fcfs", "sjbf"}, p.backfill_order);
  if (j.contains("tuned_by")) {
    if (!j["tuned_by"].is_string() || j["tuned_by"].get<std::string>().size() > 4096)
      throw ModelError("\"policy.tuned_by\" must be a string of at most 4096 bytes");
    p.tuned_by = j["tuned_by"].get<std::string>();
  }
  return p;
}

}  // namespace mlprio::model
