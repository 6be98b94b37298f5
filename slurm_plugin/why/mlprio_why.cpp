// mlprio-why JOBID: why a job has the SITE it has. Reads the job from slurmctld through libslurm
// (slurm_load_job), the plugins' parameters from slurm.conf (22.05's `scontrol show config` prints
// PrioritySiteFactorParameters as (null), so the file is read) and the same model file, then
// prints the job's feature row, the prediction, every term of the score, the SITE the plugin
// computes from them and the SITE slurmctld applied. The prediction goes through the plugins' own
// C ABI (mlprio_predict, mlprio_site_factor), so it is the plugins' arithmetic, not a copy.
//
// One difference is stated in the output: slurmctld's live history (jobs that ended since the
// model was trained, history_period_ms) lives in its memory; this tool sees the model file's
// snapshot, so for users with recent finishes the two can differ until the next training.
#include <pwd.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "abi_detail.hpp"
#include "mlprio/model/features.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio_abi.h"

namespace {

namespace model = mlprio::model;

int usage() {
  std::fprintf(stderr,
               "usage: mlprio-why JOBID [--conf slurm.conf] [--params TEXT] [--json]\n"
               "  --conf    slurm.conf to read PrioritySiteFactorParameters from\n"
               "            (default: $SLURM_CONF, else /etc/slurm/slurm.conf)\n"
               "  --params  the parameters themselves (instead of reading slurm.conf)\n");
  return 2;
}

// PrioritySiteFactorParameters=... from slurm.conf (key case-insensitive, as Slurm reads it).
std::string params_from_conf(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw ::mlprio::UsageError(path + ": cannot open (name another with --conf or --params)");
  const std::string key = "prioritysitefactorparameters=";
  std::string line, found;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    std::string low = line.substr(b, key.size());
    for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (low == key) {
      found = line.substr(b + key.size());
      const size_t hash = found.find('#');
      if (hash != std::string::npos) found.resize(hash);
      while (!found.empty() && std::isspace(static_cast<unsigned char>(found.back())))
        found.pop_back();
    }
  }
  if (found.empty()) throw ::mlprio::UsageError(path + ": no PrioritySiteFactorParameters line");
  return found;
}

// "%.6g", or "%.<decimals>f" when decimals >= 0; "-" when not finite.
std::string fmt(double v, int decimals = -1) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  if (decimals < 0)
    std::snprintf(b, sizeof b, "%.6g", v);
  else
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

struct WhyArgs {
  uint32_t job_id = 0;
  std::string conf, params_text;
  bool json = false, have_params = false;
};

// The command line into `a`; an exit code when the program should stop here (usage, --help).
std::optional<int> parse_args(int argc, char** argv, WhyArgs& a) {
  if (argc < 2) return usage();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json")
      a.json = true;
    else if (arg == "--conf" && i + 1 < argc)
      a.conf = argv[++i];
    else if (arg == "--params" && i + 1 < argc)
      a.params_text = argv[++i], a.have_params = true;
    else if (arg == "-h" || arg == "--help")
      return usage(), 0;
    else if (a.job_id == 0 && !arg.empty() &&
             arg.find_first_not_of("0123456789") == std::string::npos && arg.size() < 10)
      a.job_id = static_cast<uint32_t>(std::strtoul(arg.c_str(), nullptr, 10));
    else {
      std::fprintf(stderr, "mlprio-why: unexpected argument '%s'\n", arg.c_str());
      return usage();
    }
  }
  if (a.job_id == 0) return usage();
  return std::nullopt;
}

// --params, else PrioritySiteFactorParameters from --conf, $SLURM_CONF or /etc/slurm/slurm.conf.
std::string params_text_of(const WhyArgs& a) {
  if (a.have_params) return a.params_text;
  std::string conf = a.conf;
  if (conf.empty())
    conf = std::getenv("SLURM_CONF") ? std::getenv("SLURM_CONF") : "/etc/slurm/slurm.conf";
  return params_from_conf(conf);
}

