// SecAgg+ (Bonawitz et al. CCS'17; Bell et al. CCS'20) as two explicit state machines, one per
// side, over typed messages; the runtime carries the messages (it does not change them).
//
// Stages of one round (client -> server, then server -> each client):
//   0 AdvertiseKeys  client: two fresh X25519 pairs (c: share encryption, s: pairwise masks),
//                    signed with its Ed25519 identity key over (session, round, id, c_pk, s_pk);
//                    the identity is the client's long-term key (its PREFIX.key) when it has one.
//   1 Setup          server: the roster of clients whose adverts verified (U1, by client id),
//                    degree k, threshold t, graph seed (derived from the roster: GraphSeed),
//                    fixed-point range, vector length.
//   2 ShareKeys      client: checks every neighbour's signature, draws a self-mask seed b,
//                    Shamir-shares s_sk and b t-of-k among its neighbours, each share sealed
//                    (XChaCha20-Poly1305) under a key agreed with the recipient's c_pk and
//                    bound to (session, round, from, to); commits BLAKE2b(b).
//   3 Shares         server: forwards to each sender (U2) the shares addressed to it.
//   4 MaskedInput    client: y = fixed(x) + PRG(b) + sum_{v in N(u), shares delivered}
//                    (u < v ? +1 : -1) PRG(s_uv) mod 2^32, s_uv agreed from s_sk_u and s_pk_v.
//                    A delivered share that fails authentication (a neighbour sealed garbage)
//                    is dropped and counted; the pairwise mask with that neighbour still goes
//                    on (it needs only the roster's s_pk), so the sum stays consistent.
//   5 Check          server: survivors U3 (sent y) and dropped D = U2 \ U3, to every survivor.
//   6 CheckSignature client: checks the request (below) and signs (session, round, U3, D) with
//                    its identity key; it signs one request per round, never a second.
//   7 Unmask         server: the signatures it collected on that one request (Bonawitz et al.
//                    CCS'17, ConsistencyCheck), to every survivor that signed.
//   8 UnmaskShares   client: reveals nothing unless a quorum of distinct roster members signed
//                    exactly the request it signed (below); then for each neighbour its share
//                    of b (survivor) or of s_sk (dropped), never both.
//   Finish           server: reconstructs each survivor's b and each dropped client's s_sk from
//                    t shares (checked against the commitment / the advertised s_pk), removes
//                    their masks and returns sum_{u in U3} fixed(x_u) mod 2^32.
//
// Why the consistency round. Without it a malicious server can tell the neighbours of a victim
// u "u survived" (they reveal b_u) and the neighbours of each of u's neighbours v "v dropped"
// (they reveal s_v), and unmask u's input alone; t > k/2 does not stop it, since no one owner
// is asked for both of one client's secrets. The quorum is Q = floor((n + c) / 2) + 1 of the n
// roster identities, c = floor(gamma n) for the colluding share gamma the client assumes: two
// different requests cannot both gather Q signatures unless more than c signers signed both,
// so at least one honest client would have signed twice, which no client does. Every client
// that reveals has then seen the same (U3, D). The quorum counts identities, so it holds only
// when the identities are real: a roster of identity keys the client trusts (ClientPolicy::
// trusted), else a server can fill the roster with identities of its own (docs/SECURITY.md).
//
// What a client refuses, aborting the round with a clear error and revealing nothing more: a
// threshold at most half its neighbours or below its policy, fewer neighbours or a smaller
// roster than its policy, a degree above its policy (ClientPolicy), a roster identity not in
// its trusted roster or repeated, a stage out of order or repeated (replay), a session/round it
// has already run (reused round), a roster without itself or with its own keys altered, a
// neighbour whose signature fails, a share not addressed to it or from a non-neighbour, fewer
// than t neighbours' valid shares (its input would rest on too few pairwise masks), survivors
// and dropped sets that overlap or name unknown clients, fewer survivors than the threshold or
// the quorum, and an Unmask whose valid signatures on its request are fewer than the quorum.
// The server refuses malformed messages from a client (it leaves that client out): low-order
// or repeated public keys, a signature that does not verify, a share revealed twice; it aborts
// the round when fewer than t (or the quorum) survive or sign, or a secret cannot be
// reconstructed from any t of its shares less one (one forged share is tolerated when t + 1
// arrived).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "crypto/crypto.h"
#include "privacy/secagg/graph.h"
#include "privacy/secagg/masking.h"
#include "privacy/secagg/shamir.h"
#include "shoal/status.h"

