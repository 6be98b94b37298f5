// core's shared small utilities (mlprio/util/text.hpp, splitmix64.hpp): the one trim, the one
// exact integer parse, and the one SplitMix64, pinned to the reference sequence.
#include <catch2/catch.hpp>

#include <cstdint>

#include "mlprio/util/splitmix64.hpp"
#include "mlprio/util/text.hpp"

using namespace mlprio::util;

TEST_CASE("trim drops the C locale's white space at both ends only", "[util]") {
  CHECK(trim("  a b\t\r\n") == "a b");
  CHECK(trim("\v\fx") == "x");
  CHECK(trim("   ").empty());
  CHECK(trim("").empty());
  CHECK(trim("\xa0x\xa0") == "\xa0x\xa0");  // not ASCII white space
}

TEST_CASE("parse_int reads all of the text as a decimal int64, nothing else", "[util]") {
  CHECK(parse_int("42") == 42);
  CHECK(parse_int("-7") == -7);
  CHECK(parse_int("9223372036854775807") == INT64_MAX);
  for (const char* bad : {"", " 1", "1 ", "+1", "4abc", "1.0", "9223372036854775808", "0x10"}) {
    INFO(bad);
    CHECK_FALSE(parse_int(bad).has_value());
  }
}

TEST_CASE("SplitMix64 gives the reference sequence and unbiased bounded draws", "[util]") {
  SplitMix64 g(0);
  CHECK(g.next() == 0xe220a8397b1dcdafULL);  // Vigna's splitmix64.c, seed 0
  CHECK(g.next() == 0x6e789e6aa1b965f4ULL);
  uint64_t state = 0;
  CHECK(splitmix64(state) == 0xe220a8397b1dcdafULL);
  SplitMix64 h(1);
  for (int i = 0; i < 1000; ++i) CHECK(h.below(7) < 7);
}
