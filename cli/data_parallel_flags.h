// The built-in trainer's flags shared by the CLIs that train with it (shoal-client, shoal-peer):
// the data-parallel ones (--gpus N, --ranks N, --bucket-mb M into BuiltinTrainerOptions,
// nn/data_parallel.h) and --partition.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include <unistd.h>

#include "shoal/data.h"
#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal::cli {

struct DataParallelFlags {
  uint32_t gpus = 0;
  double bucket_mb = 25;
};

inline boost::program_options::options_description DataParallelOptions(BuiltinTrainerOptions& to, DataParallelFlags& f) {
  namespace po = boost::program_options;
  po::options_description d("Data parallelism (one site, several devices; still one update a round or step)");
  d.add_options()
      ("gpus", po::value(&f.gpus),
       "train data-parallel on N GPUs (cuda:0..N-1, or from --device cuda:K on): each step's minibatch split among "
       "them, NCCL all-reducing their gradients")
      ("ranks", po::value(&to.ranks)->default_value(to.ranks), "data-parallel ranks on --device: threads on the cpu, one GPU each on cuda")
      ("bucket-mb", po::value(&f.bucket_mb)->default_value(f.bucket_mb),
       "with several ranks: all-reduce the gradient in buckets of this many MiB during the backward pass (0 = all of it after)");
  return d;
}

// --gpus N: N ranks, one GPU each (device auto becomes cuda); not with --ranks or --device cpu.
inline Status ApplyDataParallelFlags(const boost::program_options::variables_map& vm, const DataParallelFlags& f,
                                     BuiltinTrainerOptions& to) {
  if (vm.count("gpus")) {
    if (!vm["ranks"].defaulted() || f.gpus == 0 || to.device == "cpu")
      return Status::InvalidArgument("--gpus N (N >= 1) takes GPUs: not with --ranks or --device cpu");
    to.ranks = f.gpus;
    if (to.device == "auto") to.device = "cuda";
  }
  if (to.ranks == 0) return Status::InvalidArgument("--ranks must be at least 1");
  if (!(f.bucket_mb >= 0 && f.bucket_mb <= 4096)) return Status::InvalidArgument("--bucket-mb must be in [0, 4096]");
  to.bucket_bytes = static_cast<size_t>(f.bucket_mb * (1 << 20));
  return Status::Ok();
}

// --partition i/n into the trainer's part; and, when *name is empty, the name HOST-partI-of-N
// (shoal-client's and shoal-peer's default).
inline Status ApplyPartitionFlag(const std::string& partition, BuiltinTrainerOptions& to, std::string* name) {
  auto part = data::ParsePartition(partition);
  if (!part.ok()) return Status::InvalidArgument("--partition: " + part.status().message());
  to.partition_index = part->index;
  to.partition_count = part->count;
  if (name->empty()) {
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    *name = std::string(host) + "-part" + std::to_string(part->index) + "-of-" + std::to_string(part->count);
  }
  return Status::Ok();
}

}  // namespace shoal::cli
