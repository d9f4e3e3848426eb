// Secure aggregation's messages (schemas/shoal.fbs, SecAgg*): encoders from, and checked
// decoders to, the typed values of privacy/secagg/protocol.h. Decoding checks every length
// (keys 32 bytes, signatures 64 (a proof's: 64 per signer), shares 64, sealed shares at most 512 bytes) and count (roster
// and share lists at most kMaxSecAggClients); whether a message fits the round's stage and
// roster is the state machines' business.
#pragma once

#include "protocol/chunks.h"
#include "privacy/secagg/protocol.h"

namespace shoal::protocol {

inline constexpr size_t kMaxSecAggClients = 1u << 16;
inline constexpr size_t kMaxSealedShareBytes = 512;

// The masked update as received: its header fields and one chunk of its words.
struct SecAggMaskedChunk {
  uint32_t from = 0;
  uint64_t clipped = 0;
  uint64_t num_examples = 0;
  ChunkView chunk;
  uint32_t rejected_shares = 0;
};

Frame EncodeSecAggKeys(const Header& h, const privacy::secagg::AdvertiseKeys& a);
Frame EncodeSecAggSetup(const Header& h, const privacy::secagg::Setup& s);
Frame EncodeSecAggShareKeys(const Header& h, const privacy::secagg::ShareKeys& m);
Frame EncodeSecAggShares(const Header& h, const privacy::secagg::SharesFor& m);
Frame EncodeSecAggMasked(const Header& h, uint32_t from, uint64_t clipped, uint64_t num_examples, const ChunkRef& chunk,
                         uint32_t rejected_shares = 0);
Frame EncodeSecAggUnmask(const Header& h, const privacy::secagg::UnmaskRequest& r);
Frame EncodeSecAggUnmaskShares(const Header& h, const privacy::secagg::UnmaskShares& m);
Frame EncodeSecAggCheckSignature(const Header& h, const privacy::secagg::CheckSignature& m);
Frame EncodeSecAggUnmaskProof(const Header& h, const privacy::secagg::UnmaskProof& m);

StatusOr<privacy::secagg::AdvertiseKeys> DecodeSecAggKeys(const wire::SecAggKeys* k);
StatusOr<privacy::secagg::Setup> DecodeSecAggSetup(const wire::SecAggSetup* s, uint64_t session, uint64_t round);
StatusOr<privacy::secagg::ShareKeys> DecodeSecAggShareKeys(const wire::SecAggShareKeys* m);
StatusOr<privacy::secagg::SharesFor> DecodeSecAggShares(const wire::SecAggShares* m);
StatusOr<SecAggMaskedChunk> DecodeSecAggMasked(const wire::SecAggMasked* m);
StatusOr<privacy::secagg::UnmaskRequest> DecodeSecAggUnmask(const wire::SecAggUnmask* m);
StatusOr<privacy::secagg::UnmaskShares> DecodeSecAggUnmaskShares(const wire::SecAggUnmaskShares* m);
StatusOr<privacy::secagg::CheckSignature> DecodeSecAggCheckSignature(const wire::SecAggCheckSignature* m);
StatusOr<privacy::secagg::UnmaskProof> DecodeSecAggUnmaskProof(const wire::SecAggUnmaskProof* m);

// Masked words <-> payload bytes: little endian, 4 bytes each, or the low 2 bytes with 16 bits.
std::vector<uint8_t> PackMasked(std::span<const uint32_t> words, uint32_t bits);
StatusOr<std::vector<uint32_t>> UnpackMasked(std::span<const uint8_t> bytes, uint32_t bits, size_t count);

}  // namespace shoal::protocol
