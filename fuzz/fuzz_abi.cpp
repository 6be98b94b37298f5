// The C ABI the Slurm shims call, with arbitrary job fields, scripts and comments: NUL-separated
// strings and numbers taken from the input fill an mlprio_job_t; every entry point must return a
// status (never crash, never throw into C), and factors stay within max_boost.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "mlprio/model/features.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio_abi.h"

namespace {

mlprio_ctx_t* context() {
  static mlprio_ctx_t* ctx = [] {
    // A formula model with one user's history (alice: last runs 600 s, 10 % failures).
    namespace m = mlprio::model;
    const std::string path = mlprio::fuzz::scratch_path(".model.json");
    nlohmann::json doc = {{"format", m::MODEL_FORMAT},  {"version", m::MODEL_VERSION},
                          {"kind", "formula"},          {"schema_version", m::SCHEMA_VERSION},
                          {"schema", m::schema_json()}, {"formula", {{"default_runtime", 3600}}}};
    m::UserHistory h;
    m::UserStats st;
    st.last_run = st.prev_run = 600;
    st.count = 10;
    st.failures = 1;
    h.by_user[m::stable_hash("alice")] = st;
    doc["user_history"] = m::history_to_json(h);
    m::write_model_document(path, doc);
    ::chmod(path.c_str(), 0644);
    const std::string params = "model=" + path +
                               ",weight=10000,max_boost=5000,refuse_above=0.5,refuse_mode=refuse,"
                               "budget_us=1000000,history_period_ms=1000";
    mlprio_ctx_t* c = nullptr;
    mlprio_ctx_create(params.c_str(), 1, &c);
    return c;
  }();
  return ctx;
}

struct Reader {
  const uint8_t* p;
  size_t n;
  std::string str() {
    const void* z = std::memchr(p, 0, n);
    const size_t len = z ? static_cast<size_t>(static_cast<const uint8_t*>(z) - p) : n;
    std::string s(reinterpret_cast<const char*>(p), len);
    const size_t used = z ? len + 1 : len;
    p += used;
    n -= used;
    return s;
  }
  template <class T>
  T raw() {  // the next sizeof(T) bytes as a T (any bit pattern: NaN, inf, huge, negative)
    T v{};
    if (n >= sizeof v) {
      std::memcpy(&v, p, sizeof v);
      p += sizeof v;
      n -= sizeof v;
    }
    return v;
  }
  double num() { return raw<double>(); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mlprio_ctx_t* ctx = context();
  Reader r{data, size};
  std::vector<std::string> s;
  for (int i = 0; i < 9; ++i) s.push_back(r.str());
  mlprio_job_t j{};
  j.job_id = r.raw<uint32_t>();
  j.submit_time = r.num();
  j.time_limit_s = r.num();
  j.req_cpus = r.raw<int64_t>();
  j.req_nodes = r.raw<int64_t>();
  j.req_gpus = r.num();
  j.req_mem_bytes = r.raw<int64_t>();
  j.user = s[0].c_str();
  j.account = s[1].c_str();
  j.partition = s[2].c_str();
  j.qos = s[3].c_str();
  j.name = s[4].c_str();
  j.comment = s[5].c_str();
  j.admin_comment = s[6].c_str();
  j.script = s[7].c_str();

  char buf[1024];
  mlprio_extract_features(j.script, j.comment, j.name, buf, sizeof buf);
  mlprio_feature_problems(j.script, j.comment, j.name, buf, sizeof buf);
  (void)mlprio_tres_gpus(s[8].c_str());
  mlprio_format_duration(j.time_limit_s, buf, sizeof buf);
  if (ctx) {
    int64_t f = 0;
    const int rc = mlprio_site_factor(ctx, &j, &f);
    if (rc == MLPRIO_ERR_INTERNAL || f > 5000 || f < -5000) std::abort();
    mlprio_prediction_t p;
    mlprio_predict(ctx, &j, &p);
    mlprio_decision_t d;
    mlprio_decide(ctx, nullptr, 1, &j, &d);
    mlprio_finish_t fin{};
    fin.job = j;
    fin.start_time = r.num();
    fin.end_time = r.num();
    fin.state = r.raw<int>();
    size_t learned = 0;
    mlprio_observe_finished(ctx, &fin, 1, &learned);
  }
  return 0;
}
