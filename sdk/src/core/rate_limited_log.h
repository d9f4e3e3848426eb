// Logging what hostile or broken peers cause without letting them fill the disk: the first
// few occurrences in full, then one line in every 1000 (each line carries the running count).
#pragma once

#include <cstdint>

namespace shoal {

// Whether occurrence number `n` (1-based) of a repeated event is logged.
inline bool ShouldLogOccurrence(uint64_t n) { return n <= 10 || n % 1000 == 0; }

}  // namespace shoal
