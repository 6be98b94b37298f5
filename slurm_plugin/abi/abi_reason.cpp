// The words job_submit/mlprio uses when it refuses or warns about a job predicted to fail: the
// features that pushed the failure prediction up most (Predictor::explain_fail, the numbers
// `mlprio-model explain` prints), said in the user's terms, and advice that fits the biggest
// one: a user refused on their own history is told so (and how to get through, when the admin
// allows it), not sent to tune LoRA ranks. Pure string work, unit-tested without a cluster.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "abi_detail.hpp"
#include "mlprio/model/features.hpp"

namespace mlprio::plugin {
namespace {

namespace m = mlprio::model;

struct Label {
  const char* words;  // how the message names the feature
  ReasonGroup group;
  bool show_value;  // false for hashed categorical columns (the number means nothing)
};

Label label_of(int f) {
  switch (f) {
    case m::F_REQ_PROCS:
      return {"the CPUs requested", ReasonGroup::REQUEST, true};
    case m::F_REQ_NODES:
      return {"the nodes requested", ReasonGroup::REQUEST, true};
    case m::F_REQ_GPUS:
      return {"the GPUs requested", ReasonGroup::REQUEST, true};
    case m::F_REQ_MEM_GIB:
      return {"the memory requested (GiB)", ReasonGroup::REQUEST, true};
    case m::F_REQ_TIME:
      return {"the time limit requested (s)", ReasonGroup::REQUEST, true};
    case m::F_PARTITION:
      return {"the partition", ReasonGroup::OTHER, false};
    case m::F_QOS:
      return {"the QOS", ReasonGroup::OTHER, false};
    case m::F_QUEUE:
      return {"the queue", ReasonGroup::OTHER, false};
    case m::F_ACCOUNT:
      return {"the account", ReasonGroup::OTHER, false};
    case m::F_USER:
      return {"your past jobs under this user name", ReasonGroup::HISTORY, false};
    case m::F_APP:
      return {"the application", ReasonGroup::OTHER, false};
    case m::F_NAME:
    case m::F_NAME_TOK0:
    case m::F_NAME_TOK1:
      return {"the job name", ReasonGroup::OTHER, false};
    case m::F_HIST_LAST2_MEAN:
      return {"the run time of your last two jobs (s)", ReasonGroup::HISTORY, true};
    case m::F_HIST_LAST_RUN:
      return {"the run time of your last job (s)", ReasonGroup::HISTORY, true};
    case m::F_HIST_RUN_REQ_RATIO:
      return {"how much of their time limit your jobs used", ReasonGroup::HISTORY, true};
    case m::F_HIST_RATIO_TIMES_REQ:
      return {"your jobs' usual share of this time limit (s)", ReasonGroup::HISTORY, true};
    case m::F_HIST_COUNT:
      return {"how many jobs you have run", ReasonGroup::HISTORY, true};
    case m::F_HIST_FAIL_RATE:
      return {"the failure rate of your recent jobs", ReasonGroup::HISTORY, true};
    case m::F_HOUR_OF_DAY:
      return {"the hour of submission", ReasonGroup::OTHER, true};
    case m::F_DAY_OF_WEEK:
      return {"the day of submission", ReasonGroup::OTHER, true};
    case m::F_LLM_MODEL_SIZE:
      return {"the model size", ReasonGroup::LLM, true};
    case m::F_LLM_SEQ_LEN:
      return {"the sequence length", ReasonGroup::LLM, true};
    case m::F_LLM_BATCH_SIZE:
      return {"the batch size", ReasonGroup::LLM, true};
    case m::F_LLM_LORA_RANK:
      return {"the LoRA rank", ReasonGroup::LLM, true};
    case m::F_LLM_EPOCHS:
      return {"the number of epochs", ReasonGroup::LLM, true};
    case m::F_LLM_DATASET_SIZE:
      return {"the dataset size", ReasonGroup::LLM, true};
    default:
      return {"another feature", ReasonGroup::OTHER, false};
  }
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

}  // namespace

std::vector<FailContribution> top_fail_reasons(std::span<const double> contrib,
                                               std::span<const float> row, size_t max_n) {
  std::vector<FailContribution> all;
  for (int f = 0; f < m::N_FEATURES && static_cast<size_t>(f) < contrib.size(); ++f)
    if (contrib[static_cast<size_t>(f)] > 0)
      all.push_back({f, contrib[static_cast<size_t>(f)],
                     static_cast<size_t>(f) < row.size() ? row[static_cast<size_t>(f)] : NAN});
  std::stable_sort(all.begin(), all.end(),
                   [](const FailContribution& a, const FailContribution& b) {
                     return a.contribution > b.contribution;
                   });
  // Features worth a tenth of the largest or more; the rest is noise to the user.
  std::vector<FailContribution> top;
  for (const auto& c : all) {
    if (top.size() >= max_n || c.contribution < 0.1 * all.front().contribution) break;
    top.push_back(c);
  }
  return top;
}

ReasonGroup reason_group(int feature) {
  return label_of(feature).group;
}

FailText failure_text(const std::vector<FailContribution>& top, bool explained, double fail_prob,
                      double limit, bool override_allowed) {
  FailText t;
  char head[160];
  std::snprintf(head, sizeof head,
                "mlprio: this job is predicted to fail with probability %.2f (limit %.2f)",
                fail_prob, limit);
  t.message = head;
  std::snprintf(head, sizeof head, "failure probability %.2f", fail_prob);
  t.log = head;
  if (!explained) {
    t.message += "; the model gives no per-feature reason.";
    t.advice = "Ask your admin.";
    return t;
  }
  if (top.empty()) {
    t.message += ", from the model's base rate alone (no feature of this job stands out).";
    t.advice = "Ask your admin.";
    t.log += "; base rate only";
    return t;
  }
  t.message += ", mostly because of ";
  t.log += "; top reasons";
  for (size_t i = 0; i < top.size(); ++i) {
    const Label l = label_of(top[i].feature);
    const std::string name(m::feature_names()[static_cast<size_t>(top[i].feature)]);
    if (i) t.message += i + 1 == top.size() ? " and " : ", ";
    t.message += l.words;
    if (l.show_value && !std::isnan(top[i].value))
      t.message += " (" + name + "=" + num(top[i].value) + ")";
    else
      t.message += " (" + name + ")";
    t.log += " " + name + (std::isnan(top[i].value) ? "" : "=" + num(top[i].value)) + " (+" +
             num(top[i].contribution) + ")";
  }
  t.message += ".";
  switch (reason_group(top.front().feature)) {
    case ReasonGroup::HISTORY:
      t.advice = "This comes from your recent jobs, not from what this job asks for";
      t.advice += override_allowed
                      ? std::string(": if this job is different, resubmit with --comment=") +
                            OVERRIDE_TOKEN + " to run it anyway (it is logged)."
                      : ": if this job is different, ask your admin.";
      break;
    case ReasonGroup::LLM:
      t.advice =
          "Check memory per GPU, batch size, sequence length and LoRA rank (#MLPRIO "
          "lines), or ask your admin.";
      break;
    case ReasonGroup::REQUEST:
      t.advice = "Check the resources requested (--gres, --mem, -t), or ask your admin.";
      break;
    case ReasonGroup::OTHER:
      t.advice = "Ask your admin.";
      break;
  }
  return t;
}

}  // namespace mlprio::plugin
