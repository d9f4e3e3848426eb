// GptSpec: the spec of the GPT-style decoder (nn/gpt.h), as named by `--model`:
//
//   "gpt"                                   layers=3, dim=96, heads=4, ctx=64 (the CPU-scale model)
//   "gpt:layers=L,dim=D,heads=H,ctx=T"      any subset, in any order; the rest default as above
//   "...,ckpt=1"                            activation checkpointing: keep only each block's
//                                           input and recompute the block in the backward pass
//
// The MLP is 4*dim wide; the vocabulary comes from the data (ModelInputs::vocab_size). Ranges:
// layers 1..64, dim 1..8192 and a multiple of heads, heads 1..256, ctx 1..4096. The canonical
// form lists all four ("gpt:layers=3,dim=96,heads=4,ctx=64", plus ",ckpt=1" when set) and
// parses back to an equal spec.
#pragma once

#include <string>

#include "shoal/status.h"

namespace shoal::nn {

struct GptSpec {
  int layers = 3;
  int dim = 96;
  int heads = 4;
  int ctx = 64;
  bool checkpoint = false;
  int head_dim() const { return dim / heads; }
  bool operator==(const GptSpec&) const = default;
};

// Parses "gpt[:key=value,...]"; InvalidArgument quoting the spec and saying what is expected.
StatusOr<GptSpec> ParseGptSpec(const std::string& text);
std::string GptSpecToString(const GptSpec& spec);

}  // namespace shoal::nn
