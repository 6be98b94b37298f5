// The options every mlprio-replay command that replays shares (run, sweep, tune), on top of the
// programs' common command-line layer (mlprio/cli/: trace options, exit codes).
#pragma once

#include <CLI/CLI.hpp>

#include "mlprio/replay/spec.hpp"

namespace mlprio::cli {

// Adds the options every replay command shares (mlprio/replay/spec.hpp): --estimate,
// --estimate-quantile, --correction, --backfill-order, --ml-*, the machine, --kill-at-limit,
// --too-large, --bsld-threshold. One place, so run, sweep and tune cannot drift apart.
void add_replay_spec_options(CLI::App& cmd, replay::ReplaySpec& spec);
// Copies into `dst` the options of add_replay_spec_options that were given on `cmd`'s command
// line (sweep: the command line wins over the config file, option by option).
// Adds the options of the agent orders (external:CMD, llm:URL): --external-base,
// --external-timeout, --external-every, --llm-prompt, --llm-top, --llm-model, --llm-api-key-env.
void add_agent_options(CLI::App& cmd, replay::AgentOptions& agent);
void merge_given(const CLI::App& cmd, const replay::ReplaySpec& given, replay::ReplaySpec& dst);

}  // namespace mlprio::cli
