// A seeded synthetic trace with known structure for the model tests: each user has a typical run
// time, LLM jobs scale with model size and epochs, requests over-estimate by 2-10x rounded up to
// the hour, and a large LoRA rank on a small GPU request fails (out of memory). A model that
// learns anything beats the request baseline on it; one that leaks or ignores features does not.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "mlprio/jobs/trace.hpp"

namespace mlprio::model::testing {

inline Trace synthetic_trace(int n_jobs, uint32_t seed) {
  Trace t;
  t.path = "synthetic.swf";
  t.format = TraceFormat::SACCT;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int n_users = 30;
  std::vector<double> user_base(n_users);
  for (auto& b : user_base) b = std::exp(5.0 + 4.0 * u(rng));  // ~150 s .. ~8000 s
  const int32_t f_model = t.names.features.intern("model_size");
  const int32_t f_epochs = t.names.features.intern("epochs");
  const int32_t f_rank = t.names.features.intern("lora_rank");
  const int32_t gpu_part = t.names.partitions.intern("gpu");
  const int32_t cpu_part = t.names.partitions.intern("cpu");
  double now = 1.7e9;
  for (int i = 0; i < n_jobs; ++i) {
    Job j;
    j.id = i;
    now += -std::log(1.0 - u(rng)) * 300.0;
    j.submit = now;
    j.wait = std::floor(u(rng) * 600.0);
    const int uid = static_cast<int>(u(rng) * n_users) % n_users;
    j.user = t.names.users.intern("user" + std::to_string(uid));
    j.req_procs = 1 << static_cast<int>(u(rng) * 6);
    double run;
    if (uid % 3 == 0) {  // LLM fine-tuning users
      const double size = std::array<double, 4>{1, 7, 13, 70}[static_cast<size_t>(u(rng) * 4) % 4];
      const double epochs = 1 + std::floor(u(rng) * 4);
      const double rank = std::array<double, 3>{8, 16, 64}[static_cast<size_t>(u(rng) * 3) % 3];
      j.features = {{f_model, size}, {f_epochs, epochs}, {f_rank, rank}};
      j.partition = gpu_part;
      j.req_gpus = std::max(1.0, std::floor(u(rng) * 8));
      run = 120.0 * size * epochs * (0.8 + 0.4 * u(rng));
      j.name = t.names.job_names.intern("ft_" + std::to_string(static_cast<int>(size)) + "b_lora");
      if (rank == 64 && size >= 13 && j.req_gpus < 4) {
        j.status = JobStatus::OUT_OF_MEMORY;
        run = 30.0 + 60.0 * u(rng);
      } else {
        j.status = JobStatus::COMPLETED;
      }
    } else {
      j.partition = cpu_part;
      run = user_base[static_cast<size_t>(uid)] * (0.5 + u(rng)) *
            (1.0 + 0.1 * std::log2(static_cast<double>(j.req_procs)));
      j.status = u(rng) < 0.03 ? JobStatus::FAILED : JobStatus::COMPLETED;
      j.name = t.names.job_names.intern("sim" + std::to_string(uid));
    }
    j.run = std::floor(run);
    j.req_time = std::ceil(run * (2.0 + 8.0 * u(rng)) / 3600.0) * 3600.0;
    t.jobs.push_back(j);
  }
  return t;
}

}  // namespace mlprio::model::testing
