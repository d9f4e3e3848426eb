#include "privacy/secagg/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace shoal::privacy::secagg {
namespace {

void Put64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void Put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// What a derived key is for, bound with the session and round into the key agreement.
std::vector<uint8_t> Context(const char* what, uint64_t session, uint64_t round) {
  std::vector<uint8_t> c(what, what + std::strlen(what));
  Put64(c, session);
  Put64(c, round);
  return c;
}

// The authenticated header of a sealed share (its AD, repeated inside the plaintext).
std::vector<uint8_t> ShareHeader(uint32_t from, uint32_t to, uint64_t session, uint64_t round) {
  std::vector<uint8_t> h;
  Put32(h, from);
  Put32(h, to);
  Put64(h, session);
  Put64(h, round);
  return h;
}

StatusOr<Key32> Agree(const crypto::X25519Pair& mine, const Key32& theirs, const std::vector<uint8_t>& context) {
  Key32 key{};
  if (!crypto::AgreeKey(mine.secret_key, mine.public_key, theirs, context, key))
    return Status::InvalidArgument("a peer's X25519 key is a low-order point");
  return key;
}

bool SortedUnique(const std::vector<uint32_t>& v, uint32_t n) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] >= n || (i && v[i] <= v[i - 1])) return false;
  return true;
}

bool Contains(const std::vector<uint32_t>& sorted, uint32_t x) { return std::binary_search(sorted.begin(), sorted.end(), x); }

constexpr size_t kSharePlaintext = 24 + 64 + 64;

}  // namespace

std::vector<uint8_t> AdvertMessage(uint64_t session, uint64_t round, const AdvertiseKeys& a) {
  std::vector<uint8_t> m = Context("shoal secagg v1 advertise", session, round);
  Put32(m, a.client_id);
  m.insert(m.end(), a.identity.begin(), a.identity.end());
  m.insert(m.end(), a.c_public.begin(), a.c_public.end());
  m.insert(m.end(), a.s_public.begin(), a.s_public.end());
  return m;
}

std::vector<uint8_t> CheckMessage(uint64_t session, uint64_t round, const UnmaskRequest& r) {
  std::vector<uint8_t> m = Context("shoal secagg v1 consistency", session, round);
  Put32(m, static_cast<uint32_t>(r.survivors.size()));
  for (uint32_t i : r.survivors) Put32(m, i);
  Put32(m, static_cast<uint32_t>(r.dropped.size()));
  for (uint32_t i : r.dropped) Put32(m, i);
  return m;
}

uint64_t GraphSeed(uint64_t session, uint64_t round, std::span<const AdvertiseKeys> roster) {
  std::vector<uint8_t> m = Context("shoal secagg v1 graph", session, round);
  for (const AdvertiseKeys& a : roster) {
    Put32(m, a.client_id);
    m.insert(m.end(), a.identity.begin(), a.identity.end());
    m.insert(m.end(), a.c_public.begin(), a.c_public.end());
    m.insert(m.end(), a.s_public.begin(), a.s_public.end());
  }
  const auto h = crypto::Hash256(m);
  uint64_t seed = 0;
  for (int i = 0; i < 8; ++i) seed |= uint64_t{h[i]} << (8 * i);
  return seed;
}

uint32_t ConsistencyQuorum(uint32_t n, double colluding_fraction) {
  const double gamma = std::isfinite(colluding_fraction) ? std::clamp(colluding_fraction, 0.0, 1.0) : 1.0;
  const uint64_t c = static_cast<uint64_t>(std::floor(gamma * n));
  return static_cast<uint32_t>((uint64_t{n} + c) / 2 + 1);
}

// ---- Client ------------------------------------------------------------------------------

Client::Client(uint32_t client_id, std::span<const uint8_t, 64> identity_secret, ClientPolicy policy)
    : client_id_(client_id), policy_(policy) {
  std::copy(identity_secret.begin(), identity_secret.end(), identity_secret_.begin());
  std::copy(identity_secret.begin() + 32, identity_secret.end(), identity_public_.begin());  // seed || public
}

