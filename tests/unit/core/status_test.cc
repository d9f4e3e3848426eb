// Status / StatusOr and the propagation macros.

#include "shoal/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace shoal {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  struct Case {
    Status status;
    StatusCode code;
    const char* name;
  };
  const Case cases[] = {
      {Status::InvalidArgument("m"), StatusCode::kInvalidArgument, "InvalidArgument"},
      {Status::NotFound("m"), StatusCode::kNotFound, "NotFound"},
      {Status::IoError("m"), StatusCode::kIoError, "IoError"},
      {Status::Corruption("m"), StatusCode::kCorruption, "Corruption"},
      {Status::Protocol("m"), StatusCode::kProtocol, "Protocol"},
      {Status::Unavailable("m"), StatusCode::kUnavailable, "Unavailable"},
      {Status::Cancelled("m"), StatusCode::kCancelled, "Cancelled"},
      {Status::FailedPrecondition("m"), StatusCode::kFailedPrecondition, "FailedPrecondition"},
      {Status::Internal("m"), StatusCode::kInternal, "Internal"},
      {Status::PermissionDenied("m"), StatusCode::kPermissionDenied, "PermissionDenied"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.name;
    EXPECT_EQ(c.status.code(), c.code) << c.name;
    EXPECT_EQ(c.status.message(), "m") << c.name;
    EXPECT_EQ(StatusCodeName(c.code), c.name);
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
  }
}

TEST(StatusTest, WithContextPrependsAndKeepsCode) {
  Status s = Status::NotFound("digits.csv.gz").WithContext("loading dataset");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading dataset: digits.csv.gz");
  // OK stays OK, with no message.
  Status ok = Status::Ok().WithContext("ctx");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
}

TEST(StatusOrTest, HoldsValueOrError) {
  StatusOr<int> v(42);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(*v, 42);
  EXPECT_EQ(v.value(), 42);

  StatusOr<int> e(Status::Corruption("bad crc"));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(e.status().message(), "bad crc");
}

TEST(StatusOrTest, MoveOnlyValueAndArrow) {
  StatusOr<std::unique_ptr<std::string>> v(std::make_unique<std::string>("abc"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->size(), 3u);
  std::unique_ptr<std::string> taken = std::move(v).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, "abc");

  StatusOr<std::string> s(std::string("hello"));
  EXPECT_EQ(s->size(), 5u);
}

// Helpers for the macros: each records how far it got.
StatusOr<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

StatusOr<int> Quarter(int x, int* reached) {
  SHOAL_ASSIGN_OR_RETURN(int h, Half(x));
  *reached = 1;
  SHOAL_ASSIGN_OR_RETURN(int q, Half(h));  // two uses in one scope must not collide
  *reached = 2;
  return q;
}

Status CheckEven(int x, int* reached) {
  SHOAL_RETURN_IF_ERROR(Half(x).status());
  *reached = 1;
  return Status::Ok();
}

TEST(StatusMacrosTest, AssignOrReturnAssignsOnSuccess) {
  int reached = 0;
  StatusOr<int> q = Quarter(12, &reached);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, 3);
  EXPECT_EQ(reached, 2);
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesFirstError) {
  int reached = 0;
  StatusOr<int> q = Quarter(7, &reached);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.status().message(), "7 is odd");
  EXPECT_EQ(reached, 0);

  // Fails at the second step: 6 -> 3 -> odd.
  reached = 0;
  q = Quarter(6, &reached);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().message(), "3 is odd");
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, ReturnIfError) {
  int reached = 0;
  EXPECT_TRUE(CheckEven(4, &reached).ok());
  EXPECT_EQ(reached, 1);
  reached = 0;
  Status s = CheckEven(5, &reached);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reached, 0);
}

}  // namespace
}  // namespace shoal
