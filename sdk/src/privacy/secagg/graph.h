// SecAgg+'s sparse communication graph and its parameters (Bell et al. CCS'20).
//
// Graph. Each client masks with, and shares its secrets among, only its k neighbours: the
// Harary graph H(k, n) (ring positions joined to the k/2 nearest on each side) over a random
// permutation of the n clients, drawn from a public seed the server announces. Every client
// recomputes the graph from the seed and the roster, so a server cannot hand-pick neighbours
// (it could still try many seeds: docs/SECURITY.md). k = n - 1 is the full graph (SecAgg).
//
// Parameters for n clients, a tolerated dropout rate d (of the k neighbours, up to Unmask) and
// corrupt (colluding) client rate c:
//   security:     t >= floor(k/2) + 1 + ceil(c k)   a server that tells different clients
//                 different dropout sets still gets at most one of each client's two secrets
//                 from honest neighbours, plus the shares colluding clients hand over;
//   correctness:  t <= floor(k (1 - d))   on the full graph: t of the k others survive when
//                 at most a share d of the clients drops; on a sparse graph which clients
//                 drop is random, so t <= floor(k (1 - d) - 3 sqrt(k d (1 - d))): the
//                 survivors among k neighbours, three standard deviations below their mean.
//   k starts at n - 1 for n <= 50 (the full graph), else at the even number >= 6 log2 n
//   (Bell et al.: k = O(log n)), and doubles (up to n - 1) until both hold; t is the smallest
//   secure threshold. An explicit degree or threshold overrides this; a threshold below the
//   security bound holds only against an honest-but-curious server, and Params says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal::privacy::secagg {

struct Params {
  uint32_t n = 0;          // clients in the graph (those that advertised keys)
  uint32_t degree = 0;     // neighbours per client, k
  uint32_t threshold = 0;  // shares that reconstruct a secret, t
  bool malicious_secure = true;  // t meets the security bound above
};

// degree_override / threshold_override: 0 = derive.
StatusOr<Params> DeriveParams(uint32_t n, double dropout, double corrupt, uint32_t degree_override = 0,
                              uint32_t threshold_override = 0);

// The sorted neighbours (indices in [0, n)) of `node` in H(degree, n) over the permutation of
// `seed`; the node itself is not among them.
std::vector<uint32_t> Neighbours(uint32_t n, uint32_t degree, uint64_t seed, uint32_t node);

}  // namespace shoal::privacy::secagg