Status Client::Abort(Status why) {
  stage_ = Stage::kAborted;
  held_.clear();
  delivered_.clear();
  request_ = {};
  self_seed_.fill(0);
  s_.secret_key.fill(0);
  c_.secret_key.fill(0);
  return why.WithContext("secure aggregation round " + std::to_string(round_) + " aborted");
}

StatusOr<AdvertiseKeys> Client::Start(uint64_t session, uint64_t round) {
  session_ = session;
  round_ = round;
  if (!rounds_run_.insert({session, round}).second)
    return Abort(Status::FailedPrecondition("the server reused session " + std::to_string(session) + " round " +
                                            std::to_string(round) + ", which this client already ran"));
  stage_ = Stage::kAdvertised;
  held_.clear();
  delivered_.clear();
  rejected_shares_ = 0;
  request_ = {};
  c_ = crypto::NewX25519();
  s_ = crypto::NewX25519();
  AdvertiseKeys a{client_id_, identity_public_, c_.public_key, s_.public_key, {}};
  a.signature = crypto::Sign(AdvertMessage(session, round, a), identity_secret_);
  return a;
}

StatusOr<ShareKeys> Client::OnSetup(const Setup& setup) {
  if (stage_ != Stage::kAdvertised) return Abort(Status::FailedPrecondition("Setup out of order (a replayed stage?)"));
  if (setup.session != session_ || setup.round != round_)
    return Abort(Status::FailedPrecondition("Setup for another session or round"));
  const uint32_t n = static_cast<uint32_t>(setup.roster.size());
  if (n < 2 || setup.degree == 0 || setup.degree >= n || setup.threshold == 0 || setup.threshold > setup.degree ||
      setup.length == 0 || !(setup.range > 0) || !std::isfinite(setup.range) || (setup.bits != 16 && setup.bits != 32))
    return Abort(Status::InvalidArgument("Setup parameters out of range"));
  if (n < policy_.min_roster)
    return Abort(Status::FailedPrecondition("Setup's roster has " + std::to_string(n) + " clients, below this client's " +
                                            "minimum of " + std::to_string(policy_.min_roster) + " (min_roster)"));
  if (setup.degree < policy_.min_degree)
    return Abort(Status::FailedPrecondition("Setup gives " + std::to_string(setup.degree) +
                                            " neighbours, below this client's minimum of " +
                                            std::to_string(policy_.min_degree) + " (min_neighbours)"));
  if (setup.threshold < policy_.min_threshold)
    return Abort(Status::FailedPrecondition("Setup's threshold " + std::to_string(setup.threshold) +
                                            " is below this client's minimum of " +
                                            std::to_string(policy_.min_threshold) + " (min_threshold)"));
  if (setup.degree > policy_.max_degree)
    return Abort(Status::InvalidArgument("Setup asks for " + std::to_string(setup.degree) + " neighbours, over this client's " +
                                         std::to_string(policy_.max_degree)));
  if (static_cast<double>(setup.threshold) <= policy_.min_threshold_fraction * setup.degree)
    return Abort(Status::InvalidArgument("Setup's threshold " + std::to_string(setup.threshold) + " of " +
                                         std::to_string(setup.degree) +
                                         " neighbours is too low: a server could collect both of a client's secrets"));
  std::optional<uint32_t> me;
  for (uint32_t i = 0; i < n; ++i) {
    if (i && setup.roster[i].client_id <= setup.roster[i - 1].client_id)
      return Abort(Status::InvalidArgument("Setup roster is not sorted by client id"));
    if (setup.roster[i].client_id == client_id_) me = i;
  }
  if (!me) return Abort(Status::InvalidArgument("Setup roster does not include this client"));
  // The consistency quorum counts identities: each must be one, and trusted when a roster is.
  std::set<Key32> identities;
  for (const AdvertiseKeys& a : setup.roster) {
    if (!identities.insert(a.identity).second)
      return Abort(Status::InvalidArgument("Setup roster lists one identity twice (client " + std::to_string(a.client_id) + ")"));
    if (policy_.trusted && a.client_id != client_id_) {  // its own entry is checked against its keys below
      const auto curve = crypto::SignToCurvePublic(a.identity);
      if (!curve || !policy_.trusted->count(*curve))
        return Abort(Status::PermissionDenied("Setup roster names client " + std::to_string(a.client_id) +
                                              " with an identity that is not in this client's trusted roster"));
    }
  }
  const AdvertiseKeys& mine = setup.roster[*me];
  if (mine.c_public != c_.public_key || mine.s_public != s_.public_key || mine.identity != identity_public_)
    return Abort(Status::InvalidArgument("Setup roster altered this client's keys"));
  index_ = *me;
  setup_ = setup;
  neighbours_ = Neighbours(n, setup.degree, setup.graph_seed, index_);
  for (uint32_t v : neighbours_) {
    const AdvertiseKeys& a = setup.roster[v];
    if (!crypto::Verify(a.signature, AdvertMessage(session_, round_, a), a.identity))
      return Abort(Status::InvalidArgument("neighbour " + std::to_string(a.client_id) + "'s keys are not signed by it"));
    if (a.c_public == c_.public_key || a.s_public == s_.public_key)
      return Abort(Status::InvalidArgument("neighbour " + std::to_string(a.client_id) + " advertises this client's keys"));
  }
  if (setup.graph_seed != GraphSeed(setup.session, setup.round, setup.roster))
    return Abort(Status::InvalidArgument("Setup's graph seed is not derived from its roster (a server choosing the "
                                         "neighbour graph?)"));
  crypto::RandomBytes(self_seed_);
  std::vector<uint32_t> xs;
  for (uint32_t v : neighbours_) xs.push_back(v + 1);
  Secret s_secret;
  std::copy(s_.secret_key.begin(), s_.secret_key.end(), s_secret.begin());
  auto s_shares = SplitSecret(s_secret, setup.threshold, xs);
  auto b_shares = SplitSecret(self_seed_, setup.threshold, xs);
  s_secret.fill(0);
  if (!s_shares.ok()) return Abort(s_shares.status());
  if (!b_shares.ok()) return Abort(b_shares.status());
  ShareKeys out;
  out.from = index_;
  out.self_mask_commitment = crypto::Hash256(self_seed_);
  const auto ctx = Context("shoal secagg v1 share", session_, round_);
  for (size_t i = 0; i < neighbours_.size(); ++i) {
    const uint32_t v = neighbours_[i];
    auto key = Agree(c_, setup.roster[v].c_public, ctx);
    if (!key.ok()) return Abort(key.status());
    std::vector<uint8_t> header = ShareHeader(index_, v, session_, round_);
    std::vector<uint8_t> plain = header;
    const auto sy = EncodeShareY((*s_shares)[i]), by = EncodeShareY((*b_shares)[i]);
    plain.insert(plain.end(), sy.begin(), sy.end());
    plain.insert(plain.end(), by.begin(), by.end());
    out.shares.push_back({index_, v, crypto::Seal(*key, header, plain)});
    std::fill(plain.begin(), plain.end(), 0);
  }
  stage_ = Stage::kShared;
  return out;
}

