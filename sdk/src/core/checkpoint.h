// Checkpoints: the global model and whatever else a run needs to resume (strategy state,
// metadata) in one file, written atomically and verified with a CRC on read.
//
// File format (version 1), all integers little-endian:
//
//   magic        8 bytes   "SHOALCKP"
//   version      u32       kCheckpointVersion
//   round        u64
//   model_spec   string
//   num_tensors  u32
//     name       string                      } per tensor, in arena order
//     ndims      u32, then ndims x i64 dims  }
//   num_floats   u64       must equal the layout's size
//   data         num_floats x f32 (IEEE 754 bits)
//   num_sections u32
//     name       string                      } per section, in order
//     blob       u64 length + bytes          }
//   crc32        u32       zlib crc32 of every byte before it (magic included)
//
// where `string` is a u32 length followed by that many bytes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shoal/arena.h"
#include "shoal/status.h"

namespace shoal {

inline constexpr uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  uint64_t round = 0;       // rounds completed when the checkpoint was taken
  std::string model_spec;   // e.g. "mlp:64,32": how to rebuild a model of this layout
  ParameterArena params;    // the global model
  // Named opaque blobs (strategy state, metadata), kept in order. Names need not be unique.
  std::vector<std::pair<std::string, std::string>> sections;
};

// Writes `ckpt` to `path` atomically: the bytes go to "<path>.tmp", which is fsynced and renamed
// over `path`, and then the directory is fsynced, so a crash leaves either the old file or the
// new one, never a mix. Creates missing parent directories. On failure the temporary file is
// removed, any previous checkpoint at `path` is untouched, and the Status (IoError, or
// InvalidArgument for a string longer than 4 GiB) names the path.
Status WriteCheckpoint(const std::string& path, const Checkpoint& ckpt);

// Reads a checkpoint written by WriteCheckpoint. NotFound when `path` does not exist;
// Corruption, naming the path, for a wrong magic, an unsupported version, a CRC mismatch
// (a flipped byte, a truncated file) or lengths that do not fit the file; IoError when the
// OS fails. Never allocates more than the file's size (plus the arena it describes, which the
// file's size bounds).
StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

}  // namespace shoal
