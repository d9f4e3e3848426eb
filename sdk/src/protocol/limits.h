// Every bound the protocol puts on what a peer may send, stated once. protocol/ checks frames
// against them; the runtimes size their buffers and validate updates with the same numbers.
// Changing one changes what this version accepts on the wire: say so in docs/PROTOCOL.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shoal::protocol {

// Default payload chunk: 16 MiB.
inline constexpr size_t kDefaultChunkBytes = size_t{16} << 20;
// Room in a frame for everything besides chunk data (header, metrics, task description).
inline constexpr size_t kFrameOverheadBytes = size_t{256} << 10;
inline constexpr size_t MaxFrameBytes(size_t chunk_bytes) { return chunk_bytes + kFrameOverheadBytes; }
// Largest model the protocol accepts in one payload: 2^34 bytes (4 Gi floats).
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 34;
// Largest codec payload for a model of `n` floats: no codec output exceeds twice the dense
// size (indices + fp32 values at ratio 1), plus 64 KiB of headers.
inline constexpr uint64_t MaxCodecPayloadBytes(uint64_t n) { return 2 * n * sizeof(float) + (uint64_t{64} << 10); }
// An update's example count (its FedAvg weight) lies in [1, kMaxExamples]; the exact
// accumulator (aggregate/exact_sum.h) relies on this bound.
inline constexpr uint64_t kMaxExamples = uint64_t{1} << 40;
// The committed rounds a Welcome lists for its client (its newest updates that a saved commit
// holds). A client settles its updates at every task, so the ones it still has to settle
// after a restart are the last few it sent; 64 is far above that and keeps a Welcome small.
inline constexpr size_t kMaxCommittedRounds = 64;

// FlatBuffers Verifier limits.
inline constexpr uint32_t kMaxDepth = 16;
inline constexpr uint32_t kMaxTables = 1u << 16;
// Task description.
inline constexpr size_t kMaxLayoutTensors = 4096;
inline constexpr size_t kMaxTensorRank = 8;
// Features a task may standardize (TaskConfig.feature_mean / feature_scale).
inline constexpr size_t kMaxFeatures = size_t{1} << 20;
// Free-form fields.
inline constexpr size_t kMaxMetrics = 64;
inline constexpr size_t kMaxMetricName = 64;  // also a swarm parameter's name
inline constexpr size_t kMaxStringBytes = 4096;
inline constexpr size_t kMaxClientName = 64;  // printable ASCII, no spaces
// Peers.
inline constexpr size_t kMaxPeerName = kMaxClientName;  // the same rules as client names
inline constexpr size_t kMaxMembers = 4096;             // also the entries of a Commit
// A ring all-reduce's segments travel in pieces of this many values (RingSegment.piece), so
// that a member reduces and forwards one piece while the next is on the wire.
inline constexpr size_t kRingPieceValues = size_t{1} << 16;
inline constexpr uint32_t kMaxRingPieces = 1u << 20;    // 2^36 values per segment
inline constexpr size_t kMaxSwarmParams = 64;
inline constexpr size_t kHashHexChars = 64;             // a BLAKE2b-256 hash in hex (base and payload hashes)
// Frames a joining peer keeps while it waits for the member list (members' updates that
// arrive first), by count and by bytes: 1,024 frames of up to a chunk each would be 16 GiB.
inline constexpr size_t kMaxEarlyFrames = 1024;
inline constexpr uint64_t kMaxEarlyBytes = uint64_t{64} << 20;
// The ring hops one member may have a peer hold for it at once, for a model of `n` floats:
// its hops of two whole rings at the largest codec output (a ring passes each member about
// twice the model per attempt, and a change of view overlaps at most the next ring). An
// honest predecessor cannot run further ahead than the ring lets it, well below this; a
// member making up rings, hops and pieces is held to it.
inline constexpr uint64_t MaxRingBytesPerSender(uint64_t n) { return 4 * MaxCodecPayloadBytes(n); }

}  // namespace shoal::protocol
