// Shared by the libFuzzer harnesses (tests/fuzz/*_fuzz.cc). Each harness defines
// LLVMFuzzerTestOneInput, which either libFuzzer drives (scripts/fuzz: clang,
// -DSHOAL_FUZZ=ON) or replay_main.cc feeds with every file of the harness's committed corpus
// (the ctest fuzz_replay_<name>, under every compiler). A harness returns 0 for every input and
// aborts (via FUZZ_CHECK) when an invariant of the decoded result fails; memory errors are the
// sanitizers' to find.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