StatusOr<MaskedInput> Client::OnShares(const SharesFor& delivery, std::vector<uint32_t> encoded, uint64_t clipped) {
  if (stage_ != Stage::kShared) return Abort(Status::FailedPrecondition("Shares out of order (a replayed stage?)"));
  if (delivery.to != index_) return Abort(Status::InvalidArgument("shares addressed to another client"));
  if (encoded.size() != setup_.length)
    return Abort(Status::InvalidArgument("update has " + std::to_string(encoded.size()) + " values; Setup says " +
                                         std::to_string(setup_.length)));
  const auto ctx = Context("shoal secagg v1 share", session_, round_);
  for (const SealedShare& sh : delivery.shares) {
    if (sh.to != index_) return Abort(Status::InvalidArgument("a share addressed to client index " + std::to_string(sh.to)));
    if (!Contains(neighbours_, sh.from) || Contains(delivered_, sh.from))
      return Abort(Status::InvalidArgument("a share from " + std::to_string(sh.from) + ", not a neighbour or repeated"));
    delivered_.insert(std::upper_bound(delivered_.begin(), delivered_.end(), sh.from), sh.from);
    // A share that fails to open was sealed as garbage by its sender (or altered on the way):
    // it is dropped and counted, and the round goes on as long as t valid shares remain. The
    // pairwise mask with that neighbour still goes on below (it needs only its s_pk), so the
    // masks stay paired with the ones the neighbour adds.
    auto key = Agree(c_, setup_.roster[sh.from].c_public, ctx);
    if (!key.ok()) return Abort(key.status());
    const std::vector<uint8_t> header = ShareHeader(sh.from, index_, session_, round_);
    std::vector<uint8_t> plain;
    if (!crypto::Open(*key, header, sh.sealed, plain) || plain.size() != kSharePlaintext ||
        !std::equal(header.begin(), header.end(), plain.begin())) {
      ++rejected_shares_;
      continue;
    }
    auto s = DecodeShareY(index_ + 1, std::span<const uint8_t>(plain).subspan(24, 64));
    auto b = DecodeShareY(index_ + 1, std::span<const uint8_t>(plain).subspan(88, 64));
    std::fill(plain.begin(), plain.end(), 0);
    if (!s.ok() || !b.ok()) {
      ++rejected_shares_;
      continue;
    }
    held_[sh.from] = {*s, *b};
  }
  // Fewer than t neighbours' keys would leave this input masked by too few pairwise masks: a
  // server that withholds the others' shares could then unmask it with the self-mask alone.
  if (held_.size() < setup_.threshold)
    return Abort(Status::FailedPrecondition("only " + std::to_string(held_.size()) +
                                            " neighbours shared valid keys with this client (" +
                                            std::to_string(rejected_shares_) +
                                            " failed authentication), below the threshold " +
                                            std::to_string(setup_.threshold)));
  MaskedInput out;
  out.from = index_;
  out.masked = std::move(encoded);
  out.clipped = clipped;
  out.rejected_shares = rejected_shares_;
  std::vector<MaskKey> masks = {{self_seed_, false}};
  const auto ctx_mask = Context("shoal secagg v1 mask", session_, round_);
  for (uint32_t v : delivered_) {
    auto key = Agree(s_, setup_.roster[v].s_public, ctx_mask);
    if (!key.ok()) return Abort(key.status());
    masks.push_back({*key, index_ > v});
  }
  ApplyMasks(masks, out.masked);
  for (MaskKey& m : masks) m.key.fill(0);
  stage_ = Stage::kMasked;
  return out;
}

