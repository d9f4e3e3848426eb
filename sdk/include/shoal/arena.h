// ParameterArena: a model's parameters (or gradients, or optimizer state) in ONE contiguous
// float buffer; tensors are named views (name, shape, offset). Serialization, codecs,
// aggregation and checkpoints work on whole arenas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal {

// The name and shape of one tensor. The layout of a model is a vector of these, in order.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
  bool operator==(const TensorSpec&) const = default;
};

// Total number of floats of a layout.
size_t LayoutSize(const std::vector<TensorSpec>& layout);
// "fc0.weight[64,32] fc0.bias[32] ..." for error messages.
std::string LayoutToString(const std::vector<TensorSpec>& layout);

class ParameterArena {
 public:
  struct View {
    TensorSpec spec;
    size_t offset = 0;  // in floats, from the start of the arena
    size_t size = 0;    // numel
  };

  ParameterArena() = default;
  // A zero-filled arena with this layout. Tensors are packed without padding, in order.
  explicit ParameterArena(const std::vector<TensorSpec>& layout);

  // Appends a zero-filled tensor; returns its index. Invalidates spans.
  size_t Add(std::string name, std::vector<int64_t> shape);

  size_t size() const { return data_.size(); }
  size_t num_tensors() const { return views_.size(); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::span<float> span() { return data_; }
  std::span<const float> span() const { return data_; }
  std::span<float> tensor(size_t i) { return {data_.data() + views_[i].offset, views_[i].size}; }
  std::span<const float> tensor(size_t i) const { return {data_.data() + views_[i].offset, views_[i].size}; }
  const View& view(size_t i) const { return views_[i]; }
  const std::vector<View>& views() const { return views_; }
  // Index of the tensor called `name`, or NotFound.
  StatusOr<size_t> Find(std::string_view name) const;

  std::vector<TensorSpec> Layout() const;
  bool SameLayout(const ParameterArena& other) const;
  void Fill(float v);
  // Copies `values` into the arena; InvalidArgument when the sizes differ.
  Status Assign(std::span<const float> values);

 private:
  std::vector<View> views_;
  std::vector<float> data_;
};

}  // namespace shoal
