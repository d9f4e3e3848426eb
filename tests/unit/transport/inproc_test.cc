// The in-process network: the same bytes as ZeroMQ, with latency, bandwidth, loss and
// disconnects injected as configured (and loss reproducible from the seed).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "transport/inproc/network.h"

namespace shoal::transport::inproc {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const Message& m) { return {m.bytes().begin(), m.bytes().end()}; }
SharedFrame Shared(const std::string& s) { return std::make_shared<const std::vector<uint8_t>>(Bytes(s)); }

TEST(Inproc, CarriesFramesBothWaysAndCountsThem) {
  auto net = Network::Create(1);
  auto listener = net->Listen("agg").value();
  EXPECT_EQ(listener->endpoint(), "inproc-sim://agg");
  EXPECT_FALSE(listener->secure());
  auto a = net->Connect("agg");
  auto b = net->Connect("agg");
  ASSERT_TRUE(a->Send(Bytes("from a"), milliseconds(100)).ok());
  ASSERT_TRUE(b->Send(Bytes("from b"), milliseconds(100)).ok());
  auto in1 = listener->Recv(milliseconds(100)).value();
  auto in2 = listener->Recv(milliseconds(100)).value();
  ASSERT_TRUE(in1 && in2);
  EXPECT_EQ(Text(in1->frame), "from a");
  EXPECT_EQ(Text(in2->frame), "from b");
  EXPECT_NE(in1->peer, in2->peer);
  EXPECT_TRUE(in1->user_id.empty());
  ASSERT_TRUE(listener->Send(in2->peer, Shared("to b")).value());
  EXPECT_FALSE(a->Recv(milliseconds(20)).value());
  auto got = b->Recv(milliseconds(100)).value();
  ASSERT_TRUE(got);
  EXPECT_EQ(Text(*got), "to b");
  EXPECT_EQ(listener->traffic().frames_received, 2u);
  EXPECT_EQ(listener->traffic().bytes_received, 12u);
  EXPECT_EQ(listener->traffic().bytes_sent, 4u);
  EXPECT_EQ(b->traffic().bytes_received, 4u);
  EXPECT_EQ(net->stats().frames_delivered, 3u);
}

TEST(Inproc, ANameHasOneListenerAndNoListenerMeansUnavailable) {
  auto net = Network::Create(1);
  auto c = net->Connect("nobody");
  Status st = c->Send(Bytes("x"), milliseconds(20));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  {
    auto l = net->Listen("agg").value();
    auto again = net->Listen("agg");
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.status().message().find("already in use"), std::string::npos);
  }
  EXPECT_TRUE(net->Listen("agg").ok());  // free again once the first listener is gone
}

TEST(Inproc, LatencyDelaysEveryFrame) {
  auto net = Network::Create(1);
  auto listener = net->Listen("agg").value();
  LinkProfile up;
  up.latency = milliseconds(40);
  auto c = net->Connect("agg", up);
  const auto sent = Clock::now();
  ASSERT_TRUE(c->Send(Bytes("late"), milliseconds(100)).ok());
  EXPECT_FALSE(listener->Recv(milliseconds(0)).value());  // not there yet
  auto in = listener->Recv(milliseconds(500)).value();
  ASSERT_TRUE(in);
  EXPECT_GE(Clock::now() - sent, milliseconds(40));
}