StatusOr<CheckSignature> Client::OnCheck(const UnmaskRequest& r) {
  if (stage_ != Stage::kMasked)
    return Abort(Status::FailedPrecondition("Check out of order (a replayed stage, or a second request this round?)"));
  const uint32_t n = static_cast<uint32_t>(setup_.roster.size());
  if (!SortedUnique(r.survivors, n) || !SortedUnique(r.dropped, n))
    return Abort(Status::InvalidArgument("Unmask lists are not sorted, unique roster indices"));
  for (uint32_t d : r.dropped)
    if (Contains(r.survivors, d))
      return Abort(Status::InvalidArgument("Unmask names client index " + std::to_string(d) +
                                           " both as survivor and as dropped: revealing both secrets would unmask it"));
  if (!Contains(r.survivors, index_)) return Abort(Status::InvalidArgument("Unmask does not count this client as a survivor"));
  if (r.survivors.size() < setup_.threshold)
    return Abort(Status::FailedPrecondition(std::to_string(r.survivors.size()) + " survivors, below the threshold " +
                                            std::to_string(setup_.threshold)));
  const uint32_t quorum = ConsistencyQuorum(n, policy_.colluding_fraction);
  if (r.survivors.size() < quorum)
    return Abort(Status::FailedPrecondition(std::to_string(r.survivors.size()) + " survivors of " + std::to_string(n) +
                                            ", below the consistency quorum " + std::to_string(quorum)));
  request_ = r;
  stage_ = Stage::kChecked;
  return CheckSignature{index_, crypto::Sign(CheckMessage(session_, round_, r), identity_secret_)};
}

