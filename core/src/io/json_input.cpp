// Depth-bounded parsing of untrusted JSON (see mlprio/io/json_input.hpp).
#include "mlprio/io/json_input.hpp"

namespace mlprio::io {

size_t json_depth_violation(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped byte cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

nlohmann::json parse_untrusted_json(std::string_view text, int max_depth) {
  if (const size_t at = json_depth_violation(text, max_depth); at != std::string_view::npos)
    throw JsonInputError("nested deeper than " + std::to_string(max_depth) +
                         " levels of arrays/objects (byte " + std::to_string(at) + ")");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw JsonInputError("not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw JsonInputError(std::string("not valid JSON: ") + e.what());
  }
}

std::string describe_json_value(const nlohmann::json& v) {
  constexpr size_t MAX_SHOWN = 60;
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    // A cut may split a UTF-8 sequence: replace it rather than throw.
    return nlohmann::json(s.substr(0, MAX_SHOWN))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
           (s.size() > MAX_SHOWN ? "..." : "");
  }
  if (v.is_primitive()) return v.dump();
  return std::string("(") + v.type_name() + ")";
}

}  // namespace mlprio::io
