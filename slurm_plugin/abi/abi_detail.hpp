// Internals of the plugin C ABI (slurm_plugin/include/mlprio_abi.h), beside the parameters
// (mlprio/plugin/params.hpp): the LLM fine-tuning feature extractor and the conversion of a
// plugin's job view into the core's Job record. Kept apart from the C entry points so unit tests
// can reach them without Slurm; nothing here knows about Slurm's headers or locks.
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
#include "mlprio/plugin/params.hpp"
#include "mlprio_abi.h"

namespace mlprio::plugin {

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
// ASCII lower case.
std::string lower(std::string_view s);
// A number with an optional k/m/b/t (or G) multiplier: "7e9", "7B", "1.5b", "4k"; finite only.
bool parse_number(std::string_view s, double& out);

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