TEST(Inproc, BandwidthSerializesFramesInOrder) {
  auto net = Network::Create(1);
  auto listener = net->Listen("agg").value();
  auto c = net->Connect("agg");
  ASSERT_TRUE(c->Send(Bytes("hello"), milliseconds(100)).ok());
  const std::string peer = listener->Recv(milliseconds(100)).value()->peer;
  // The down link of this connection is fast; a second, slow one shows the rate.
  LinkProfile slow;
  slow.bytes_per_second = 100000;  // 100 kB/s: three 10 kB frames take 0.3 s
  auto s = net->Connect("agg", {}, slow);
  ASSERT_TRUE(s->Send(Bytes("hi"), milliseconds(100)).ok());
  const std::string slow_peer = listener->Recv(milliseconds(100)).value()->peer;
  const auto start = Clock::now();
  for (int i = 0; i < 3; ++i) {
    auto f = std::make_shared<const std::vector<uint8_t>>(10000, static_cast<uint8_t>(i));
    ASSERT_TRUE(listener->Send(slow_peer, f).value());
  }
  ASSERT_TRUE(listener->Send(peer, Shared("fast")).value());
  auto fast = c->Recv(milliseconds(1000)).value();
  ASSERT_TRUE(fast);
  // Not held up behind the slow link: the slow frames are not all through yet (they need 0.3 s).
  int slow_through = 0;
  while (auto m = s->Recv(milliseconds(0)).value()) {
    ++slow_through;
    EXPECT_EQ(m->bytes()[0], slow_through - 1);
  }
  EXPECT_LT(slow_through, 3);
  for (int i = slow_through; i < 3; ++i) {
    auto m = s->Recv(milliseconds(1000)).value();
    ASSERT_TRUE(m) << "frame " << i;
    EXPECT_EQ(m->bytes()[0], i);
  }
  EXPECT_GE(Clock::now() - start, milliseconds(295));
}

// Which of 200 frames arrive, over a link that loses 30% of them.
std::vector<bool> Arrivals(uint64_t seed) {
  auto net = Network::Create(seed);
  auto listener = net->Listen("agg").value();
  LinkProfile lossy;
  lossy.loss = 0.3;
  auto c = net->Connect("agg", lossy);
  for (int i = 0; i < 200; ++i) EXPECT_TRUE(c->Send(std::vector<uint8_t>{static_cast<uint8_t>(i)}, milliseconds(10)).ok());
  std::vector<bool> arrived(200, false);
  while (auto in = listener->Recv(milliseconds(0)).value()) arrived[in->frame.bytes()[0]] = true;
  EXPECT_EQ(net->stats().frames_lost + net->stats().frames_delivered, 200u);
  return arrived;
}

