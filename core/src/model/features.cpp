// Feature rows for the priority model: request columns, hashed categoricals, causal per-user
// history, submit time of day/week, job-name tokens and the LLM fine-tuning parameters carried
// in Job::features. The history walk is the only place that knows about time, and it only lets
// a job see others whose finish_time() is <= its submit time, which the tests check.
#include "mlprio/model/features.hpp"
#include "mlprio/util/errors.hpp"

#include <cctype>
#include <cmath>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>

namespace mlprio::model {
namespace {

constexpr uint64_t FNV_PRIME = 1099511628211ULL;

// Categorical hashes are cut to 24 bits so that every value is an exact float.
float hash_to_float(uint64_t h) {
  return static_cast<float>(h >> 40);
}

uint64_t hash_number(char tag, int64_t id) {
  // Hashes "#<id>" without building a string (no allocation on the per-job path).
  uint64_t h = 14695981039346656037ULL;
  h = (h ^ static_cast<unsigned char>(tag)) * FNV_PRIME;
  h = (h ^ static_cast<unsigned char>('#')) * FNV_PRIME;
  char digits[24];
  int n = 0;
  uint64_t v = id < 0 ? static_cast<uint64_t>(-id) : static_cast<uint64_t>(id);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  if (id < 0) digits[n++] = '-';
  while (n > 0) h = (h ^ static_cast<unsigned char>(digits[--n])) * FNV_PRIME;
  return h;
}

// A categorical column: the interned name when the trace has one, else the raw number (SWF
// gives numbers only). The tag keeps partition 3 and queue 3 apart.
float categorical(const NameTable& table, int32_t id, char tag) {
  if (id < 0) return MISSING;
  const std::string& name = table.name(id);
  if (!name.empty()) {
    const uint64_t seed = (14695981039346656037ULL ^ static_cast<unsigned char>(tag)) * FNV_PRIME;
    return hash_to_float(stable_hash(name, seed));
  }
  return hash_to_float(hash_number(tag, id));
}

float positive_or_missing(double v) {
  return v >= 0 ? static_cast<float>(v) : MISSING;
}

// LLM parameters as job scripts and sacct comments spell them; the first alias found wins.
constexpr std::array<std::array<std::string_view, 4>, 6> LLM_ALIASES = {{
    {"model_size", "model_params", "params_b", "model_size_b"},
    {"seq_len", "sequence_length", "max_seq_len", "seqlen"},
    {"batch_size", "global_batch_size", "micro_batch_size", "bs"},
    {"lora_rank", "lora_r", "rank", "lora"},
    {"epochs", "num_epochs", "n_epochs", "epoch"},
    {"dataset_size", "dataset_samples", "num_samples", "train_samples"},
}};

// The schema 3 columns: the user's resubmissions of this job (see features.hpp). `known_user`:
// the job has a user (counts are then 0 rather than missing when nothing matches).
void encode_similar(const Job& job, const UserStats* hist, bool known_user, std::span<float> row) {
  for (int f = F_SIM_LAST_RUN; f <= F_LAST2_CAPPED; ++f) row[f] = MISSING;
  const double req = job.req_time > 0 ? job.req_time : -1.0;
  // The baseline is defined for every job: the request when there is no history.
  if (req > 0) row[F_LAST2_CAPPED] = static_cast<float>(req);
  if (!known_user) return;
  row[F_SIM_COUNT] = 0.0f;
  if (hist != nullptr && hist->count > 0) {
    const double last2 =
        std::isnan(hist->prev_run) ? hist->last_run : 0.5 * (hist->last_run + hist->prev_run);
    row[F_LAST2_CAPPED] = static_cast<float>(req > 0 ? std::min(last2, req) : last2);
  }
  if (hist == nullptr || hist->recent_n == 0) return;
  const int64_t procs = requested_procs(job);
  const RecentJob& last = hist->recent_at(0);
  row[F_SAME_AS_LAST] = (last.req_time == req && last.procs == procs) ? 1.0f : 0.0f;
  if (last.req_time > 0 && req > 0)
    row[F_LAST_RATIO_TIMES_REQ] = static_cast<float>(last.run / last.req_time * req);
  int sim = 0;
  double sim_sum2 = 0;
  bool same_req_seen = false;
  for (int k = 0; k < hist->recent_n; ++k) {
    const RecentJob& r = hist->recent_at(k);
    if (r.req_time != req) continue;
    if (!same_req_seen) {
      row[F_SAME_REQ_LAST_RUN] = static_cast<float>(r.run);
      same_req_seen = true;
    }
    if (r.procs != procs) continue;
    if (sim == 0) row[F_SIM_LAST_RUN] = static_cast<float>(r.run);
    if (sim < 2) sim_sum2 += r.run;
    ++sim;
  }
  row[F_SIM_COUNT] = static_cast<float>(sim);
  if (sim > 0) row[F_SIM_LAST2_MEAN] = static_cast<float>(sim_sum2 / std::min(sim, 2));
}

}  // namespace

const std::array<std::string_view, N_FEATURES>& feature_names() {
  static const std::array<std::string_view, N_FEATURES> names = {"req_procs",
                                                                 "req_nodes",
                                                                 "req_gpus",
                                                                 "req_mem_gib",
                                                                 "req_time",
                                                                 "partition",
                                                                 "qos",
                                                                 "queue",
                                                                 "account",
                                                                 "user",
                                                                 "app",
                                                                 "name",
                                                                 "name_tok0",
                                                                 "name_tok1",
                                                                 "hist_last2_mean",
                                                                 "hist_last_run",
                                                                 "hist_run_req_ratio",
                                                                 "hist_ratio_times_req",
                                                                 "hist_count",
                                                                 "hist_fail_rate",
                                                                 "hour_of_day",
                                                                 "day_of_week",
                                                                 "llm_model_size",
                                                                 "llm_seq_len",
                                                                 "llm_batch_size",
                                                                 "llm_lora_rank",
                                                                 "llm_epochs",
                                                                 "llm_dataset_size",
                                                                 "hist_last3_mean",
                                                                 "hist_mean_run",
                                                                 "hist_since_last_end",
                                                                 "procs_over_user_mean",
                                                                 "hour_sin",
                                                                 "hour_cos",
                                                                 "sim_last_run",
                                                                 "sim_last2_mean",
                                                                 "sim_count",
                                                                 "same_req_last_run",
                                                                 "same_as_last",
                                                                 "last_ratio_times_req",
                                                                 "last2_capped"};
  return names;
}

bool is_failure(JobStatus s) {
  return s == JobStatus::FAILED || s == JobStatus::TIMEOUT || s == JobStatus::OUT_OF_MEMORY ||
         s == JobStatus::NODE_FAIL;
}

uint64_t stable_hash(std::string_view s, uint64_t seed) {
  uint64_t h = seed;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * FNV_PRIME;
  return h;
}

uint64_t user_key(const Job& job, const TraceNames& names) {
  if (job.user < 0) return 0;
  const std::string& name = names.users.name(job.user);
  const uint64_t h = name.empty() ? hash_number('u', job.user) : stable_hash(name);
  return h == 0 ? 1 : h;  // 0 means "unknown user"
}

void UserStats::record(const Job& finished, double end) {
  record_run(finished, finished.run, end);
}

void UserStats::record_run(const Job& finished, double run, double end) {
  if (!(run >= 0) || !std::isfinite(run)) return;
  prev2_run = prev_run;
  prev_run = last_run;
  last_run = run;
  run_sum += run;
  if (finished.req_time > 0) {
    ratio_sum += run / finished.req_time;
    ++ratio_n;
  }
  if (finished.procs() > 0) {
    procs_sum += static_cast<double>(finished.procs());
    ++procs_n;
  }
  if (std::isfinite(end) && !(end <= last_end)) last_end = end;
  remember({finished.req_time > 0 ? finished.req_time : -1.0, requested_procs(finished), run});
  ++count;
  if (is_failure(finished.status)) ++failures;
}

double finish_time(const Job& job) {
  if (!(job.run >= 0) || !(job.submit >= 0)) return std::numeric_limits<double>::quiet_NaN();
  const double start = job.wait >= 0 ? job.submit + job.wait : job.submit;
  return start + job.run;
}

FeatureEncoder::FeatureEncoder(const TraceNames& names, double epoch_offset)
    : names_(names), epoch_offset_(epoch_offset) {
  for (int f = 0; f < N_LLM; ++f)
    for (int a = 0; a < MAX_ALIASES; ++a) llm_ids_[f][a] = names.features.find(LLM_ALIASES[f][a]);
}

void FeatureEncoder::encode(const Job& job, const UserStats* hist, std::span<float> row) const {
  if (row.size() < static_cast<size_t>(N_FEATURES))
    throw ::mlprio::InvariantError("feature row shorter than the schema");
  row[F_REQ_PROCS] = job.req_procs > 0
                         ? static_cast<float>(job.req_procs)
                         : (job.alloc_procs > 0 ? static_cast<float>(job.alloc_procs) : MISSING);
  row[F_REQ_NODES] = job.req_nodes > 0 ? static_cast<float>(job.req_nodes) : MISSING;
  row[F_REQ_GPUS] = positive_or_missing(job.req_gpus);
  row[F_REQ_MEM_GIB] =
      job.req_mem >= 0
          ? static_cast<float>(static_cast<double>(job.req_mem) / (1024.0 * 1024 * 1024))
          : MISSING;
  row[F_REQ_TIME] = job.req_time > 0 ? static_cast<float>(job.req_time) : MISSING;
  row[F_PARTITION] = categorical(names_.partitions, job.partition, 'p');
  row[F_QOS] = categorical(names_.qos, job.qos, 'q');
  row[F_QUEUE] = categorical(names_.queues, job.queue, 'Q');
  row[F_ACCOUNT] = categorical(names_.accounts, job.account, 'a');
  row[F_USER] = categorical(names_.users, job.user, 'u');
  row[F_APP] = job.app >= 0 ? hash_to_float(hash_number('x', job.app)) : MISSING;
  row[F_NAME] = categorical(names_.job_names, job.name, 'n');

  // Job-name tokens: maximal alphanumeric runs ("llama_7b-lora" -> "llama", "7b").
  row[F_NAME_TOK0] = MISSING;
  row[F_NAME_TOK1] = MISSING;
  if (job.name >= 0) {
    const std::string& name = names_.job_names.name(job.name);
    int tok = 0;
    size_t i = 0;
    while (i < name.size() && tok < 2) {
      while (i < name.size() && !std::isalnum(static_cast<unsigned char>(name[i]))) ++i;
      const size_t b = i;
      while (i < name.size() && std::isalnum(static_cast<unsigned char>(name[i]))) ++i;
      if (i > b) {
        row[F_NAME_TOK0 + tok] =
            hash_to_float(stable_hash(std::string_view(name).substr(b, i - b)));
        ++tok;
      }
    }
  }

  // User history; a known user without finished jobs has count 0 and missing averages.
  for (int f = F_HIST_LAST2_MEAN; f <= F_HIST_FAIL_RATE; ++f) row[f] = MISSING;
  for (int f = F_HIST_LAST3_MEAN; f <= F_PROCS_OVER_USER_MEAN; ++f) row[f] = MISSING;
  if (job.user >= 0) {
    row[F_HIST_COUNT] = 0.0f;
    if (hist != nullptr && hist->count > 0) {
      const double last2 =
          std::isnan(hist->prev_run) ? hist->last_run : 0.5 * (hist->last_run + hist->prev_run);
      row[F_HIST_LAST2_MEAN] = static_cast<float>(last2);
      row[F_HIST_LAST_RUN] = static_cast<float>(hist->last_run);
      if (hist->ratio_n > 0) {
        const double ratio = hist->ratio_sum / static_cast<double>(hist->ratio_n);
        row[F_HIST_RUN_REQ_RATIO] = static_cast<float>(ratio);
        if (job.req_time > 0)
          row[F_HIST_RATIO_TIMES_REQ] = static_cast<float>(ratio * job.req_time);
      }
      row[F_HIST_COUNT] = static_cast<float>(hist->count);
      row[F_HIST_FAIL_RATE] = static_cast<float>(static_cast<double>(hist->failures) /
                                                 static_cast<double>(hist->count));
      double last3 = hist->last_run, k = 1;
      for (double r : {hist->prev_run, hist->prev2_run})
        if (!std::isnan(r)) last3 += r, ++k;
      row[F_HIST_LAST3_MEAN] = static_cast<float>(last3 / k);
      row[F_HIST_MEAN_RUN] = static_cast<float>(hist->run_sum / static_cast<double>(hist->count));
      if (std::isfinite(hist->last_end) && job.submit >= 0)
        row[F_HIST_SINCE_LAST_END] = static_cast<float>(job.submit - hist->last_end);
      if (hist->procs_n > 0 && job.procs() > 0)
        row[F_PROCS_OVER_USER_MEAN] =
            static_cast<float>(static_cast<double>(job.procs()) /
                               (hist->procs_sum / static_cast<double>(hist->procs_n)));
    }
  }
  encode_similar(job, job.user >= 0 ? hist : nullptr, job.user >= 0, row);

  // Time of day/week in UTC; 1970-01-01 was a Thursday, so day 0 of the epoch is dow 3 (Mon=0).
  row[F_HOUR_OF_DAY] = MISSING;
  row[F_DAY_OF_WEEK] = MISSING;
  row[F_HOUR_SIN] = MISSING;
  row[F_HOUR_COS] = MISSING;
  if (job.submit >= 0) {
    const double t = job.submit + epoch_offset_;
    const double days = std::floor(t / 86400.0);
    const double hour = (t - days * 86400.0) / 3600.0;
    row[F_HOUR_OF_DAY] = static_cast<float>(hour);
    row[F_DAY_OF_WEEK] = static_cast<float>(std::fmod(days + 3.0, 7.0));
    row[F_HOUR_SIN] = static_cast<float>(std::sin(hour * (M_PI / 12.0)));
    row[F_HOUR_COS] = static_cast<float>(std::cos(hour * (M_PI / 12.0)));
  }

  for (int f = 0; f < N_LLM; ++f) row[F_LLM_MODEL_SIZE + f] = MISSING;
  for (const auto& [key, value] : job.features) {
    if (key < 0) continue;
    for (int f = 0; f < N_LLM; ++f) {
      for (int a = 0; a < MAX_ALIASES; ++a) {
        if (llm_ids_[f][a] == key && std::isnan(row[F_LLM_MODEL_SIZE + f])) {
          row[F_LLM_MODEL_SIZE + f] = static_cast<float>(value);
        }
      }
    }
  }
}

FeatureMatrix build_features(std::span<const Job> jobs, const TraceNames& names,
                             double epoch_offset, UserHistory* final_history) {
  FeatureMatrix m;
  m.rows = jobs.size();
  m.values.assign(jobs.size() * N_FEATURES, MISSING);
  // The same store the replayer and the plugin feed live, here fed the recorded finishes.
  OnlineHistory store(names, epoch_offset);

  // Jobs in flight, earliest finish first; ties broken by index so the walk is deterministic.
  using Pending = std::pair<double, size_t>;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> running;
  auto finish_one = [&] {
    const auto [fin, i] = running.top();
    running.pop();
    store.record_finish(jobs[i], jobs[i].run, fin);
  };
  double prev_submit = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    if (job.submit < prev_submit)
      throw ::mlprio::UsageError("build_features: jobs are not sorted by submit time (job " +
                                 std::to_string(job.id) + ")");
    prev_submit = job.submit;
    while (!running.empty() && running.top().first <= job.submit) finish_one();
    store.encode(job, std::span<float>(m.values.data() + i * N_FEATURES, N_FEATURES));
    const double fin = finish_time(job);
    if (user_key(job, names) != 0 && !std::isnan(fin)) running.emplace(fin, i);
  }
  while (!running.empty()) finish_one();
  if (final_history != nullptr) *final_history = std::move(store.history());
  return m;
}

void encode_with_history(std::span<const Job> jobs, const TraceNames& names,
                         const UserHistory& history, double epoch_offset, std::span<float> out) {
  if (out.size() < jobs.size() * N_FEATURES)
    throw ::mlprio::InvariantError("encode_with_history: output smaller than jobs x schema");
  const FeatureEncoder enc(names, epoch_offset);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const uint64_t key = enc.user_of(jobs[i]);
    enc.encode(jobs[i], key != 0 ? history.find(key) : nullptr,
               out.subspan(i * N_FEATURES, N_FEATURES));
  }
}

}  // namespace mlprio::model