StatusOr<UnmaskShares> Client::OnUnmask(const UnmaskProof& proof) {
  if (stage_ != Stage::kChecked) return Abort(Status::FailedPrecondition("Unmask out of order (a replayed stage?)"));
  if (proof.signers.size() != proof.signatures.size())
    return Abort(Status::InvalidArgument("Unmask holds " + std::to_string(proof.signatures.size()) + " signatures for " +
                                         std::to_string(proof.signers.size()) + " signers"));
  const uint32_t n = static_cast<uint32_t>(setup_.roster.size());
  const uint32_t quorum = ConsistencyQuorum(n, policy_.colluding_fraction);
  // Each signature must be a survivor's, on exactly the request this client signed; the
  // identities are distinct (checked at Setup), so valid signers count distinct identities.
  const std::vector<uint8_t> message = CheckMessage(session_, round_, request_);
  uint32_t valid = 0;
  for (size_t i = 0; i < proof.signers.size(); ++i) {
    const uint32_t signer = proof.signers[i];
    if ((i && signer <= proof.signers[i - 1]) || signer >= n || !Contains(request_.survivors, signer)) continue;
    if (crypto::Verify(proof.signatures[i], message, setup_.roster[signer].identity)) ++valid;
  }
  if (valid < quorum)
    return Abort(Status::PermissionDenied(
        "Unmask carries " + std::to_string(valid) + " valid signatures on the survivor set this client signed, below the "
        "consistency quorum " + std::to_string(quorum) + " of " + std::to_string(n) +
        ": the aggregator may have told clients different survivor sets; nothing revealed"));
  UnmaskShares out;
  out.from = index_;
  for (const auto& [owner, shares] : held_) {
    if (Contains(request_.survivors, owner))
      out.shares.push_back({owner, false, EncodeShareY(shares.second)});
    else if (Contains(request_.dropped, owner))
      out.shares.push_back({owner, true, EncodeShareY(shares.first)});
  }
  held_.clear();
  self_seed_.fill(0);
  s_.secret_key.fill(0);
  c_.secret_key.fill(0);
  stage_ = Stage::kDone;
  return out;
}

// ---- Server ------------------------------------------------------------------------------

Server::Server(uint64_t session, uint64_t round, ServerOptions options)
    : session_(session), round_(round), o_(options) {}

Status Server::AddAdvert(const AdvertiseKeys& a) {
  if (stage_ != 0) return Status::FailedPrecondition("AdvertiseKeys after the roster closed");
  if (adverts_.count(a.client_id)) return Status::InvalidArgument("a second AdvertiseKeys from this client");
  if (!crypto::Verify(a.signature, AdvertMessage(session_, round_, a), a.identity))
    return Status::InvalidArgument("AdvertiseKeys signature does not verify");
  // A low-order point or another client's key would make every neighbour's key agreement fail
  // (and abort their round): refused here, at the one client that sent it.
  if (!crypto::ValidX25519Public(a.c_public) || !crypto::ValidX25519Public(a.s_public) || a.c_public == a.s_public)
    return Status::InvalidArgument("AdvertiseKeys holds a low-order or repeated X25519 key");
  for (const auto& [id, other] : adverts_)
    if (other.c_public == a.c_public || other.s_public == a.s_public || other.c_public == a.s_public ||
        other.s_public == a.c_public || other.identity == a.identity)
      return Status::InvalidArgument("AdvertiseKeys repeats another client's key");
  adverts_[a.client_id] = a;
  return Status::Ok();
}

