// The parameters of both mlprio plugins (PrioritySiteFactorParameters, which job_submit/mlprio
// reads too): every key with its default, the parser and the formatter, driven by one table
// (slurm_plugin/abi/abi_params.cpp). Public so the deployed-stack replay reads a slurm.conf's
// parameters exactly as the plugins do; nothing here needs Slurm's headers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
struct ParseResult {
  Params params;
  std::vector<std::string> warnings;  // unknown keys, bad values (each already explains itself)
};

// Parses "key=value,key=value". Never throws on user input: problems become warnings and the
// key keeps its default.
ParseResult parse_params(std::string_view text);

// One parameter: its key, a valid setting shown when a value is refused, how a value is read
// (false: refused, the member unchanged) and how the value in force is written (abi_params.cpp).
struct ParamRow {
  std::string_view key;
  std::string_view example;
  bool (*set)(Params& p, std::string_view value);
  std::string (*get)(const Params& p);
};
// Every key, in the order format_params() writes them.
std::span<const ParamRow> param_rows();

// Every parameter with the value in force, as "key=value,..." in parse_params()'s syntax (empty
// values for unset strings and lists): what the plugins log at load and at each reconfigure,
// because 22.05's `scontrol show config` prints PrioritySiteFactorParameters as (null).
std::string format_params(const Params& p);

// A parameter's number as format_params() writes it ("%.10g").
std::string format_number(double v);

}  // namespace mlprio::plugin
