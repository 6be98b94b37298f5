// Parsers for the value formats Slurm prints (sacct, scontrol): durations `[D-]HH:MM:SS`,
// timestamps `YYYY-MM-DDTHH:MM:SS`, memory sizes with K/M/G/T suffixes, TRES lists. Shared by
// the sacct reader and, later, by the plugin side. Each returns nullopt on malformed or
// out-of-range input (memory above 2^62 bytes, counts above JOB_MAX_COUNT, NaN/inf) and
// treats Slurm's "Unknown"/"None"/"UNLIMITED"/"Partition_Limit" as "no value" (see is_slurm_none).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mlprio {

bool is_slurm_none(std::string_view s);
// Seconds from "[D-]HH:MM:SS", "MM:SS", "HH:MM:SS.fff", "MM:SS.fff" or plain minutes ("60").
std::optional<double> parse_slurm_duration(std::string_view s);
// Seconds since the Unix epoch for "YYYY-MM-DDTHH:MM:SS", read as UTC.
std::optional<double> parse_slurm_time(std::string_view s);
// Bytes for "33600M", "4G", "2800Mc", "4Gn", "512K", "1T"; a bare number is MiB as in Slurm.
// `per` receives 'c' (per CPU), 'n' (per node) or 0 for the old ReqMem suffixes.
std::optional<int64_t> parse_slurm_mem(std::string_view s, char* per = nullptr);

struct Tres {
  int64_t cpu = -1;
  int64_t mem = -1;  // bytes
  int64_t node = -1;
  double gpu = -1;  // gres/gpu (untyped total; typed counts summed when no untyped entry)
};
std::optional<Tres> parse_tres(std::string_view s);

}  // namespace mlprio
