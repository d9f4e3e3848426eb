// The thread group (sdk/src/backend/collective.h) against a naive reference: sums in rank
// order with the same bits on every rank, broadcast, reuse, and failure without a hang (a rank
// that aborts, ranks that disagree on sizes).
#include "backend/collective.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "core/rng.h"

namespace shoal {
namespace {

// Runs body(rank) on one thread per rank; fails the test instead of hanging.
std::vector<Status> OnEveryRank(std::vector<std::unique_ptr<Collective>>& group,
                                const std::function<Status(Collective&)>& body) {
  std::vector<std::future<Status>> runs;
  for (auto& c : group) runs.push_back(std::async(std::launch::async, [&body, &c] { return body(*c); }));
  std::vector<Status> out;
  for (auto& r : runs) {
    if (r.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "a rank hung";
      std::abort();  // its thread still waits: nothing else can be trusted
    }
    out.push_back(r.get());
  }
  return out;
}

// Values whose float sum depends on the order: large and tiny, both signs.
std::vector<float> Values(int rank, size_t n, uint64_t call) {
  Rng rng(1000 * call + static_cast<uint64_t>(rank), 0);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal() * (rng.NextU64() % 2 ? 1e6 : 1e-3));
  return v;
}

TEST(Collective, ThreadGroupSumsInRankOrderWithTheSameBitsOnEveryRank) {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    auto group = MakeThreadGroup(ranks);
    ASSERT_EQ(group.size(), static_cast<size_t>(ranks));
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{100003}}) {
      for (uint64_t call = 0; call < 3; ++call) {  // the group is reused
        std::vector<std::vector<float>> data(static_cast<size_t>(ranks));
        std::vector<float> want(n, 0.0f);
        for (int r = 0; r < ranks; ++r) {
          data[static_cast<size_t>(r)] = Values(r, n, call);
          for (size_t i = 0; i < n; ++i) want[i] = r == 0 ? data[0][i] : want[i] + data[static_cast<size_t>(r)][i];
        }
        const auto st = OnEveryRank(group, [&](Collective& c) {
          EXPECT_EQ(c.size(), ranks);
          return c.AllReduceSum(data[static_cast<size_t>(c.rank())]);
        });
        for (int r = 0; r < ranks; ++r) {
          ASSERT_TRUE(st[static_cast<size_t>(r)].ok()) << st[static_cast<size_t>(r)].message();
          ASSERT_TRUE(n == 0 || std::memcmp(data[static_cast<size_t>(r)].data(), want.data(), n * sizeof(float)) == 0)
              << ranks << " ranks, " << n << " values, rank " << r;
        }
      }
    }
  }
  EXPECT_TRUE(MakeThreadGroup(0).empty());
}

TEST(Collective, ThreadGroupBroadcastsTheRootsValues) {
  auto group = MakeThreadGroup(4);
  std::vector<std::vector<float>> data;
  for (int r = 0; r < 4; ++r) data.push_back(Values(r, 1001, 9));
  const std::vector<float> root = data[2];
  const auto st = OnEveryRank(group, [&](Collective& c) { return c.Broadcast(data[static_cast<size_t>(c.rank())], 2); });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[static_cast<size_t>(r)].ok());
    EXPECT_EQ(data[static_cast<size_t>(r)], root) << r;
  }
}

TEST(Collective, AnAbortingRankEndsEveryRanksCallsWithoutAHang) {
  auto group = MakeThreadGroup(3);
  std::vector<float> buf(10, 1.0f);
  const auto st = OnEveryRank(group, [&](Collective& c) -> Status {
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others are waiting
      c.Abort(Status::Internal("rank 2 ran out of memory"));
      return Status::Internal("rank 2 ran out of memory");
    }
    std::vector<float> mine(buf);
    return c.AllReduceSum(mine);
  });
  for (const Status& s : st) EXPECT_EQ(s.message(), "rank 2 ran out of memory");
  std::vector<float> later(3, 0.0f);
  EXPECT_EQ(group[0]->AllReduceSum(later).message(), "rank 2 ran out of memory") << "later calls fail at once";
}

TEST(Collective, RanksThatDisagreeOnTheSizeFailTogether) {
  auto group = MakeThreadGroup(3);
  const auto st = OnEveryRank(group, [&](Collective& c) {
    std::vector<float> mine(c.rank() == 1 ? 5 : 6, 1.0f);
    return c.AllReduceSum(mine);
  });
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "rank 1 passed 5 values, rank 0 6");
  }
  const auto bad_root = OnEveryRank(group, [&](Collective& c) {
    std::vector<float> mine(4, 1.0f);
    return c.Broadcast(mine, 0);
  });
  for (const Status& s : bad_root) EXPECT_FALSE(s.ok()) << "the group stays aborted";
}

}  // namespace
}  // namespace shoal
