// The model-file loader slurmctld's plugins call: any bytes give a Predictor or a ModelError,
// never a crash (deeply nested JSON once overflowed the stack), and a loaded model predicts finite
// or NaN numbers for a few jobs without crashing.
#include <cstdint>

#include "fuzz_util.hpp"
#include "mlprio/model/predictor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlprio::fuzz::write_input(data, size, ".json");
  try {
    auto p = mlprio::model::load_predictor(path);
    mlprio::TraceNames names;
    mlprio::Job jobs[2];
    jobs[0].req_procs = 4;
    jobs[0].req_time = 3600;
    jobs[0].user = names.users.intern("alice");
    jobs[1].req_procs = -1;
    mlprio::model::Prediction out[2];
    p->predict(jobs, names, out);
  } catch (const mlprio::model::ModelError&) {
  }
  return 0;
}
