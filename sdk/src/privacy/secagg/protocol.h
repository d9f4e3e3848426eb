// SecAgg+ (Bonawitz et al. CCS'17; Bell et al. CCS'20) as two explicit state machines, one per
// side, over typed messages; the runtime carries the messages (it does not change them).
//
// Stages of one round (client -> server, then server -> each client):
//   0 AdvertiseKeys  client: two fresh X25519 pairs (c: share encryption, s: pairwise masks),
//                    signed with its Ed25519 identity key over (session, round, id, c_pk, s_pk).
//   1 Setup          server: the roster of clients whose adverts verified (U1, by client id),
//                    degree k, threshold t, graph seed, fixed-point range, vector length.
//   2 ShareKeys      client: checks every neighbour's signature, draws a self-mask seed b,
//                    Shamir-shares s_sk and b t-of-k among its neighbours, each share sealed
//                    (XChaCha20-Poly1305) under a key agreed with the recipient's c_pk and
//                    bound to (session, round, from, to); commits BLAKE2b(b).
//   3 Shares         server: forwards to each sender (U2) the shares addressed to it.
//   4 MaskedInput    client: y = fixed(x) + PRG(b) + sum_{v in N(u), shares received}
//                    (u < v ? +1 : -1) PRG(s_uv) mod 2^32, s_uv agreed from s_sk_u and s_pk_v.
//   5 Unmask         server: survivors U3 (sent y) and dropped D = U2 \ U3.
//   6 UnmaskShares   client: checks the request (below), then reveals for each neighbour its
//                    share of b (survivor) or of s_sk (dropped), never both.
//   Finish           server: reconstructs each survivor's b and each dropped client's s_sk from
//                    t shares (checked against the commitment / the advertised s_pk), removes
//                    their masks and returns sum_{u in U3} fixed(x_u) mod 2^32.
//
// What a client refuses, aborting the round with a clear error and revealing nothing more: a
// threshold at most half its neighbours or a degree above its policy (ClientPolicy), a
// stage out of order or repeated (replay), a session/round it has already run (reused round),
// a roster without itself or with its own keys altered, a neighbour whose signature fails, a
// share not addressed to it or that fails authentication, fewer than t neighbours' shares
// (its input would rest on too few pairwise masks), survivors and dropped sets that overlap or
// name unknown clients, and fewer survivors than the threshold. The server refuses
// malformed messages from a client (it leaves that client out): low-order or repeated public
// keys, a share revealed twice; it aborts the round when fewer than t survive or a secret
// cannot be reconstructed from any t of its shares less one (one forged share is tolerated
// when t + 1 arrived).
#pragma once

#include <array>
#include <cstdint>
#include <map>
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
  uint64_t graph_seed = 0;
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
  uint64_t clipped = 0;  // values this client clipped to the range (reported, not secret)
};

struct UnmaskRequest {
  std::vector<uint32_t> survivors, dropped;  // roster indices, sorted
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

// What a client accepts from a Setup, whatever the server says.
struct ClientPolicy {
  // The threshold must exceed this share of the neighbours: with t > k/2 a server that tells
  // different neighbours different survivor sets still cannot collect t shares of both of a
  // client's secrets. 0 accepts any t (secure only against an honest-but-curious server).
  double min_threshold_fraction = 0.5;
  uint32_t max_degree = 4096;  // bounds the work a Setup can ask for (Shamir is O(k t))
};

// The client's half. Not thread-safe; one object per client, used for many rounds.
class Client {
 public:
  enum class Stage { kIdle, kAdvertised, kShared, kMasked, kDone, kAborted };

  // identity_secret: libsodium's 64-byte Ed25519 secret key.
  Client(uint32_t client_id, std::span<const uint8_t, 64> identity_secret, ClientPolicy policy = {});

  StatusOr<AdvertiseKeys> Start(uint64_t session, uint64_t round);
  StatusOr<ShareKeys> OnSetup(const Setup& setup);
  // `encoded` is the update in fixed point (masking.h, FixedPoint of the Setup's range, roster
  // size and bits), setup.length words; `clipped` how many values encoding clipped.
  StatusOr<MaskedInput> OnShares(const SharesFor& shares, std::vector<uint32_t> encoded, uint64_t clipped);
  StatusOr<UnmaskShares> OnUnmask(const UnmaskRequest& request);
  Stage stage() const { return stage_; }
  uint32_t index() const { return index_; }

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
};

struct ServerOptions {
  double range = 1.0;
  uint32_t length = 0;
  uint32_t bits = 32;
  double dropout = 0.2, corrupt = 0.0;
  uint32_t degree = 0, threshold = 0;  // overrides (0 = derive)
  double min_threshold_fraction = 0.5;  // as ClientPolicy: a lower threshold aborts the round at Setup
};

struct Result {
  std::vector<uint32_t> sum;         // sum over survivors of fixed(x) mod 2^32
  std::vector<uint32_t> survivors;   // client ids
  uint32_t recovered = 0;            // dropped clients (after ShareKeys) whose masks were removed
  uint64_t clipped = 0;              // values clipped, over all survivors
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
  uint64_t clipped_ = 0;
  UnmaskRequest request_;
  std::map<uint32_t, std::vector<Share>> b_shares_, s_shares_;  // by owner
  std::set<uint32_t> unmasked_;
  int stage_ = 0;
};

// The bytes signed in AdvertiseKeys.
std::vector<uint8_t> AdvertMessage(uint64_t session, uint64_t round, const AdvertiseKeys& a);

}  // namespace shoal::privacy::secagg