StatusOr<Setup> Server::CloseAdverts() {
  if (stage_ != 0) return Status::FailedPrecondition("the roster is already closed");
  stage_ = 1;
  if (o_.length == 0 || !(o_.range > 0)) return Status::InvalidArgument("secure aggregation: length and range must be positive");
  SHOAL_ASSIGN_OR_RETURN(Params p, DeriveParams(static_cast<uint32_t>(adverts_.size()), o_.dropout, o_.corrupt,
                                                o_.degree, o_.threshold));
  if (static_cast<double>(p.threshold) <= o_.min_threshold_fraction * p.degree)
    return Status::InvalidArgument("threshold " + std::to_string(p.threshold) + " is at most half of the " +
                                   std::to_string(p.degree) + " neighbours, which clients refuse");
  setup_ = Setup{session_, round_, p.degree, p.threshold, 0, o_.range, o_.length, o_.bits, {}};
  for (const auto& [id, a] : adverts_) setup_.roster.push_back(a);
  setup_.graph_seed = GraphSeed(session_, round_, setup_.roster);
  const uint32_t n = p.n;
  neighbours_.resize(n);
  for (uint32_t i = 0; i < n; ++i) neighbours_[i] = Neighbours(n, p.degree, setup_.graph_seed, i);
  sum_.assign(o_.length, 0);
  return setup_;
}

std::optional<uint32_t> Server::IndexOf(uint32_t client_id) const {
  const auto& r = setup_.roster;
  auto it = std::lower_bound(r.begin(), r.end(), client_id,
                             [](const AdvertiseKeys& a, uint32_t id) { return a.client_id < id; });
  if (it == r.end() || it->client_id != client_id) return std::nullopt;
  return static_cast<uint32_t>(it - r.begin());
}

Status Server::AddShareKeys(const ShareKeys& m) {
  if (stage_ != 1) return Status::FailedPrecondition("ShareKeys outside its stage");
  const uint32_t n = static_cast<uint32_t>(setup_.roster.size());
  if (m.from >= n || shared_.count(m.from)) return Status::InvalidArgument("ShareKeys from an unknown or repeated sender");
  const auto& nb = neighbours_[m.from];
  if (m.shares.size() != nb.size()) return Status::InvalidArgument("ShareKeys must hold one share per neighbour");
  for (size_t i = 0; i < nb.size(); ++i)
    if (m.shares[i].from != m.from || m.shares[i].to != nb[i] || m.shares[i].sealed.size() > 512)
      return Status::InvalidArgument("ShareKeys addresses a share to a client that is not its neighbour");
  shared_[m.from] = m;
  return Status::Ok();
}

StatusOr<std::vector<SharesFor>> Server::CloseShareKeys() {
  if (stage_ != 1) return Status::FailedPrecondition("ShareKeys already closed");
  stage_ = 2;
  if (shared_.size() < setup_.threshold)
    return Status::FailedPrecondition(std::to_string(shared_.size()) + " clients shared keys, below the threshold " +
                                      std::to_string(setup_.threshold) + ": round aborted");
  std::map<uint32_t, SharesFor> by_recipient;
  for (const auto& [from, m] : shared_) by_recipient[from].to = from;
  for (const auto& [from, m] : shared_)
    for (const SealedShare& s : m.shares)
      if (shared_.count(s.to)) by_recipient[s.to].shares.push_back(s);
  std::vector<SharesFor> out;
  for (auto& [to, s] : by_recipient) out.push_back(std::move(s));
  return out;
}

