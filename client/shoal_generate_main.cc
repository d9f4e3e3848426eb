// shoal-generate: samples text from a language-model checkpoint (a gpt trained by
// shoal-aggregator or shoal-peer on byte tokens), streaming it to stdout.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/checkpoint.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "nn/sampler.h"

namespace po = boost::program_options;

namespace {
constexpr const char* kProgram = "shoal-generate";
}  // namespace

int main(int argc, char** argv) {
  std::string checkpoint, prompt, device, log_level;
  shoal::nn::SampleOptions sample;
  po::options_description opts(
      "Usage: shoal-generate --checkpoint FILE [--prompt TEXT] [options]\n\n"
      "Continues TEXT (bytes) with tokens sampled from the checkpoint's gpt model and writes\n"
      "the prompt and its continuation to stdout as they are drawn.\n\nOptions");
  opts.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("log-level", po::value(&log_level)->default_value("warn"), "trace, debug, info, warn, error or off")
      ("checkpoint", po::value(&checkpoint), "a checkpoint of a gpt model (--checkpoint of shoal-aggregator)")
      ("prompt", po::value(&prompt)->default_value("\n"), "the text to continue")
      ("tokens", po::value(&sample.tokens)->default_value(sample.tokens), "tokens (bytes) to generate")
      ("temperature", po::value(&sample.temperature)->default_value(sample.temperature), "sampling temperature (0: greedy)")
      ("top-k", po::value(&sample.top_k)->default_value(sample.top_k), "sample among the K likeliest tokens (0: all)")
      ("seed", po::value(&sample.seed)->default_value(0), "random seed of the draws")
      ("device", po::value(&device)->default_value("cpu"), "auto, cpu or cuda[:N]");
  po::variables_map vm;
  if (auto code = shoal::cli::ParseOptions(argc, argv, opts, vm, kProgram)) return *code;
  if (auto st = shoal::cli::InitLogging(log_level, "generate"); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (checkpoint.empty()) return shoal::cli::Fail(kProgram, "--checkpoint FILE is required (see --help)", 2);

  auto ckpt = shoal::ReadCheckpoint(checkpoint);
  if (!ckpt.ok()) return shoal::cli::Fail(kProgram, ckpt.status().message());
  auto backend = shoal::MakeBackend(device);
  if (!backend.ok()) return shoal::cli::Fail(kProgram, backend.status().message());
  auto gpt = shoal::nn::LoadGpt(*ckpt, backend->get());
  if (!gpt.ok()) return shoal::cli::Fail(kProgram, checkpoint + ": " + gpt.status().message(), 2);
  std::vector<int32_t> bytes;
  for (unsigned char c : prompt) bytes.push_back(c);
  // The prompt goes out with the first drawn token (after Sample has checked its settings).
  bool echoed = false;
  auto echo = [&] {
    if (!echoed) std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    echoed = true;
  };
  auto out = shoal::nn::Sample(*gpt->model, gpt->params.get(), bytes, sample, [&](int32_t id) {
    echo();
    std::fputc(id & 0xff, stdout);
    std::fflush(stdout);
  });
  if (!out.ok()) {
    if (echoed) std::fputc('\n', stdout);
    return shoal::cli::Fail(kProgram, out.status().message(), 2);
  }
  echo();
  std::fputc('\n', stdout);
  return 0;
}