namespace shoal::privacy::secagg {

using crypto::Key32;

struct AdvertiseKeys {
  uint32_t client_id = 0;
  Key32 identity{};          // Ed25519 public key
  Key32 c_public{}, s_public{};
  crypto::Signature signature{};
};

struct Setup {
  uint64_t session = 0, round = 0;
  uint32_t degree = 0, threshold = 0;
  uint64_t graph_seed = 0;   // GraphSeed of the roster (clients recompute it and refuse another)
  double range = 0.0;        // fixed-point clipping range R
  uint32_t length = 0;       // coordinates masked
  uint32_t bits = 32;        // 32, or 16 (int8 levels): the sum is taken mod 2^bits
  std::vector<AdvertiseKeys> roster;  // sorted by client_id; a client's index is its position
};

struct SealedShare {
  uint32_t from = 0, to = 0;  // roster indices
  std::vector<uint8_t> sealed;
};

struct ShareKeys {
  uint32_t from = 0;
  Key32 self_mask_commitment{};  // BLAKE2b-256 of b
  std::vector<SealedShare> shares;
};

struct SharesFor {
  uint32_t to = 0;
  std::vector<SealedShare> shares;
};

struct MaskedInput {
  uint32_t from = 0;
  std::vector<uint32_t> masked;
  uint64_t clipped = 0;          // values this client clipped to the range (reported, not secret)
  uint32_t rejected_shares = 0;  // delivered shares that failed authentication (dropped)
};

// The Check stage's request: who survived and who dropped.
struct UnmaskRequest {
  std::vector<uint32_t> survivors, dropped;  // roster indices, sorted
};

// A survivor's signature on the one request it was sent.
struct CheckSignature {
  uint32_t from = 0;
  crypto::Signature signature{};
};

// The Unmask stage: the signatures the server holds on the request, by signer index.
struct UnmaskProof {
  std::vector<uint32_t> signers;  // roster indices, sorted
  std::vector<crypto::Signature> signatures;  // one per signer
};

struct RevealedShare {
  uint32_t owner = 0;
  bool mask_key = false;  // true: a share of s_sk (owner dropped); false: of b (owner survived)
  std::array<uint8_t, 64> y{};
};

struct UnmaskShares {
  uint32_t from = 0;
  std::vector<RevealedShare> shares;
};

// The CURVE public keys (the .pub files) of the clients a client trusts. A roster identity
// (Ed25519) is trusted when its X25519 form (crypto::SignToCurvePublic) is one of them:
// shoal-keygen derives a key file's CURVE pair from its Ed25519 pair, so one .pub names both.
using TrustedKeys = std::set<Key32>;

// What a client accepts from a Setup, whatever the server says.
struct ClientPolicy {
  // The threshold must exceed this share of the neighbours: with t > k/2 a server that tells
  // different neighbours different survivor sets still cannot collect t shares of both of a
  // client's secrets. 0 accepts any t (secure only against an honest-but-curious server).
  double min_threshold_fraction = 0.5;
  uint32_t max_degree = 4096;  // bounds the work a Setup can ask for (Shamir is O(k t))
  uint32_t min_threshold = 1;  // the fewest shares t that may reconstruct a secret
  uint32_t min_degree = 1;     // the fewest neighbours k (each a pairwise mask)
  // The smallest roster: with 2 clients the sum less one's own update is the other's.
  uint32_t min_roster = 3;
  // The share of the roster assumed to collude with the server (gamma): the consistency quorum
  // is floor((n + floor(gamma n)) / 2) + 1 signatures (see above). Default: 0.
  double colluding_fraction = 0.0;
  // When set, every roster identity must be in it (a roster the operator vouches for); else
  // any identity that signs its own advert is accepted. Default: unset.
  std::shared_ptr<const TrustedKeys> trusted = nullptr;
};

// The neighbour graph's seed: BLAKE2b of the roster's adverts (ids, identities and this round's
// fresh keys), so the server cannot grind seeds to place chosen clients as someone's
// neighbours; its only freedom is which adverts to include, each a client it must drop.
uint64_t GraphSeed(uint64_t session, uint64_t round, std::span<const AdvertiseKeys> roster);

// The consistency quorum for a roster of n identities, gamma of them assumed colluding.
uint32_t ConsistencyQuorum(uint32_t n, double colluding_fraction);

// The client's half. Not thread-safe; one object per client, used for many rounds.
class Client {
 public:
  enum class Stage { kIdle, kAdvertised, kShared, kMasked, kChecked, kDone, kAborted };

  // identity_secret: libsodium's 64-byte Ed25519 secret key.
  Client(uint32_t client_id, std::span<const uint8_t, 64> identity_secret, ClientPolicy policy = {});

