#include "shoal/arena.h"

#include <algorithm>
#include <cstring>

namespace shoal {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t LayoutSize(const std::vector<TensorSpec>& layout) {
  size_t n = 0;
  for (const auto& t : layout) n += static_cast<size_t>(t.numel());
  return n;
}

std::string LayoutToString(const std::vector<TensorSpec>& layout) {
  std::string s;
  for (const auto& t : layout) {
    if (!s.empty()) s += ' ';
    s += t.name + '[';
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(t.shape[i]);
    }
    s += ']';
  }
  return s;
}

ParameterArena::ParameterArena(const std::vector<TensorSpec>& layout) {
  views_.reserve(layout.size());
  size_t offset = 0;
  for (const auto& t : layout) {
    size_t n = static_cast<size_t>(t.numel());
    views_.push_back({t, offset, n});
    offset += n;
  }
  data_.assign(offset, 0.0f);
}

size_t ParameterArena::Add(std::string name, std::vector<int64_t> shape) {
  TensorSpec spec{std::move(name), std::move(shape)};
  size_t n = static_cast<size_t>(spec.numel());
  views_.push_back({std::move(spec), data_.size(), n});
  data_.resize(data_.size() + n, 0.0f);
  return views_.size() - 1;
}

StatusOr<size_t> ParameterArena::Find(std::string_view name) const {
  for (size_t i = 0; i < views_.size(); ++i)
    if (views_[i].spec.name == name) return i;
  return Status::NotFound("no tensor named '" + std::string(name) + "' in the arena");
}

std::vector<TensorSpec> ParameterArena::Layout() const {
  std::vector<TensorSpec> out;
  out.reserve(views_.size());
  for (const auto& v : views_) out.push_back(v.spec);
  return out;
}

bool ParameterArena::SameLayout(const ParameterArena& other) const {
  if (views_.size() != other.views_.size()) return false;
  for (size_t i = 0; i < views_.size(); ++i)
    if (!(views_[i].spec == other.views_[i].spec)) return false;
  return true;
}

void ParameterArena::Fill(float v) { std::fill(data_.begin(), data_.end(), v); }

Status ParameterArena::Assign(std::span<const float> values) {
  if (values.size() != data_.size())
    return Status::InvalidArgument("arena holds " + std::to_string(data_.size()) + " floats, got " +
                                   std::to_string(values.size()));
  if (!values.empty()) std::memcpy(data_.data(), values.data(), values.size() * sizeof(float));
  return Status::Ok();
}

}  // namespace shoal
