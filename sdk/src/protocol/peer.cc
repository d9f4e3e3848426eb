#include "protocol/peer.h"

#include <cstring>

#include <algorithm>
#include <cmath>

namespace shoal::protocol {
namespace {

using flatbuffers::FlatBufferBuilder;


flatbuffers::Offset<wire::PeerInfo> BuildPeer(FlatBufferBuilder& fbb, const PeerInfo& p) {
  auto key = fbb.CreateVector(p.sign_key.data(), p.sign_key.size());
  return wire::CreatePeerInfo(fbb, fbb.CreateString(p.name), fbb.CreateString(p.endpoint),
                              fbb.CreateString(p.curve_key), key);
}

void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

double SwarmInfo::Param(const std::string& name, double fallback) const {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  return fallback;
}

Frame EncodeJoin(const Header& h, const PeerInfo& self, bool want_members) {
  FlatBufferBuilder fbb(512);
  auto info = BuildPeer(fbb, self);
  return Finish(fbb, h, wire::Message::Join, wire::CreateJoin(fbb, info, want_members).Union());
}

Frame EncodeMembers(const Header& h, const SwarmInfo& s) {
  FlatBufferBuilder fbb(2048);
  auto task = BuildTask(fbb, s.task);
  std::vector<flatbuffers::Offset<wire::PeerInfo>> members;
  for (const auto& m : s.members) members.push_back(BuildPeer(fbb, m));
  std::vector<flatbuffers::Offset<wire::Metric>> params;
  for (const auto& [k, v] : s.params) params.push_back(wire::CreateMetricDirect(fbb, k.c_str(), v));
  auto msg = wire::CreateMembers(fbb, task, fbb.CreateString(s.mode), fbb.CreateVector(members), s.step_timeout_ms,
                                 s.heartbeat_interval_ms, s.heartbeat_timeout_ms, s.chunk_bytes,
                                 fbb.CreateVector(params), s.steps);
  return Finish(fbb, h, wire::Message::Members, msg.Union());
}

Frame EncodePeerUpdate(const Header& h, const std::string& author, const std::string& base_hash, uint64_t num_examples,
                       double loss, const ChunkRef& chunk, const crypto::Signature& signature) {
  FlatBufferBuilder fbb(chunk.data.size() + 512);
  auto c = BuildChunk(fbb, chunk);
  auto sig = fbb.CreateVector(signature.data(), signature.size());
  auto msg = wire::CreatePeerUpdate(fbb, fbb.CreateString(author), fbb.CreateString(base_hash), num_examples, loss, c, sig);
  return Finish(fbb, h, wire::Message::PeerUpdate, msg.Union());
}

Frame EncodeCommit(const Header& h, const std::vector<std::string>& authors, const std::vector<std::string>& hashes,
                   const std::string& model_hash) {
  FlatBufferBuilder fbb(256 + 100 * authors.size());
  auto a = fbb.CreateVectorOfStrings(authors);
  auto p = fbb.CreateVectorOfStrings(hashes);
  return Finish(fbb, h, wire::Message::Commit, wire::CreateCommit(fbb, a, p, fbb.CreateString(model_hash)).Union());
}

Frame EncodeStateRequest(const Header& h, const std::string& reason) {
  FlatBufferBuilder fbb(128);
  const std::string cut = reason.substr(0, kMaxStringBytes);  // the receiver refuses longer strings
  return Finish(fbb, h, wire::Message::StateRequest, wire::CreateStateRequestDirect(fbb, cut.c_str()).Union());
}

Frame EncodeState(const Header& h, const std::string& model_hash, const std::string& state_hash, const ChunkRef& chunk) {
  FlatBufferBuilder fbb(chunk.data.size() + 512);
  auto c = BuildChunk(fbb, chunk);
  auto msg = wire::CreateState(fbb, fbb.CreateString(model_hash), fbb.CreateString(state_hash), c);
  return Finish(fbb, h, wire::Message::State, msg.Union());
}

Frame EncodeUpdateFetch(const Header& h, const std::string& author) {
  FlatBufferBuilder fbb(128);
  return Finish(fbb, h, wire::Message::UpdateFetch, wire::CreateUpdateFetchDirect(fbb, author.c_str()).Union());
}

Frame EncodeRingSegment(const Header& h, const RingSegment& r, const ChunkRef& chunk) {
  FlatBufferBuilder fbb(chunk.data.size() + 512);
  auto c = BuildChunk(fbb, chunk);
  auto sig = fbb.CreateVector(r.signature.data(), r.signature.size());
  auto msg = wire::CreateRingSegment(fbb, fbb.CreateString(r.ring_hash), r.attempt, r.phase, r.hop, r.segment,
                                     r.contributors, r.weight, r.loss, c, r.piece, sig);
  return Finish(fbb, h, wire::Message::RingSegment, msg.Union());
}

StatusOr<PeerInfo> DecodePeerInfo(const wire::PeerInfo* p) {
  if (!p) return Status::Protocol("member description is missing");
  SHOAL_RETURN_IF_ERROR(CheckString(p->name(), "member name", true));
  SHOAL_RETURN_IF_ERROR(CheckString(p->endpoint(), "member endpoint", true));
  SHOAL_RETURN_IF_ERROR(CheckString(p->curve_key(), "member curve key", false));
  PeerInfo out;
  out.name = p->name()->str();
  out.endpoint = p->endpoint()->str();
  out.curve_key = StringOrEmpty(p->curve_key());
  if (!ValidName(out.name)) return Status::Protocol("member name must be 1-64 printable characters");
  if (out.endpoint.rfind("tcp://", 0) != 0 && out.endpoint.rfind("ipc://", 0) != 0)
    return Status::Protocol("member endpoint '" + out.endpoint + "' is not tcp:// or ipc://");
  if (!out.curve_key.empty() && out.curve_key.size() != 40) return Status::Protocol("member curve key is not 40 Z85 characters");
  SHOAL_RETURN_IF_ERROR(CopyFixedBytes(p->sign_key(), out.sign_key, "member signing key must be 32 bytes"));
  return out;
}

StatusOr<SwarmInfo> DecodeMembers(const wire::Members* m) {
  SwarmInfo out;
  SHOAL_ASSIGN_OR_RETURN(out.task, DecodeTask(m->task()));
  SHOAL_RETURN_IF_ERROR(CheckString(m->mode(), "swarm mode", true));
  out.mode = m->mode()->str();
  if (out.mode != "allgather" && out.mode != "allreduce" && out.mode != "diloco" && out.mode != "gossip")
    return Status::Protocol("unknown swarm mode '" + out.mode + "'");
  if (!m->members() || m->members()->size() == 0 || m->members()->size() > kMaxMembers)
    return Status::Protocol("member list must hold 1-4096 members");
  for (const auto* p : *m->members()) {
    SHOAL_ASSIGN_OR_RETURN(PeerInfo info, DecodePeerInfo(p));
    out.members.push_back(std::move(info));
  }
  out.step_timeout_ms = m->step_timeout_ms();
  out.heartbeat_interval_ms = m->heartbeat_interval_ms();
  out.heartbeat_timeout_ms = m->heartbeat_timeout_ms();
  out.chunk_bytes = m->chunk_bytes();
  if (out.step_timeout_ms == 0 || out.heartbeat_interval_ms == 0 || out.heartbeat_timeout_ms <= out.heartbeat_interval_ms ||
      out.chunk_bytes < 1024)
    return Status::Protocol("swarm timing or chunk settings are inconsistent");
  if (m->params()) {
    if (m->params()->size() > kMaxSwarmParams) return Status::Protocol("too many swarm parameters");
    for (const auto* p : *m->params()) {
      if (!p || !p->name() || p->name()->size() > kMaxMetricName || !std::isfinite(p->value()))
        return Status::Protocol("bad swarm parameter");
      out.params.emplace_back(p->name()->str(), p->value());
    }
  }
  out.steps = m->steps();
  return out;
}

StatusOr<Join> DecodeJoin(const wire::Join* j) {
  SHOAL_ASSIGN_OR_RETURN(PeerInfo self, DecodePeerInfo(j->self()));
  return Join{std::move(self), j->want_members()};
}

StatusOr<PeerUpdate> DecodePeerUpdate(const wire::PeerUpdate* u) {
  PeerUpdate out;
  out.author = StringOrEmpty(u->author());
  if (!ValidName(out.author)) return Status::Protocol("update fields out of range: the author is not a valid name");
  if (u->num_examples() == 0 || u->num_examples() > kMaxExamples)
    return Status::Protocol("update fields out of range: num_examples " + std::to_string(u->num_examples()) +
                            " is not in [1, 2^40]");
  if (!std::isfinite(u->loss())) return Status::Protocol("update fields out of range: the loss is not finite");
  SHOAL_RETURN_IF_ERROR(
      CopyFixedBytes(u->signature(), out.signature, "update fields out of range: the signature is not 64 bytes"));
  if (!u->base_hash() || u->base_hash()->size() != kHashHexChars)
    return Status::Protocol("update fields out of range: the base hash is not 64 characters");
  out.base_hash = u->base_hash()->str();
  out.num_examples = u->num_examples();
  out.loss = u->loss();
  out.chunk = ViewChunk(u->payload());
  return out;
}

StatusOr<Commit> DecodeCommit(const wire::Commit* c) {
  if (!c->authors() || !c->payload_hashes() || c->authors()->size() != c->payload_hashes()->size() ||
      c->authors()->size() > kMaxMembers)
    return Status::Protocol("commit must list as many payload hashes as authors (at most 4096)");
  SHOAL_RETURN_IF_ERROR(CheckString(c->model_hash(), "commit model hash", true));
  Commit out;
  out.model_hash = c->model_hash()->str();
  for (size_t i = 0; i < c->authors()->size(); ++i) {
    const std::string author = StringOrEmpty(c->authors()->Get(i));
    const auto* hash = c->payload_hashes()->Get(i);
    if (!ValidName(author)) return Status::Protocol("bad commit entry " + std::to_string(i) + ": not a valid author name");
    if (!hash || hash->size() != kHashHexChars)
      return Status::Protocol("bad commit entry " + std::to_string(i) + ": the payload hash is not 64 characters");
    out.entries.emplace_back(author, hash->str());
  }
  return out;
}

StatusOr<StateRequest> DecodeStateRequest(const wire::StateRequest* r) {
  SHOAL_RETURN_IF_ERROR(CheckString(r->reason(), "state request reason", false));
  return StateRequest{StringOrEmpty(r->reason())};
}

StatusOr<State> DecodeState(const wire::State* s) {
  SHOAL_RETURN_IF_ERROR(CheckString(s->model_hash(), "state model hash", false));
  SHOAL_RETURN_IF_ERROR(CheckString(s->state_hash(), "state hash", false));
  return State{StringOrEmpty(s->model_hash()), StringOrEmpty(s->state_hash()), ViewChunk(s->payload())};
}

StatusOr<UpdateFetch> DecodeUpdateFetch(const wire::UpdateFetch* f) {
  UpdateFetch out{StringOrEmpty(f->author())};
  if (!ValidName(out.author)) return Status::Protocol("update fetch names no valid author");
  return out;
}

StatusOr<RingSegment> DecodeRingSegment(const wire::RingSegment* r) {
  RingSegment out;
  if (!r->ring_hash() || r->ring_hash()->size() != kHashHexChars)
    return Status::Protocol("ring segment out of range: the ring hash is not 64 characters");
  if (r->phase() > 1) return Status::Protocol("ring segment out of range: phase " + std::to_string(r->phase()) + " is not 0 or 1");
  if (r->hop() >= kMaxMembers || r->segment() >= kMaxMembers || r->contributors() == 0 || r->contributors() > kMaxMembers)
    return Status::Protocol("ring segment out of range: hop, segment or contributors exceed the member limit");
  constexpr double kMaxWeight = static_cast<double>(kMaxMembers) * static_cast<double>(kMaxExamples);
  if (!std::isfinite(r->weight()) || r->weight() < 0 || r->weight() > kMaxWeight || !std::isfinite(r->loss()))
    return Status::Protocol("ring segment out of range: the weight or loss is not finite or out of range");
  out.ring_hash = r->ring_hash()->str();
  out.attempt = r->attempt();
  out.phase = r->phase();
  out.hop = r->hop();
  out.segment = r->segment();
  out.contributors = r->contributors();
  out.weight = r->weight();
  out.loss = r->loss();
  if (r->piece() >= kMaxRingPieces)
    return Status::Protocol("ring segment out of range: piece " + std::to_string(r->piece()) + " exceeds the piece limit");
  out.piece = r->piece();
  out.chunk = ViewChunk(r->payload());
  SHOAL_RETURN_IF_ERROR(
      CopyFixedBytes(r->signature(), out.signature, "ring segment out of range: the signature is not 64 bytes"));
  return out;
}

namespace {

// What both signatures start with: a domain tag (its terminating 0 separates it), the swarm and
// step, then two names, each ended by a 0.
std::vector<uint8_t> SignedHead(const char* tag, size_t tag_size, uint64_t swarm, uint64_t step, const std::string& name,
                                const std::string& hash) {
  std::vector<uint8_t> out(tag, tag + tag_size);
  PutU64(out, swarm);
  PutU64(out, step);
  for (const std::string* s : {&name, &hash}) {
    out.insert(out.end(), s->begin(), s->end());
    out.push_back(0);
  }
  return out;
}

void PutF64Bits(std::vector<uint8_t>& out, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  PutU64(out, bits);
}

}  // namespace

std::vector<uint8_t> SignedRingHopBytes(uint64_t swarm, uint64_t step, const std::string& sender,
                                        const RingSegment& r, const std::array<uint8_t, 32>& digest) {
  static constexpr char kTag[] = "shoal-peer-ring-hop-v1";
  std::vector<uint8_t> out = SignedHead(kTag, sizeof kTag, swarm, step, sender, r.ring_hash);
  for (uint64_t v : {uint64_t{r.attempt}, uint64_t{r.phase}, uint64_t{r.hop}, uint64_t{r.segment}, uint64_t{r.piece},
                     uint64_t{r.contributors}})
    PutU64(out, v);
  PutF64Bits(out, r.weight);
  PutF64Bits(out, r.loss);
  out.insert(out.end(), digest.begin(), digest.end());
  return out;
}

std::vector<uint8_t> SignedUpdateBytes(uint64_t swarm, uint64_t step, const std::string& author,
                                       const std::string& base_hash, uint64_t num_examples, double loss,
                                       const std::array<uint8_t, 32>& digest) {
  static constexpr char kTag[] = "shoal-peer-update-v2";
  std::vector<uint8_t> out = SignedHead(kTag, sizeof kTag, swarm, step, author, base_hash);
  PutU64(out, num_examples);
  PutF64Bits(out, loss);
  out.insert(out.end(), digest.begin(), digest.end());
  return out;
}

}  // namespace shoal::protocol
