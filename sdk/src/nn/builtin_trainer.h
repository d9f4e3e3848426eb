// Internal entry to the built-in trainer (the public one is MakeBuiltinTrainer in
// shoal/trainer.h): a trainer whose local data is given, already split and partitioned, so
// that many trainers in one process (shoal-sim) share one copy of the dataset. Configure
// then skips the split and partition; options.dataset, data_dir and partition_* are unused.
#pragma once

#include <memory>

#include "shoal/data.h"
#include "shoal/trainer.h"

namespace shoal::nn {

StatusOr<std::unique_ptr<Trainer>> MakeBuiltinTrainerOnPart(const BuiltinTrainerOptions& options,
                                                           std::shared_ptr<const data::Dataset> part);

}  // namespace shoal::nn
