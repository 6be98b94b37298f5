// Every public header of fsdp_profiler compiles on its own (each is included first in a
// separate translation unit would be stricter; here each include must stand alone in order).
#include "mlprio/fsdp/settings.hpp"
#include "mlprio/fsdp/stats.hpp"
#include "mlprio/fsdp/device.hpp"
#include "mlprio/fsdp/allocator.hpp"
#include "mlprio/fsdp/snapshot.hpp"
#include "mlprio/fsdp/model_shapes.hpp"
#include "mlprio/fsdp/step_generator.hpp"
#include "mlprio/fsdp/sweep.hpp"
