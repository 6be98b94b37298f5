// Writes small "formula" mlprio model files for the Slurm cluster tests: a per-user history
// (last two run times, failure rate) decides the predicted run time and failure probability, so a
// test knows exactly what the plugins must do. Also writes the broken variants (corrupt JSON,
// wrong schema) the failure tests need. `--expect-site` prints the SITE value the plugin must
// give a job whose (possibly LLM-advised) predicted run time is RUNTIME_S, from the core's own
// score(), so the LLM tests check exact values without copying the formula. Usage:
//   mlprio_slurm_testmodel OUT [--user NAME --last-run S --fail-rate P]... [--default-runtime S]
//   (each --user starts a user; the --last-run/--fail-rate after it are that user's)
//                              [--corrupt | --wrong-schema]
//   mlprio_slurm_testmodel --expect-site RUNTIME_S WEIGHT [FAIL_PROB]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "mlprio/model/features.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/model/predictor.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s OUT [--user NAME --last-run S --fail-rate P] "
                 "[--default-runtime S] [--corrupt|--wrong-schema]\n",
                 argv[0]);
    return 2;
  }
  namespace m = mlprio::model;
  if (std::string(argv[1]) == "--expect-site") {
    if (argc != 4 && argc != 5) return 2;
    mlprio::Job job;
    job.submit = 0;
    m::Prediction p;
    p.runtime = std::atof(argv[2]);
    if (argc == 5) p.fail_prob = std::atof(argv[4]);  // the score lowers likely failures
    m::ScoreConfig cfg;
    cfg.age_weight = 0;  // as the plugin scores (abi_context.cpp, factor_from)
    std::printf("%lld\n", static_cast<long long>(std::llround(
                              std::atof(argv[3]) * m::score(job, p, 0, m::ClusterState{}, cfg))));
    return 0;
  }
  std::string out = argv[1], mode;
  struct UserSpec {
    std::string name;
    double last_run = 3300, fail_rate = 0;
  };
  std::vector<UserSpec> users;
  double def_rt = 3600;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--user")
      users.push_back({next()});
    else if ((a == "--last-run" || a == "--fail-rate") && users.empty()) {
      std::fprintf(stderr, "%s needs a --user before it\n", a.c_str());
      return 2;
    } else if (a == "--last-run")
      users.back().last_run = std::atof(next().c_str());
    else if (a == "--fail-rate")
      users.back().fail_rate = std::atof(next().c_str());
    else if (a == "--default-runtime")
      def_rt = std::atof(next().c_str());
    else if (a == "--corrupt" || a == "--wrong-schema")
      mode = a;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (mode == "--corrupt") {
    std::ofstream(out) << "{\"format\": \"mlprio-model\", \"version\": 1, \"kind\": \"form";
    return 0;
  }
  try {
    nlohmann::json doc = {{"format", m::MODEL_FORMAT},
                          {"version", m::MODEL_VERSION},
                          {"kind", "formula"},
                          {"schema_version", m::SCHEMA_VERSION},
                          {"schema", m::schema_json()},
                          {"formula", {{"default_runtime", def_rt}}},
                          {"training", {{"window", "test fixture"}}}};
    if (mode == "--wrong-schema") doc["schema"] = nlohmann::json::array({"req_procs", "bogus"});
    if (!users.empty()) {
      m::UserHistory h;
      for (const UserSpec& u : users) {
        m::UserStats s;
        s.last_run = u.last_run;
        s.prev_run = u.last_run;
        s.count = 100;
        s.failures = static_cast<int64_t>(u.fail_rate * 100 + 0.5);
        h.by_user[m::stable_hash(u.name)] = s;
      }
      doc["user_history"] = m::history_to_json(h);
    }
    m::write_model_document(out, doc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