// The job's user name: slurmctld's, else the passwd entry of its uid; empty when neither.
std::string job_user(const slurm_job_info_t& sj) {
  std::string user = sj.user_name ? sj.user_name : "";
  if (user.empty()) {
    struct passwd pw {
    }, *res = nullptr;
    std::vector<char> buf(16384);
    if (::getpwuid_r(sj.user_id, &pw, buf.data(), buf.size(), &res) == 0 && res) user = pw.pw_name;
  }
  return user;
}

// The job as the plugins see it through the C ABI. Points into `sj` and `user`, which must
// outlive the result.
mlprio_job_t abi_job(const slurm_job_info_t& sj, const std::string& user) {
  mlprio_job_t j{};
  j.job_id = sj.job_id;
  j.submit_time = static_cast<double>(sj.submit_time);
  j.time_limit_s =
      (sj.time_limit == NO_VAL || sj.time_limit == INFINITE) ? -1 : sj.time_limit * 60.0;
  j.req_cpus = sj.num_cpus;
  j.req_nodes = sj.num_nodes;
  j.req_gpus = mlprio_tres_gpus(sj.tres_per_job);
  if (j.req_gpus < 0) {
    const double per_node = mlprio_tres_gpus(sj.tres_per_node);
    if (per_node >= 0) j.req_gpus = per_node * std::max<uint32_t>(sj.num_nodes, 1);
  }
  j.req_mem_bytes = -1;
  j.user = user.empty() ? nullptr : user.c_str();
  j.account = sj.account;
  j.partition = sj.partition;
  j.qos = sj.qos;
  j.name = sj.name;
  j.comment = sj.comment;
  j.admin_comment = sj.admin_comment;
  return j;
}

// What the plugins' own path answers: a context on the same parameters and model file.
struct PluginAnswer {
  int rc = MLPRIO_NO_MODEL;  // of mlprio_ctx_create
  char desc[512] = {};
  mlprio_prediction_t pred{NAN, NAN, NAN};
  int64_t factor = 0;
  int frc = MLPRIO_NO_MODEL;  // of mlprio_site_factor
};

PluginAnswer ask_plugin(const std::string& params_text, const mlprio_job_t& j) {
  PluginAnswer a;
  mlprio_ctx_t* ctx = nullptr;
  a.rc = mlprio_ctx_create(params_text.c_str(), 0, &ctx);
  mlprio_ctx_describe(ctx, a.desc, sizeof a.desc);
  if (a.rc == MLPRIO_OK) {
    mlprio_predict(ctx, &j, &a.pred);
    a.frc = mlprio_site_factor(ctx, &j, &a.factor);
  }
  mlprio_ctx_free(ctx);
  return a;
}

// Features and score terms, from the model file itself (its snapshot of user history).
void add_model_terms(const mlprio::plugin::Params& prm, const mlprio_job_t& j,
                     const mlprio_prediction_t& pred, nlohmann::json& out) {
  auto p = model::load_predictor(prm.model);
  mlprio::TraceNames names;
  const mlprio::Job cj = mlprio::plugin::to_core_job(j, names);
  std::vector<float> row(model::N_FEATURES);
  const model::UserHistory empty;
  model::encode_with_history({&cj, 1}, names, p->frozen_history() ? *p->frozen_history() : empty,
                             p->epoch_offset(), row);
  nlohmann::json feats = nlohmann::json::object();
  for (int f = 0; f < model::N_FEATURES; ++f)
    feats[std::string(model::feature_names()[f])] =
        std::isnan(row[f]) ? nlohmann::json(nullptr) : nlohmann::json(row[f]);
  out["features"] = feats;
  model::Prediction mp{pred.runtime_s, pred.runtime_upper_s, pred.fail_prob};
  model::ScoreConfig cfg = p->policy().score;
  cfg.age_weight = 0;  // as the plugin scores: aging is multifactor's own age factor
  const double w = 0;
  const double procs = static_cast<double>(std::max<int64_t>(cj.procs(), 1));
  const double pf = std::isfinite(mp.fail_prob) ? mp.fail_prob : 0;
  out["score_terms"] = {{"age", cfg.age_weight * std::log2(1 + w / 60)},
                        {"run", -model::score_run_term(cj, mp, cfg)},
                        {"size", cfg.size_weight * std::log2(procs)},
                        {"failure", -8 * cfg.fail_weight * pf},
                        {"sum_log2", model::score_log_ratio(cj, mp, cj.submit, cfg)},
                        {"score", model::score(cj, mp, cj.submit, model::ClusterState{}, cfg)},
                        {"size_weight", cfg.size_weight},
                        {"fail_weight", cfg.fail_weight},
                        {"request_weight", cfg.request_weight},
                        {"fairshare_weight", cfg.fairshare_weight},
                        {"tuned_by", p->policy().tuned_by}};
}

