// The untrusted-JSON guard (core/src/io/json_input.cpp): nesting is counted outside strings only
// and refused one level past the limit with the byte offset, syntax errors name the byte, and
// error descriptions of untrusted values never serialise a container.
#include <catch2/catch.hpp>

#include <string>

#include "mlprio/io/json_input.hpp"

using namespace mlprio::io;

namespace {
std::string nested(int levels, const std::string& inner = "1") {
  return std::string(static_cast<size_t>(levels), '[') + inner +
         std::string(static_cast<size_t>(levels), ']');
}
std::string error_of(const std::string& text) {
  try {
    parse_untrusted_json(text);
  } catch (const JsonInputError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("JSON input: nesting up to the limit parses, one level more is refused", "[json]") {
  CHECK(parse_untrusted_json(nested(JSON_MAX_DEPTH)).is_array());
  CHECK_THAT(error_of(nested(JSON_MAX_DEPTH + 1)),
             Catch::Contains("deeper than 64 levels") && Catch::Contains("(byte 64)"));
  CHECK(json_depth_violation("{\"a\": [{\"b\": []}]}", 4) == std::string::npos);
  CHECK(json_depth_violation("{\"a\": [{\"b\": []}]}", 3) == 13);
  CHECK(json_depth_violation("{\"a\": [{\"b\": []}]}", 2) == 7);
}

TEST_CASE("JSON input: 100,000 levels are refused without recursion", "[json]") {
  const std::string deep = nested(100000);  // 200 KB
  CHECK_THAT(error_of(deep), Catch::Contains("deeper than"));
  CHECK_THAT(error_of("{\"x\": " + std::string(100000, '{')), Catch::Contains("deeper than"));
}

TEST_CASE("JSON input: brackets inside strings and escapes do not count", "[json]") {
  const std::string brackets =
      "\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"";
  const auto v = parse_untrusted_json("{\"s\": " + brackets + "}");
  CHECK(v["s"].get<std::string>().size() == 2001);
  // An escaped backslash ends before the quote, which then closes the string.
  CHECK(json_depth_violation("[\"\\\\\", [[1]]]", 2) == 8);
}

TEST_CASE("JSON input: syntax errors name the byte", "[json]") {
  CHECK_THAT(error_of("{\"a\": 1,"), Catch::Contains("not valid JSON (byte"));
  CHECK_THAT(error_of(""), Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of("[1] x"), Catch::Contains("not valid JSON"));
}

TEST_CASE("JSON input: describing a value never serialises a container", "[json]") {
  CHECK(describe_json_value(nlohmann::json(3)) == "3");
  CHECK(describe_json_value(nlohmann::json("abc")) == "\"abc\"");
  CHECK(describe_json_value(nlohmann::json(std::string(100, 'x'))).size() == 65);
  CHECK(describe_json_value(nlohmann::json::array({1, 2})) == "(array)");
  CHECK(describe_json_value(nlohmann::json::object()) == "(object)");
  // A cut through a UTF-8 sequence does not throw.
  std::string s(59, 'a');
  s += "\xc3\xa9\xc3\xa9";
  CHECK_NOTHROW(describe_json_value(nlohmann::json(s)));
}
