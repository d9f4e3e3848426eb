// The C ABI's datasets (shoal_dataset_*): a training part of one of Shoal's datasets, for
// applications that train themselves.
#include <memory>
#include <string>

#include "capi/capi.h"
#include "shoal/data.h"

using shoal::StatusCode;
using namespace shoal::capi;

struct shoal_dataset {
  shoal::data::Dataset data;
};

extern "C" {

shoal_status shoal_dataset_load(const char* name, const char* data_dir, uint64_t seed, double test_fraction,
                                uint32_t index, uint32_t count, const char* scheme, shoal_dataset** dataset) {
  return Guard([&]() -> shoal_status {
    if (!dataset) return Fail(StatusCode::kInvalidArgument, "shoal_dataset_load: dataset (the out pointer) is NULL");
    *dataset = nullptr;
    if (!name) return Fail(StatusCode::kInvalidArgument, "shoal_dataset_load: name is NULL");
    if (count == 0 || index >= count)
      return Fail(StatusCode::kInvalidArgument,
                  "part " + std::to_string(index) + " of " + std::to_string(count) + ": index must be below count");
    InitLogRouting();
    const std::string dir = data_dir ? std::string(data_dir) : shoal::data::DefaultDataDir();
    auto full = shoal::data::LoadDataset(name, dir);
    if (!full.ok()) return Fail(full.status());
    if (shoal::Status st = shoal::data::RequireFeatures(*full, "shoal_dataset_load"); !st.ok()) return Fail(st);
    auto part = shoal::data::TrainingPart(*full, test_fraction, seed, {index, count}, Str(scheme, "iid"));
    if (!part.ok()) return Fail(part.status());
    auto d = std::make_unique<shoal_dataset>();
    d->data = std::move(*part);
    *dataset = d.release();
    return SHOAL_OK;
  });
}

size_t shoal_dataset_rows(const shoal_dataset* d) { return d ? static_cast<size_t>(d->data.n) : 0; }
size_t shoal_dataset_dim(const shoal_dataset* d) { return d ? static_cast<size_t>(d->data.dim) : 0; }
uint32_t shoal_dataset_classes(const shoal_dataset* d) { return d ? static_cast<uint32_t>(d->data.num_classes) : 0; }
const float* shoal_dataset_features(const shoal_dataset* d) { return d ? d->data.x.data() : nullptr; }
const int32_t* shoal_dataset_labels(const shoal_dataset* d) { return d ? d->data.y.data() : nullptr; }
void shoal_dataset_destroy(shoal_dataset* d) { delete d; }

}  // extern "C"
