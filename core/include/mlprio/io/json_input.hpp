// The one way mlprio parses JSON that comes from a file or a peer it does not control (model
// files and the XGBoost boosters inside them, PyTorch memory snapshots, model-shape files, LLM
// answers). nlohmann's parser itself is iterative, but comparing, copying or serialising a
// parsed value recurses once per nesting level, so 100,000 levels of `[[[[` in a 200 KB file
// overflow the stack. parse_untrusted_json() refuses such text before nlohmann sees it (one pass
// counting brackets outside strings) and turns parse errors into JsonInputError with the byte
// offset; callers prepend the file name and rethrow as their own error type.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mlprio/util/errors.hpp"

namespace mlprio::io {

// Every format mlprio reads nests fewer than 12 levels (an XGBoost model: 8).
inline constexpr int JSON_MAX_DEPTH = 64;

class JsonInputError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// Byte offset of the first '[' or '{' (outside strings) that opens level max_depth + 1, or
// std::string_view::npos when the text nests at most max_depth levels. Does not check syntax.
size_t json_depth_violation(std::string_view text, int max_depth = JSON_MAX_DEPTH);

// Parses one JSON document. Throws JsonInputError: "nested deeper than 64 levels (byte N)" or
// "not valid JSON (byte N): <parser message>".
nlohmann::json parse_untrusted_json(std::string_view text, int max_depth = JSON_MAX_DEPTH);

// A short description of an untrusted value for an error message: a string (cut to 60 bytes) or
// a scalar as written, otherwise only its type ("(array)"). Never serialises a container.
std::string describe_json_value(const nlohmann::json& v);

}  // namespace mlprio::io
