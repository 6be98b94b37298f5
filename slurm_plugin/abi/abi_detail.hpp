// Internals of the plugin C ABI (slurm_plugin/include/mlprio_abi.h): the parameter parser, the
// LLM fine-tuning feature extractor and the conversion of a plugin's job view into the core's
// Job record. Kept apart from the C entry points so unit tests can reach them without Slurm;
// nothing here knows about Slurm's headers or locks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mlprio/jobs/job.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/llm_advisor.hpp"  // ResponseFormat (the header needs no curl)
#include "mlprio_abi.h"

namespace mlprio::plugin {

// Every key of PrioritySiteFactorParameters, with its default, declared once here.
struct Params {
  std::string model;  // model=PATH
  double weight =
      10000.0;  // weight=N: factor = weight * score (score is in (0, 1] before starvation)
  int64_t max_boost = 100000;     // max_boost=N: |factor| cap
  bool max_boost_given = false;   // max_boost was in the text (the default is never warned about)
  double limit_margin = 0.25;     // limit_margin=F: time limit = predicted run * (1 + F)
  double refuse_above = 1.0;      // refuse_above=P: failure probability that refuses (1 = never)
  int refuse_mode = MLPRIO_WARN;  // refuse_mode=refuse|warn
  std::string llm_url;            // llm_url=URL: OpenAI-compatible endpoint of the LLM advisor
  // llm_api_key_file=PATH: the endpoint's API key, sent as "Authorization: Bearer"; the file must
  // belong to root or to the user slurmctld runs as, with mode 0600 or 0400, or the advisor does
  // not start (slurm.conf is world-readable, so the key itself never goes there).
  std::string llm_api_key_file;
  std::string llm_ca_file;        // llm_ca_file=PATH: CA bundle (PEM) to verify an https endpoint
  int64_t llm_timeout_ms = 2000;  // llm_timeout_ms=N: whole request, connect included
  std::string llm_model = "default";  // llm_model=NAME: the request's "model" field
  // llm_response_format=json_schema|json_object: how the request asks for the answer's shape
  // (json_schema sends the answer's schema; json_object for a server that refuses json_schema)
  mlprio::model::ResponseFormat llm_response_format = mlprio::model::ResponseFormat::JSON_SCHEMA;
  double llm_min_factor = 0.5;     // llm_min_factor=F: advice never moves the estimate below x F
  double llm_max_factor = 2.0;     // llm_max_factor=F: ... nor above x F
  double llm_min_confidence = 0;   // llm_min_confidence=C: answers below C are ignored
  int64_t budget_us = 200;         // budget_us=N: inline model budget per job, 0 = async only
  int64_t check_period_ms = 5000;  // check_period_ms=N: model file mtime check period
  // reload_wait_ms=N: after slurm.conf was re-read, how long job_submit waits for the model of
  // the new configuration (loaded on the worker) before passing a job unchanged; 0 = never wait
  int64_t reload_wait_ms = 1000;
  // history_period_ms=N: how often site_factor/mlprio scans slurmctld's job list for ended jobs
  // and teaches the live feature store their run times (keep it below MinJobAge, 300 s by
  // default, or ended jobs leave the list unseen); 0 = the model file's snapshot only
  int64_t history_period_ms = 30000;
  // Ways through a refusal (job_submit only). exempt_qos=a:b, exempt_accounts=x:y: jobs under
  // these QOS/accounts (named or the user's defaults) are never refused or warned, only told.
  std::vector<std::string> exempt_qos;
  std::vector<std::string> exempt_accounts;
  // allow_override=1: a job whose --comment holds the word OVERRIDE_TOKEN is accepted (logged).
  bool allow_override = false;
  // mode=enforce|shadow: shadow computes and logs SITE, limits and refusals, applies none.
  int mode = MLPRIO_MODE_ENFORCE;
  // scope_partitions=a:b, scope_qos=..., scope_accounts=...: when set, only jobs in a listed
  // partition (any of a job's partitions) / QOS / account are touched; others pass unchanged
  // with SITE 0. Names compared case-insensitively.
  std::vector<std::string> scope_partitions;
  std::vector<std::string> scope_qos;
  std::vector<std::string> scope_accounts;
  // override_default_time=1: fill a limit even when the job's partition has a DefaultTime
  // (by default Slurm's DefaultTime is left to apply).
  bool override_default_time = false;
  // FSDP advice. fsdp_table=PATH: the table `mlprio-fsdp table` writes (absolute
  // path; empty = no advice); loaded and reloaded like the model file.
  std::string fsdp_table;
  // fsdp_refuse_oom=1: refuse a job whose declared minibatch is predicted to run out of memory
  // (default: warn, as for retries).
  bool fsdp_refuse_oom = false;
  // fsdp_gpu_gib=a100/80:a100_40g/40:h100/80: GPU memory per GRES type (the type of the job's
  // gres/gpu request, e.g. --gres=gpu:a100:4); jobs naming no type, or one not listed, get
  // fsdp_default_gpu_gib.
  std::vector<std::pair<std::string, int64_t>> fsdp_gpu_gib;
  int64_t fsdp_default_gpu_gib = 80;
};
inline constexpr const char* OVERRIDE_TOKEN = "mlprio:override";

// The GPU type of a GRES/TRES request ("gres:gpu:a100:4", "gres/gpu:a100=2" -> "a100"), lower
// case; "" when it names none.
std::string tres_gpu_type(std::string_view tres);
// GPU memory (GiB) for a job's request under the fsdp_gpu_gib / fsdp_default_gpu_gib parameters.
int64_t gpu_memory_gib(const Params& p, std::string_view tres);

// Whether a job is inside the parameters' scope_* lists (a comma list of partitions matches when
// any of them is listed). Empty lists match everything.
bool in_scope(const Params& p, const char* partitions, const char* qos, const char* account);

// Whether `comment` holds OVERRIDE_TOKEN as a word (delimited by start/end, space, ',' or ';').
bool has_override_token(const char* comment);

struct ParseResult {
  Params params;
  std::vector<std::string> warnings;  // unknown keys, bad values (each already explains itself)
};

// Parses "key=value,key=value". Never throws on user input: problems become warnings and the
// key keeps its default.
ParseResult parse_params(std::string_view text);

// Every parameter with the value in force, as "key=value,..." in parse_params()'s syntax (empty
// values for unset strings and lists): what the plugins log at load and at each reconfigure,
// because 22.05's `scontrol show config` prints PrioritySiteFactorParameters as (null).
std::string format_params(const Params& p);

// LLM fine-tuning parameters in text: `#MLPRIO k=v ...` script lines, `k=v` tokens in a comment
// (optionally after "mlprio:"), and hints in a job name ("llama-7b-lora16"). Canonical keys:
// model_size, seq_len, batch_size, lora_rank, epochs, quant_bits. Later sources override earlier.
std::vector<std::pair<std::string, double>> extract_features(std::string_view script,
                                                             std::string_view comment,
                                                             std::string_view name);
// The same, also saying what was ignored: "model_size=banana (not a number)", "seq_len=-5 (out of
// range: ...)", and unknown keys in text meant for mlprio ("mlprio:" comments, #MLPRIO lines).
std::vector<std::pair<std::string, double>> extract_features(std::string_view script,
                                                             std::string_view comment,
                                                             std::string_view name,
                                                             std::vector<std::string>& problems);
std::string format_features(const std::vector<std::pair<std::string, double>>& f);

// The job as the core sees it; strings are interned into `names`.
Job to_core_job(const mlprio_job_t& in, TraceNames& names);

// "1-02:03:04" (days-hh:mm:ss) or "02:03:04"; "unknown" for a negative, non-finite or
// unrepresentable number of seconds.
std::string format_duration(double seconds);
// A parameter's number as format_params() writes it ("%.10g").
std::string format_number(double v);

// The site factor for `weight * score`: clamped to [-max_boost, max_boost] and rounded; 0 for a
// non-finite product. Never converts an out-of-range double (a max_boost beyond 2^53 is only
// approximately reached, never overflowed).
int64_t factor_value(double weighted_score, int64_t max_boost);

// GPUs asked for by a Slurm TRES/GRES request string (job_desc tres_per_job or tres_per_node):
// comma- or semicolon-separated entries "gres:gpu:2", "gres/gpu:2", "gres:gpu:a100:2",
// "gres/gpu:a100=2", "gres/gpu=2", "gpu:2", "gres:gpu" or "gres:gpu:a100" (a count of 1), with
// Slurm's count suffixes (k = 1024, kb = 1000, ...). The counts of every "gpu" entry are summed;
// other GRES ("gres:gpumem:...", "gres:mps:100") and TRES ("cpu=4") are ignored. -1 when no entry
// asks for GPUs, when a GPU entry cannot be parsed ("gres:gpu:", "gres:gpu:a100:x") or when the
// total is above JOB_MAX_COUNT: unknown, never a guess. mlprio_tres_gpus() is its C face.
double tres_gpus(std::string_view tres);

// The advisor key job_submit/mlprio leaves in AdminComment ("mlprio_llm=<16 hex>"), or 0.
uint64_t llm_key_of(const char* admin_comment);

// Why a job is predicted to fail (abi_reason.cpp): one feature's push on the failure prediction.
struct FailContribution {
  int feature = 0;          // mlprio::model::Feature
  double contribution = 0;  // in the failure model's units (log-odds or probability)
  float value = 0;          // the job's encoded value (NaN = missing)
};
enum class ReasonGroup { HISTORY, LLM, REQUEST, OTHER };
ReasonGroup reason_group(int feature);
// The features that raised the failure prediction most (positive contributions, largest first,
// at most max_n, none below a tenth of the largest). contrib/row as Predictor::explain_fail.
std::vector<FailContribution> top_fail_reasons(std::span<const double> contrib,
                                               std::span<const float> row, size_t max_n = 3);
struct FailText {
  std::string message;  // for the user: the prediction and its reasons
  std::string advice;   // for the user, after message, when the job is refused or warned
  std::string log;      // for slurmctld's log
};
// The refusal/warning text; `explained` false when the model could not explain itself;
// `override_allowed` makes history advice name the override token.
FailText failure_text(const std::vector<FailContribution>& top, bool explained, double fail_prob,
                      double limit, bool override_allowed);

}  // namespace mlprio::plugin
