// The FSDP advice inputs: a batch script's #MLPRIO training directives (job_submit
// reads them from any user's script) and the advice table file. The directive parser never
// throws, reports at most 16 problems in printable ASCII; a table either is refused with
// FsdpTableError or writes back to a document that parses to the same table; the advice on any
// directive against it never throws.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "mlprio/model/fsdp_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mlprio::model;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const DirectiveParse d = parse_fsdp_directives(text);
  if (d.problems.size() > 16) std::abort();
  for (const auto& p : d.problems)
    for (char c : p)
      if (c < 0x20 || c >= 0x7f) std::abort();
  try {
    const FsdpTable t = FsdpTable::parse(text, "fuzz");
    const std::string doc = t.to_json({}).dump();
    if (FsdpTable::parse(doc, "again").to_json({}).dump() != doc) std::abort();
    for (const auto& e : t.entries()) {
      FsdpDirective q = d.directive;
      q.model = e.key.model;
      if (q.minibatch == 0) q.minibatch = e.max_safe_mbs + 1;
      (void)advise(t, q, e.key.gpu_memory_gib, e.key.world_size);
    }
  } catch (const FsdpTableError&) {
  }
  return 0;
}