TEST(Inproc, LossFollowsTheSeed) {
  const auto a = Arrivals(7), b = Arrivals(7), c = Arrivals(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const auto n = std::count(a.begin(), a.end(), true);
  EXPECT_GT(n, 110);  // 140 expected; a binomial(200, 0.7) is outside [110, 170] with p < 1e-5
  EXPECT_LT(n, 170);
}

// A link held down (LinkProfile::down) loses what is sent either way while down, keeps the
// connection (same routing id), and carries frames again once up; what left before it went
// down still arrives.
TEST(Inproc, ALinkHeldDownLosesWhatIsSentWhileDownAndNothingElse) {
  auto net = Network::Create(1);
  auto listener = net->Listen("agg").value();
  auto down = std::make_shared<std::atomic<bool>>(false);
  LinkProfile up_link, down_link;
  up_link.down = down_link.down = down;
  up_link.latency = milliseconds(20);
  auto c = net->Connect("agg", up_link, down_link);
  ASSERT_TRUE(c->Send(Bytes("before"), milliseconds(100)).ok());
  *down = true;  // "before" is on the wire
  ASSERT_TRUE(c->Send(Bytes("lost up"), milliseconds(100)).ok());
  auto in = listener->Recv(milliseconds(200)).value();
  ASSERT_TRUE(in);
  EXPECT_EQ(Text(in->frame), "before");
  const std::string peer = in->peer;
  EXPECT_TRUE(listener->Send(peer, Shared("lost down")).value());
  EXPECT_FALSE(listener->Recv(milliseconds(60)).value());
  EXPECT_FALSE(c->Recv(milliseconds(10)).value());
  EXPECT_EQ(net->stats().frames_lost, 2u);
  *down = false;
  ASSERT_TRUE(c->Send(Bytes("after"), milliseconds(100)).ok());
  in = listener->Recv(milliseconds(200)).value();
  ASSERT_TRUE(in);
  EXPECT_EQ(Text(in->frame), "after");
  EXPECT_EQ(in->peer, peer) << "the connection stayed open";
  EXPECT_TRUE(listener->Send(peer, Shared("back")).value());
  auto back = c->Recv(milliseconds(100)).value();
  ASSERT_TRUE(back);
  EXPECT_EQ(Text(*back), "back");
}

TEST(Inproc, ACutConnectionIsGoneAndTheChannelReconnectsUnderANewId) {
  auto net = Network::Create(1);
  auto listener = net->Listen("agg").value();
  auto c = net->Connect("agg");
  ASSERT_TRUE(c->Send(Bytes("one"), milliseconds(100)).ok());
  const std::string first = listener->Recv(milliseconds(100)).value()->peer;
  ASSERT_TRUE(listener->Send(first, Shared("queued")).value());
  EXPECT_TRUE(net->Cut(first));
  EXPECT_FALSE(net->Cut(first));
  EXPECT_FALSE(c->Recv(milliseconds(10)).value());  // the queued frame went with the connection
  EXPECT_EQ(listener->Send(first, Shared("x")).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(c->Send(Bytes("two"), milliseconds(100)).ok());
  auto in = listener->Recv(milliseconds(100)).value();
  ASSERT_TRUE(in);
  EXPECT_EQ(Text(in->frame), "two");
  EXPECT_NE(in->peer, first);
  EXPECT_GE(net->stats().frames_cut, 1u);
}

// A listener and a channel with 30 ms of up-link latency that has said "first" (received):
// frames the channel sends next are in flight for 30 ms.
struct SlowLink {
  std::shared_ptr<Network> net = Network::Create(1);
  std::unique_ptr<Listener> listener = net->Listen("agg").value();
  std::unique_ptr<Channel> channel;
  std::string peer;
  SlowLink() {
    LinkProfile slow;
    slow.latency = milliseconds(30);
    channel = net->Connect("agg", slow);
    EXPECT_TRUE(channel->Send(Bytes("first"), milliseconds(100)).ok());
    auto in = listener->Recv(milliseconds(200)).value();
    EXPECT_TRUE(in);
    if (in) peer = in->peer;
  }
};

TEST(Inproc, ADestroyedChannelIsUnreachableButWhatItSentArrives) {
  SlowLink l;
  ASSERT_TRUE(l.channel->Send(Bytes("last words"), milliseconds(100)).ok());
  l.channel.reset();  // as a socket closed with linger: the frame in flight is still delivered
  auto last = l.listener->Recv(milliseconds(200)).value();
  ASSERT_TRUE(last);
  EXPECT_EQ(Text(last->frame), "last words");
  EXPECT_EQ(l.listener->Send(l.peer, Shared("x")).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(l.listener->handshakes().disconnected, 1u);
}

TEST(Inproc, ACutDropsFramesInFlightTowardsTheListener) {
  SlowLink l;
  ASSERT_TRUE(l.channel->Send(Bytes("lost"), milliseconds(100)).ok());
  ASSERT_TRUE(l.net->Cut(l.peer));
  EXPECT_FALSE(l.listener->Recv(milliseconds(60)).value());
  EXPECT_EQ(l.net->stats().frames_cut, 1u);
}

TEST(Inproc, ReceiverThreadsWakeForFramesFromOtherThreads) {
  auto net = Network::Create(1);
  auto listener = net->Listen("agg").value();
  constexpr int kClients = 8, kFrames = 50;
  std::vector<std::thread> threads;
  std::atomic<bool> read_all{false};
  for (int t = 0; t < kClients; ++t)
    threads.emplace_back([&net, &read_all] {
      auto c = net->Connect("agg");
      for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(c->Send(Bytes("f"), milliseconds(100)).ok());
      // Keep the connection open until the listener has read everything (or given up).
      while (!read_all) std::this_thread::sleep_for(milliseconds(1));
    });
  int got = 0;
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (got < kClients * kFrames && Clock::now() < until)
    if (listener->Recv(milliseconds(50)).value()) ++got;
  read_all = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(got, kClients * kFrames);
}

}  // namespace
}  // namespace shoal::transport::inproc
