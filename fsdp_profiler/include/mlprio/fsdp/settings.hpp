// Settings of the caching-allocator model: the knobs of PyTorch's PYTORCH_CUDA_ALLOC_CONF plus
// the per-process memory fraction and the PyTorch version whose rules differ. parse_alloc_conf()
// reads the environment-variable syntax ("expandable_segments:True,max_split_size_mb:128") and
// throws SettingsError naming the bad key or value; parse_bytes() reads sizes such as "80GiB".
// Everything in the model (allocator.hpp) reads these values and nothing else.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

class SettingsError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

inline constexpr uint64_t KiB = 1024;
inline constexpr uint64_t MiB = 1024 * KiB;
inline constexpr uint64_t GiB = 1024 * MiB;

// Sizes the allocator is built on (c10's kMinBlockSize, kSmallSize, kSmallBuffer, kLargeBuffer,
// kMinLargeAlloc, kRoundLarge).
inline constexpr uint64_t MIN_BLOCK_SIZE = 512;
inline constexpr uint64_t SMALL_SIZE = 1 * MiB;
inline constexpr uint64_t SMALL_BUFFER = 2 * MiB;
inline constexpr uint64_t LARGE_BUFFER = 20 * MiB;
inline constexpr uint64_t MIN_LARGE_ALLOC = 10 * MiB;
inline constexpr uint64_t ROUND_LARGE = 2 * MiB;
inline constexpr size_t ROUNDUP_INTERVALS = 16;  // 1 MiB .. 64 GiB, one per power of two
inline constexpr uint64_t UNLIMITED = UINT64_MAX;
// The largest size any setting, capacity or headroom may give (1 PiB): sizes are summed and
// multiplied in 64 bits, and an unchecked 2^44 MiB wrapped to 0.
inline constexpr uint64_t MAX_SIZE_BYTES = uint64_t{1} << 50;

// Rules that changed between PyTorch releases. TORCH_1_13: one roundup_power2_divisions value
// applied whenever it is > 0 (so 1 means "next power of two"), no max_non_split_rounding_mb, no
// expandable segments. TORCH_2_X (2.1 and later): per-interval divisions applied when > 1,
// configurable max_non_split_rounding_mb, expandable segments.
enum class TorchVersion { TORCH_1_13, TORCH_2_X };

struct AllocatorSettings {
  TorchVersion version = TorchVersion::TORCH_2_X;
  uint64_t max_split_size = UNLIMITED;
  uint64_t max_non_split_rounding_size = LARGE_BUFFER;
  std::array<uint64_t, ROUNDUP_INTERVALS> roundup_power2_divisions{};  // 0: plain 512 B rounding
  double garbage_collection_threshold = 0.0;  // only acts when memory_fraction is set (as torch)
  bool expandable_segments = false;
  // torch.cuda.set_per_process_memory_fraction(); 0 means not set.
  double memory_fraction = 0.0;

  // The PYTORCH_CUDA_ALLOC_CONF string that reproduces these settings.
  std::string to_alloc_conf() const;
};

// Parses PYTORCH_CUDA_ALLOC_CONF syntax into `base` (keys not named keep base's values).
AllocatorSettings parse_alloc_conf(std::string_view conf, AllocatorSettings base = {});

// Parses "80GiB", "512MiB", "1.5GB", "4096" (bytes). Binary (KiB..TiB) and decimal (KB..TB)
// units; throws SettingsError with what a valid value looks like.
uint64_t parse_bytes(std::string_view text);

// "80.00 GiB" style formatting for messages and reports.
std::string format_bytes(uint64_t bytes);

}  // namespace mlprio::fsdp
