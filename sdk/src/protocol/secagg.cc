#include "protocol/secagg.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shoal::protocol {
namespace {

using flatbuffers::FlatBufferBuilder;
namespace sa = privacy::secagg;

template <size_t N>
flatbuffers::Offset<flatbuffers::Vector<uint8_t>> Bytes(FlatBufferBuilder& fbb, const std::array<uint8_t, N>& a) {
  return fbb.CreateVector(a.data(), a.size());
}

template <size_t N>
Status Fixed(const flatbuffers::Vector<uint8_t>* v, std::array<uint8_t, N>& out, const char* what) {
  return CopyFixedBytes(v, out, std::string(what) + " must be " + std::to_string(N) + " bytes");
}

flatbuffers::Offset<wire::SecAggKeys> BuildKeys(FlatBufferBuilder& fbb, const sa::AdvertiseKeys& a) {
  return wire::CreateSecAggKeys(fbb, a.client_id, Bytes(fbb, a.identity), Bytes(fbb, a.c_public), Bytes(fbb, a.s_public),
                                Bytes(fbb, a.signature));
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::SecAggSealed>>> BuildSealed(
    FlatBufferBuilder& fbb, const std::vector<sa::SealedShare>& shares) {
  std::vector<flatbuffers::Offset<wire::SecAggSealed>> out;
  for (const auto& s : shares)
    out.push_back(wire::CreateSecAggSealed(fbb, s.from, s.to, fbb.CreateVector(s.sealed.data(), s.sealed.size())));
  return fbb.CreateVector(out);
}

StatusOr<std::vector<sa::SealedShare>> DecodeSealed(
    const flatbuffers::Vector<flatbuffers::Offset<wire::SecAggSealed>>* v) {
  std::vector<sa::SealedShare> out;
  if (!v) return out;
  if (v->size() > kMaxSecAggClients) return Status::Protocol("too many sealed shares");
  for (const auto* s : *v) {
    if (!s || !s->sealed() || s->sealed()->size() > kMaxSealedShareBytes)
      return Status::Protocol("a sealed share is missing or over 512 bytes");
    out.push_back({s->from(), s->to(), std::vector<uint8_t>(s->sealed()->begin(), s->sealed()->end())});
  }
  return out;
}

StatusOr<std::vector<uint32_t>> Indices(const flatbuffers::Vector<uint32_t>* v) {
  std::vector<uint32_t> out;
  if (!v) return out;
  if (v->size() > kMaxSecAggClients) return Status::Protocol("too many indices");
  out.assign(v->begin(), v->end());
  return out;
}

}  // namespace

Frame EncodeSecAggKeys(const Header& h, const sa::AdvertiseKeys& a) {
  FlatBufferBuilder fbb(512);
  return Finish(fbb, h, wire::Message::SecAggKeys, BuildKeys(fbb, a).Union());
}

Frame EncodeSecAggSetup(const Header& h, const sa::Setup& s) {
  FlatBufferBuilder fbb(256 + 200 * s.roster.size());
  std::vector<flatbuffers::Offset<wire::SecAggKeys>> roster;
  for (const auto& a : s.roster) roster.push_back(BuildKeys(fbb, a));
  auto msg = wire::CreateSecAggSetup(fbb, s.degree, s.threshold, s.graph_seed, s.range, s.length,
                                     fbb.CreateVector(roster), static_cast<uint8_t>(s.bits));
  return Finish(fbb, h, wire::Message::SecAggSetup, msg.Union());
}

Frame EncodeSecAggShareKeys(const Header& h, const sa::ShareKeys& m) {
  FlatBufferBuilder fbb(256 + 300 * m.shares.size());
  auto shares = BuildSealed(fbb, m.shares);
  auto msg = wire::CreateSecAggShareKeys(fbb, m.from, Bytes(fbb, m.self_mask_commitment), shares);
  return Finish(fbb, h, wire::Message::SecAggShareKeys, msg.Union());
}

Frame EncodeSecAggShares(const Header& h, const sa::SharesFor& m) {
  FlatBufferBuilder fbb(256 + 300 * m.shares.size());
  auto shares = BuildSealed(fbb, m.shares);
  return Finish(fbb, h, wire::Message::SecAggShares, wire::CreateSecAggShares(fbb, m.to, shares).Union());
}

Frame EncodeSecAggMasked(const Header& h, uint32_t from, uint64_t clipped, uint64_t num_examples, const ChunkRef& chunk,
                         uint32_t rejected_shares) {
  FlatBufferBuilder fbb(chunk.data.size() + 256);
  auto c = BuildChunk(fbb, chunk);
  return Finish(fbb, h, wire::Message::SecAggMasked,
                wire::CreateSecAggMasked(fbb, from, clipped, num_examples, c, rejected_shares).Union());
}

Frame EncodeSecAggUnmask(const Header& h, const sa::UnmaskRequest& r) {
  FlatBufferBuilder fbb(256 + 4 * (r.survivors.size() + r.dropped.size()));
  auto s = fbb.CreateVector(r.survivors);
  auto d = fbb.CreateVector(r.dropped);
  return Finish(fbb, h, wire::Message::SecAggUnmask, wire::CreateSecAggUnmask(fbb, s, d).Union());
}

Frame EncodeSecAggUnmaskShares(const Header& h, const sa::UnmaskShares& m) {
  FlatBufferBuilder fbb(256 + 100 * m.shares.size());
  std::vector<flatbuffers::Offset<wire::SecAggRevealed>> shares;
  for (const auto& r : m.shares) shares.push_back(wire::CreateSecAggRevealed(fbb, r.owner, r.mask_key, Bytes(fbb, r.y)));
  auto msg = wire::CreateSecAggUnmaskShares(fbb, m.from, fbb.CreateVector(shares));
  return Finish(fbb, h, wire::Message::SecAggUnmaskShares, msg.Union());
}

Frame EncodeSecAggCheckSignature(const Header& h, const sa::CheckSignature& m) {
  FlatBufferBuilder fbb(256);
  auto msg = wire::CreateSecAggCheckSignature(fbb, m.from, Bytes(fbb, m.signature));
  return Finish(fbb, h, wire::Message::SecAggCheckSignature, msg.Union());
}

Frame EncodeSecAggUnmaskProof(const Header& h, const sa::UnmaskProof& m) {
  FlatBufferBuilder fbb(256 + 68 * m.signers.size());
  std::vector<uint8_t> sigs;
  sigs.reserve(64 * m.signatures.size());
  for (const auto& s : m.signatures) sigs.insert(sigs.end(), s.begin(), s.end());
  auto signers = fbb.CreateVector(m.signers);
  auto signatures = fbb.CreateVector(sigs);
  return Finish(fbb, h, wire::Message::SecAggUnmaskProof, wire::CreateSecAggUnmaskProof(fbb, signers, signatures).Union());
}

StatusOr<sa::AdvertiseKeys> DecodeSecAggKeys(const wire::SecAggKeys* k) {
  sa::AdvertiseKeys a;
  a.client_id = k->client_id();
  SHOAL_RETURN_IF_ERROR(Fixed(k->identity(), a.identity, "SecAggKeys.identity"));
  SHOAL_RETURN_IF_ERROR(Fixed(k->c_public(), a.c_public, "SecAggKeys.c_public"));
  SHOAL_RETURN_IF_ERROR(Fixed(k->s_public(), a.s_public, "SecAggKeys.s_public"));
  SHOAL_RETURN_IF_ERROR(Fixed(k->signature(), a.signature, "SecAggKeys.signature"));
  return a;
}

StatusOr<sa::Setup> DecodeSecAggSetup(const wire::SecAggSetup* s, uint64_t session, uint64_t round) {
  sa::Setup st;
  st.session = session;
  st.round = round;
  st.degree = s->degree();
  st.threshold = s->threshold();
  st.graph_seed = s->graph_seed();
  st.range = s->range();
  st.length = s->length();
  st.bits = s->bits();
  if (st.bits != 16 && st.bits != 32) return Status::Protocol("SecAggSetup.bits must be 16 or 32");
  if (!std::isfinite(st.range) || !(st.range > 0)) return Status::Protocol("SecAggSetup.range must be positive");
  if (!s->roster() || s->roster()->size() > kMaxSecAggClients) return Status::Protocol("SecAggSetup.roster missing or too long");
  for (const auto* k : *s->roster()) {
    if (!k) return Status::Protocol("SecAggSetup.roster has an empty entry");
    SHOAL_ASSIGN_OR_RETURN(sa::AdvertiseKeys a, DecodeSecAggKeys(k));
    st.roster.push_back(a);
  }
  return st;
}

StatusOr<sa::ShareKeys> DecodeSecAggShareKeys(const wire::SecAggShareKeys* m) {
  sa::ShareKeys out;
  out.from = m->from();
  SHOAL_RETURN_IF_ERROR(Fixed(m->commitment(), out.self_mask_commitment, "SecAggShareKeys.commitment"));
  SHOAL_ASSIGN_OR_RETURN(out.shares, DecodeSealed(m->shares()));
  return out;
}

StatusOr<sa::SharesFor> DecodeSecAggShares(const wire::SecAggShares* m) {
  sa::SharesFor out;
  out.to = m->to();
  SHOAL_ASSIGN_OR_RETURN(out.shares, DecodeSealed(m->shares()));
  return out;
}

StatusOr<SecAggMaskedChunk> DecodeSecAggMasked(const wire::SecAggMasked* m) {
  SecAggMaskedChunk out{m->from(), m->clipped(), m->num_examples(), ViewChunk(m->payload()), m->rejected_shares()};
  if (!out.chunk.present) return Status::Protocol("SecAggMasked carries no payload");
  return out;
}

StatusOr<sa::UnmaskRequest> DecodeSecAggUnmask(const wire::SecAggUnmask* m) {
  sa::UnmaskRequest out;
  SHOAL_ASSIGN_OR_RETURN(out.survivors, Indices(m->survivors()));
  SHOAL_ASSIGN_OR_RETURN(out.dropped, Indices(m->dropped()));
  return out;
}

StatusOr<sa::UnmaskShares> DecodeSecAggUnmaskShares(const wire::SecAggUnmaskShares* m) {
  sa::UnmaskShares out;
  out.from = m->from();
  if (!m->shares()) return out;
  if (m->shares()->size() > kMaxSecAggClients) return Status::Protocol("too many revealed shares");
  for (const auto* r : *m->shares()) {
    if (!r) return Status::Protocol("SecAggUnmaskShares has an empty entry");
    sa::RevealedShare s;
    s.owner = r->owner();
    s.mask_key = r->mask_key();
    SHOAL_RETURN_IF_ERROR(Fixed(r->y(), s.y, "a revealed share"));
    out.shares.push_back(s);
  }
  return out;
}

StatusOr<sa::CheckSignature> DecodeSecAggCheckSignature(const wire::SecAggCheckSignature* m) {
  sa::CheckSignature out;
  out.from = m->from();
  SHOAL_RETURN_IF_ERROR(Fixed(m->signature(), out.signature, "SecAggCheckSignature.signature"));
  return out;
}

StatusOr<sa::UnmaskProof> DecodeSecAggUnmaskProof(const wire::SecAggUnmaskProof* m) {
  sa::UnmaskProof out;
  SHOAL_ASSIGN_OR_RETURN(out.signers, Indices(m->signers()));
  const size_t bytes = m->signatures() ? m->signatures()->size() : 0;
  if (bytes != 64 * out.signers.size())
    return Status::Protocol("SecAggUnmaskProof has " + std::to_string(bytes) + " signature bytes for " +
                            std::to_string(out.signers.size()) + " signers (64 each)");
  out.signatures.resize(out.signers.size());
  for (size_t i = 0; i < out.signers.size(); ++i)
    std::memcpy(out.signatures[i].data(), m->signatures()->data() + 64 * i, 64);
  return out;
}

std::vector<uint8_t> PackMasked(std::span<const uint32_t> words, uint32_t bits) {
  const size_t width = bits / 8;
  std::vector<uint8_t> out(words.size() * width);
  for (size_t i = 0; i < words.size(); ++i) std::memcpy(out.data() + i * width, &words[i], width);  // little endian
  return out;
}

StatusOr<std::vector<uint32_t>> UnpackMasked(std::span<const uint8_t> bytes, uint32_t bits, size_t count) {
  const size_t width = bits / 8;
  if ((bits != 16 && bits != 32) || bytes.size() != count * width)
    return Status::Protocol("masked update has " + std::to_string(bytes.size()) + " bytes, expected " +
                            std::to_string(count * width));
  std::vector<uint32_t> out(count, 0);
  for (size_t i = 0; i < count; ++i) std::memcpy(&out[i], bytes.data() + i * width, width);
  return out;
}

}  // namespace shoal::protocol