// site_factor/mlprio writes the LLM advisor's answer into AdminComment once it has one.
void add_advisor(const char* admin_comment, nlohmann::json& out) {
  if (!admin_comment || !std::strstr(admin_comment, "mlprio_llm=")) return;
  const char* run = std::strstr(admin_comment, "mlprio_llm_run=");
  const char* cnf = std::strstr(admin_comment, "mlprio_llm_conf=");
  if (run && cnf) {
    const std::string r(run + 15, std::strcspn(run + 15, " "));
    const std::string c(cnf + 16, std::strcspn(cnf + 16, " "));
    out["advisor"] = "answered run " + r + " with confidence " + c +
                     "; SITE uses it within llm_min_factor..llm_max_factor of the model's "
                     "prediction (the computed SITE here is the model's alone)";
    out["advisor_run"] = r;
    out["advisor_confidence"] = c;
  } else {
    out["advisor"] =
        "job was handed to the LLM advisor, which has not answered (or its answer "
        "was refused: out of range, HTTP error, timeout)";
  }
}

// The explanation as JSON: the job, the parameters, the plugins' answer, the model's terms.
nlohmann::json explanation(const slurm_job_info_t& sj, const std::string& user,
                           const mlprio::plugin::Params& prm, const mlprio_job_t& j,
                           const PluginAnswer& a) {
  nlohmann::json out;
  out["job_id"] = sj.job_id;
  out["user"] = user;
  out["partition"] = sj.partition ? sj.partition : "";
  out["qos"] = sj.qos ? sj.qos : "";
  out["account"] = sj.account ? sj.account : "";
  out["parameters"] = mlprio::plugin::format_params(prm);
  out["model"] = a.desc;
  out["in_scope"] = mlprio::plugin::in_scope(prm, sj.partition, sj.qos, sj.account);
  out["prediction"] = {{"runtime_s", a.pred.runtime_s},
                       {"runtime_upper_s", a.pred.runtime_upper_s},
                       {"fail_prob", a.pred.fail_prob}};
  if (a.rc == MLPRIO_OK) add_model_terms(prm, j, a.pred, out);
  out["site_computed"] = a.frc == MLPRIO_OK ? nlohmann::json(a.factor) : nlohmann::json(nullptr);
  out["site_applied"] = static_cast<int64_t>(sj.site_factor) - static_cast<int64_t>(NICE_OFFSET);
  out["priority"] = sj.priority;
  out["history_note"] =
      "user history from the model file's snapshot; slurmctld's live store may hold newer finishes";
  add_advisor(sj.admin_comment, out);
  return out;
}