Status Server::AddMasked(const MaskedInput& m) {
  if (stage_ != 2) return Status::FailedPrecondition("MaskedInput outside its stage");
  if (!shared_.count(m.from) || masked_.count(m.from))
    return Status::InvalidArgument("MaskedInput from a client that did not share keys, or repeated");
  if (m.masked.size() != sum_.size())
    return Status::InvalidArgument("MaskedInput has " + std::to_string(m.masked.size()) + " values, expected " +
                                   std::to_string(sum_.size()));
  if (m.clipped > m.masked.size()) return Status::InvalidArgument("MaskedInput claims more clipped values than it has");
  if (m.rejected_shares > neighbours_[m.from].size())
    return Status::InvalidArgument("MaskedInput claims more rejected shares than it has neighbours");
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += m.masked[i];
  clipped_ += m.clipped;
  rejected_shares_ += m.rejected_shares;
  masked_[m.from] = MaskedInput{m.from, {}, m.clipped, m.rejected_shares};
  return Status::Ok();
}

StatusOr<UnmaskRequest> Server::CloseMasked() {
  if (stage_ != 2) return Status::FailedPrecondition("MaskedInput already closed");
  stage_ = 3;
  request_ = {};
  for (const auto& [i, m] : masked_) request_.survivors.push_back(i);
  for (const auto& [i, m] : shared_)
    if (!masked_.count(i)) request_.dropped.push_back(i);
  if (request_.survivors.size() < setup_.threshold)
    return Status::FailedPrecondition(std::to_string(request_.survivors.size()) + " masked inputs, below the threshold " +
                                      std::to_string(setup_.threshold) + ": round aborted, nothing unmasked");
  const uint32_t n = static_cast<uint32_t>(setup_.roster.size());
  const uint32_t quorum = ConsistencyQuorum(n, o_.colluding_fraction);
  if (request_.survivors.size() < quorum)
    return Status::FailedPrecondition(std::to_string(request_.survivors.size()) + " masked inputs of " +
                                      std::to_string(n) + ", below the consistency quorum " + std::to_string(quorum) +
                                      ": round aborted, nothing unmasked");
  check_message_ = CheckMessage(session_, round_, request_);
  return request_;
}

Status Server::AddCheck(const CheckSignature& m) {
  if (stage_ != 3) return Status::FailedPrecondition("CheckSignature outside its stage");
  if (!Contains(request_.survivors, m.from) || signatures_.count(m.from))
    return Status::InvalidArgument("CheckSignature from a client that is not a survivor, or repeated");
  if (!crypto::Verify(m.signature, check_message_, setup_.roster[m.from].identity))
    return Status::InvalidArgument("CheckSignature does not verify on the survivor set this aggregator sent");
  signatures_[m.from] = m.signature;
  return Status::Ok();
}

StatusOr<UnmaskProof> Server::CloseCheck() {
  if (stage_ != 3) return Status::FailedPrecondition("CheckSignature already closed");
  stage_ = 4;
  const uint32_t n = static_cast<uint32_t>(setup_.roster.size());
  const uint32_t quorum = std::max(ConsistencyQuorum(n, o_.colluding_fraction), setup_.threshold);
  if (signatures_.size() < quorum)
    return Status::FailedPrecondition(std::to_string(signatures_.size()) + " consistency signatures, below the quorum " +
                                      std::to_string(quorum) + ": round aborted, nothing unmasked");
  UnmaskProof proof;
  for (const auto& [i, sig] : signatures_) {
    proof.signers.push_back(i);
    proof.signatures.push_back(sig);
  }
  return proof;
}

