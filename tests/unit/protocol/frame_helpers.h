// Test helpers for protocol messages: decode a frame through VerifyFrame and DecodeMessage,
// expect a typed body, or expect a refusal with a reason.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "protocol/messages.h"

namespace shoal::protocol {

inline constexpr size_t kMaxFrame = size_t{4} << 20;

// The decoded message of `f`, which must pass VerifyFrame. Chunk views point into `f`: keep
// it alive while reading them.
inline StatusOr<Message> Decode(const Frame& f) {
  Verified v = VerifyFrame(f, kMaxFrame);
  EXPECT_TRUE(v.ok()) << v.reason;
  return DecodeMessage(v);
}

// The body of `f`, which must decode to a T.
template <typename T>
T DecodeAs(const Frame& f, MessageKind kind) {
  auto m = Decode(f);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return T{};
  EXPECT_EQ(m->kind, kind);
  EXPECT_TRUE(std::holds_alternative<T>(m->body));
  return std::holds_alternative<T>(m->body) ? std::get<T>(m->body) : T{};
}

// DecodeMessage refuses `f` with a Protocol error whose reason contains `why`.
inline ::testing::AssertionResult RefusedWith(const Frame& f, const std::string& why) {
  auto m = Decode(f);
  if (m.ok()) return ::testing::AssertionFailure() << "decoded; expected a refusal with '" << why << "'";
  if (m.status().code() != StatusCode::kProtocol) return ::testing::AssertionFailure() << m.status().ToString();
  if (m.status().message().find(why) == std::string::npos)
    return ::testing::AssertionFailure() << "refused with '" << m.status().message() << "', expected '" << why << "'";
  return ::testing::AssertionSuccess();
}

}  // namespace shoal::protocol