// The explanation for a person to read.
void print_text(const nlohmann::json& out, const slurm_job_info_t& sj, const std::string& user,
                const PluginAnswer& a) {
  std::printf("JobId=%u user=%s partition=%s qos=%s account=%s%s\n", sj.job_id, user.c_str(),
              out["partition"].get<std::string>().c_str(), out["qos"].get<std::string>().c_str(),
              out["account"].get<std::string>().c_str(),
              out["in_scope"].get<bool>() ? "" : "  (outside scope_*: the plugins leave it alone)");
  std::printf("parameters: %s\nmodel: %s\n", out["parameters"].get<std::string>().c_str(), a.desc);
  if (out.contains("features")) {
    std::printf("features:\n");
    for (auto& [k, v] : out["features"].items())
      if (!v.is_null()) std::printf("  %-22s %s\n", k.c_str(), fmt(v.get<double>()).c_str());
    std::printf("  (features not listed are missing)\n");
  }
  std::printf("prediction: run %s s, upper %s s, failure probability %s\n",
              fmt(a.pred.runtime_s, 0).c_str(), fmt(a.pred.runtime_upper_s, 0).c_str(),
              fmt(a.pred.fail_prob, 3).c_str());
  if (out.contains("score_terms")) {
    const auto& t = out["score_terms"];
    std::printf(
        "score terms (log2 units, at submission): run %s + size %s + failure %s = %s\n"
        "score = 1 / (1 + 2^(-sum/4)) = %s (policy: size_weight %s, fail_weight %s, "
        "request_weight %s%s)\n",
        fmt(t["run"].get<double>(), 3).c_str(), fmt(t["size"].get<double>(), 3).c_str(),
        fmt(t["failure"].get<double>(), 3).c_str(), fmt(t["sum_log2"].get<double>(), 3).c_str(),
        fmt(t["score"].get<double>(), 4).c_str(), fmt(t["size_weight"].get<double>()).c_str(),
        fmt(t["fail_weight"].get<double>()).c_str(), fmt(t["request_weight"].get<double>()).c_str(),
        t["tuned_by"].get<std::string>().empty()
            ? ", untuned defaults"
            : (", tuned by " + t["tuned_by"].get<std::string>()).c_str());
    if (t["fairshare_weight"].get<double>() > 0)
      std::printf(
          "the policy's fair-share term (fairshare_weight %s) is not in SITE: slurmctld applies "
          "fair share through PriorityWeightFairshare\n",
          fmt(t["fairshare_weight"].get<double>()).c_str());
  }
  std::printf(
      "SITE computed = weight x score, capped at max_boost: %s; applied by slurmctld: %lld "
      "(priority %u)\n",
      out["site_computed"].is_null() ? "- (no model or not in scope)"
                                     : std::to_string(a.factor).c_str(),
      static_cast<long long>(out["site_applied"].get<int64_t>()), sj.priority);
  std::printf("note: %s\n", out["history_note"].get<std::string>().c_str());
  if (out.contains("advisor"))
    std::printf("advisor: %s\n", out["advisor"].get<std::string>().c_str());
}

// Loads the job, asks the plugins and the model, prints the explanation. Returns the exit code.
int explain(const WhyArgs& args) {
  const std::string params_text = params_text_of(args);
  const auto parsed = mlprio::plugin::parse_params(params_text);
  for (const auto& w : parsed.warnings)
    std::fprintf(stderr, "mlprio-why: warning: %s\n", w.c_str());

  job_info_msg_t* raw = nullptr;
  const int load_rc = slurm_load_job(&raw, args.job_id, SHOW_DETAIL);
  // Freed on every path, after the last read of the job (printing reads it too).
  const std::unique_ptr<job_info_msg_t, void (*)(job_info_msg_t*)> msg(raw,
                                                                       slurm_free_job_info_msg);
  if (load_rc != SLURM_SUCCESS || !msg || msg->record_count < 1) {
    std::fprintf(stderr, "mlprio-why: job %u: %s\n", args.job_id,
                 slurm_strerror(slurm_get_errno()));
    return 1;
  }
  const slurm_job_info_t& sj = msg->job_array[0];
  const std::string user = job_user(sj);
  const mlprio_job_t j = abi_job(sj, user);
  const PluginAnswer answer = ask_plugin(params_text, j);
  const nlohmann::json out = explanation(sj, user, parsed.params, j, answer);
  if (args.json)
    std::cout << out.dump(2) << "\n";
  else
    print_text(out, sj, user, answer);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  WhyArgs args;
  if (const auto rc = parse_args(argc, argv, args)) return *rc;
  try {
    return explain(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlprio-why: error: %s\n", e.what());
    return 1;
  }
}
