// mlprio-fsdp-cuda.so: the measuring runner behind the module door (measure_module.hpp).
#include "measure_module.hpp"

#include <cstdio>
#include <exception>

#include "mlprio/util/errors.hpp"

namespace {
void copy_message(const char* what, char* err, std::size_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", what);
}
}  // namespace

extern "C" __attribute__((visibility("default"))) long mlprio_fsdp_measure_abi() {
  return mlprio::fsdp::MEASURE_MODULE_ABI;
}

extern "C" __attribute__((visibility("default"))) int mlprio_fsdp_measure(
    const mlprio::fsdp::MeasureOptions* opts, mlprio::fsdp::MeasureResult* out, char* err,
    std::size_t err_len) {
  try {
    *out = mlprio::fsdp::run_measure(*opts);
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), err, err_len);
    const int code = mlprio::exit_code_for(e);
    return code == 0 ? 1 : code;
  } catch (...) {
    copy_message("unknown exception in the CUDA module", err, err_len);
    return 1;
  }
}