  StatusOr<AdvertiseKeys> Start(uint64_t session, uint64_t round);
  StatusOr<ShareKeys> OnSetup(const Setup& setup);
  // `encoded` is the update in fixed point (masking.h, FixedPoint of the Setup's range, roster
  // size and bits), setup.length words; `clipped` how many values encoding clipped.
  StatusOr<MaskedInput> OnShares(const SharesFor& shares, std::vector<uint32_t> encoded, uint64_t clipped);
  // The Check stage: signs the request (at most one per round).
  StatusOr<CheckSignature> OnCheck(const UnmaskRequest& request);
  // The Unmask stage: reveals shares only when the proof holds a quorum of valid signatures on
  // the request this client signed.
  StatusOr<UnmaskShares> OnUnmask(const UnmaskProof& proof);
  Stage stage() const { return stage_; }
  uint32_t index() const { return index_; }
  // Shares from neighbours that failed authentication, this round (dropped, not fatal).
  uint32_t rejected_shares() const { return rejected_shares_; }

 private:
  Status Abort(Status why);

  uint32_t client_id_;
  ClientPolicy policy_;
  std::array<uint8_t, 64> identity_secret_;
  Key32 identity_public_{};
  Stage stage_ = Stage::kIdle;
  std::set<std::pair<uint64_t, uint64_t>> rounds_run_;  // (session, round)
  uint64_t session_ = 0, round_ = 0;
  crypto::X25519Pair c_, s_;
  Setup setup_;
  uint32_t index_ = 0;
  std::vector<uint32_t> neighbours_;
  Secret self_seed_{};
  std::map<uint32_t, std::pair<Share, Share>> held_;  // owner -> (share of s_sk, share of b)
  std::vector<uint32_t> delivered_;  // neighbours whose shares came (valid or not): the masks
  uint32_t rejected_shares_ = 0;
  UnmaskRequest request_;  // the one request this client signed
};

struct ServerOptions {
  double range = 1.0;
  uint32_t length = 0;
  uint32_t bits = 32;
  double dropout = 0.2, corrupt = 0.0;
  uint32_t degree = 0, threshold = 0;  // overrides (0 = derive)
  double min_threshold_fraction = 0.5;  // as ClientPolicy: a lower threshold aborts the round at Setup
  double colluding_fraction = 0.0;      // as ClientPolicy: fewer signatures than its quorum abort at Unmask
};

struct Result {
  std::vector<uint32_t> sum;         // sum over survivors of fixed(x) mod 2^32
  std::vector<uint32_t> survivors;   // client ids
  uint32_t recovered = 0;            // dropped clients (after ShareKeys) whose masks were removed
  uint64_t clipped = 0;              // values clipped, over all survivors
  uint32_t signatures = 0;           // consistency signatures collected (and sent on)
  uint64_t rejected_shares = 0;      // shares the survivors reported failing authentication
};

// The server's half: one object per round.
class Server {
 public:
  Server(uint64_t session, uint64_t round, ServerOptions options);

  Status AddAdvert(const AdvertiseKeys& advert);
  StatusOr<Setup> CloseAdverts();
  Status AddShareKeys(const ShareKeys& message);
  StatusOr<std::vector<SharesFor>> CloseShareKeys();
  Status AddMasked(const MaskedInput& message);
  StatusOr<UnmaskRequest> CloseMasked();
  Status AddCheck(const CheckSignature& message);
  StatusOr<UnmaskProof> CloseCheck();
  Status AddUnmask(const UnmaskShares& message);
  StatusOr<Result> Finish();

  const Setup& setup() const { return setup_; }
  uint32_t client_id(uint32_t index) const { return setup_.roster.at(index).client_id; }
  // The roster index of a client id (the roster is sorted by id); nullopt before Setup or when
  // the client is not in it.
  std::optional<uint32_t> IndexOf(uint32_t client_id) const;

 private:
  uint64_t session_, round_;
  ServerOptions o_;
  std::map<uint32_t, AdvertiseKeys> adverts_;
  Setup setup_;
  std::vector<std::vector<uint32_t>> neighbours_;
  std::map<uint32_t, ShareKeys> shared_;      // U2
  std::map<uint32_t, MaskedInput> masked_;    // U3 (the vectors are summed into sum_)
  std::vector<uint32_t> sum_;
  uint64_t clipped_ = 0, rejected_shares_ = 0;
  UnmaskRequest request_;
  std::vector<uint8_t> check_message_;  // the bytes survivors sign
  std::map<uint32_t, crypto::Signature> signatures_;  // U4: survivors that signed
  std::map<uint32_t, std::vector<Share>> b_shares_, s_shares_;  // by owner
  std::set<uint32_t> unmasked_;
  int stage_ = 0;
};

// The bytes signed in AdvertiseKeys.
std::vector<uint8_t> AdvertMessage(uint64_t session, uint64_t round, const AdvertiseKeys& a);
// The bytes signed in CheckSignature.
std::vector<uint8_t> CheckMessage(uint64_t session, uint64_t round, const UnmaskRequest& r);

}  // namespace shoal::privacy::secagg