Status Server::AddUnmask(const UnmaskShares& m) {
  if (stage_ != 4) return Status::FailedPrecondition("UnmaskShares outside its stage");
  if (!signatures_.count(m.from) || unmasked_.count(m.from))
    return Status::InvalidArgument("UnmaskShares from a client that did not sign the survivor set, or repeated");
  std::vector<std::pair<uint32_t, std::pair<bool, Share>>> accepted;
  std::set<uint32_t> owners;
  for (const RevealedShare& r : m.shares) {
    if (!owners.insert(r.owner).second) return Status::InvalidArgument("UnmaskShares reveals two shares of one client");
    const bool dropped = Contains(request_.dropped, r.owner);
    if (!Contains(neighbours_[m.from], r.owner) || !shared_.count(r.owner) || r.mask_key != dropped)
      return Status::InvalidArgument("UnmaskShares reveals a share it cannot hold");
    SHOAL_ASSIGN_OR_RETURN(Share s, DecodeShareY(m.from + 1, r.y));
    accepted.push_back({r.owner, {dropped, s}});
  }
  for (auto& [owner, share] : accepted) (share.first ? s_shares_ : b_shares_)[owner].push_back(share.second);
  unmasked_.insert(m.from);
  return Status::Ok();
}

StatusOr<Result> Server::Finish() {
  if (stage_ != 4) return Status::FailedPrecondition("secure aggregation round is not at Unmask");
  stage_ = 5;
  const uint32_t t = setup_.threshold;
  // The secret of `owner` from its shares: the first t, or with one share left out at a time
  // when those fail `check` (a forged share), as long as t remain.
  auto reconstruct = [&](std::map<uint32_t, std::vector<Share>>& by_owner, uint32_t owner, const char* what,
                         const std::function<bool(const Secret&)>& check) -> StatusOr<Secret> {
    const auto& shares = by_owner[owner];
    if (shares.size() < t)
      return Status::FailedPrecondition("only " + std::to_string(shares.size()) + " shares of client " +
                                        std::to_string(client_id(owner)) + "'s " + what + ", threshold " +
                                        std::to_string(t));
    auto first = CombineShares(shares, t);
    if (first.ok() && check(*first)) return first;
    for (size_t skip = 0; shares.size() > t && skip < shares.size(); ++skip) {
      std::vector<Share> rest;
      for (size_t i = 0; i < shares.size(); ++i)
        if (i != skip) rest.push_back(shares[i]);
      auto s = CombineShares(rest, t);
      if (s.ok() && check(*s)) return s;
    }
    return Status::Corruption("the shares of client " + std::to_string(client_id(owner)) + "'s " + what +
                              " do not reconstruct it (forged shares)");
  };
  std::vector<MaskKey> masks;  // every mask to take off the sum, applied in one pass
  for (uint32_t u : request_.survivors) {
    const Key32 commitment = shared_.at(u).self_mask_commitment;
    SHOAL_ASSIGN_OR_RETURN(Secret b, reconstruct(b_shares_, u, "self mask",
                                                 [&](const Secret& s) { return crypto::Hash256(s) == commitment; }));
    masks.push_back({b, true});
  }
  const auto ctx = Context("shoal secagg v1 mask", session_, round_);
  for (uint32_t d : request_.dropped) {
    const Key32 s_public = setup_.roster[d].s_public;
    SHOAL_ASSIGN_OR_RETURN(Secret s, reconstruct(s_shares_, d, "mask key (dropped)", [&](const Secret& k) {
                             Key32 sk;
                             std::copy(k.begin(), k.end(), sk.begin());
                             return crypto::X25519Public(sk) == s_public;
                           }));
    crypto::X25519Pair pair;
    std::copy(s.begin(), s.end(), pair.secret_key.begin());
    pair.public_key = s_public;
    for (uint32_t u : neighbours_[d]) {
      if (!masked_.count(u)) continue;
      SHOAL_ASSIGN_OR_RETURN(Key32 key, Agree(pair, setup_.roster[u].s_public, ctx));
      masks.push_back({key, u < d});  // u added +mask when u < d: take it off
    }
  }
  ApplyMasks(masks, sum_);
  Result r;
  r.sum = std::move(sum_);
  for (uint32_t u : request_.survivors) r.survivors.push_back(client_id(u));
  r.recovered = static_cast<uint32_t>(request_.dropped.size());
  r.clipped = clipped_;
  r.signatures = static_cast<uint32_t>(signatures_.size());
  r.rejected_shares = rejected_shares_;
  return r;
}

}  // namespace shoal::privacy::secagg
