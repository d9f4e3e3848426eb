// The recorder that the aggregator and the peer share: a round's and a step's metrics line
// from their typed reports plus the caller's extras, an edge's line without test fields, the
// checkpoint made only when one is kept, resuming that drops the lines past the checkpoint,
// and a failed write that names the file.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "runtime/recorder.h"
#include "temp_dir.h"

namespace shoal::runtime {
namespace {

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  return lines;
}

RoundReport Round(uint64_t n) {
  RoundReport r;
  r.round = n;
  r.clients_selected = 3;
  r.clients_reported = 2;
  r.test_accuracy = 0.5 + 0.01 * static_cast<double>(n);
  r.test_loss = 1.0 / static_cast<double>(n);
  r.model_hash = "h" + std::to_string(n);
  r.strategy_metrics = {{"epsilon", 1.5}};
  r.evaluation_metrics = {{"worst_class_accuracy", 0.25}};
  r.rejected_by_code = {{"bad_signature", 2}};
  return r;
}

Checkpoint State(uint64_t round, int* calls) {
  ++*calls;
  Checkpoint ck;
  ck.round = round;
  ck.model_spec = "linear";
  ck.params = ParameterArena(std::vector<TensorSpec>{{"w", {2}}});
  ck.params.span()[0] = 3.0f;
  return ck;
}

TEST(Recorder, ARoundsLineHoldsItsReportThenTheExtras) {
  testing::TempDir dir;
  RecorderOptions o;
  o.metrics_out = dir.path() + "/run.jsonl";
  auto rec = Recorder::Open(o).value();
  int calls = 0;
  ASSERT_TRUE(rec->Record(Round(1), {{"client_eval_accuracy", 0.75}}, [&] { return State(1, &calls); }).ok());
  EXPECT_EQ(calls, 0) << "no checkpoint is kept: the state is never made";
  const auto lines = ReadLines(o.metrics_out);
  ASSERT_EQ(lines.size(), 1u);
  const auto& l = lines[0];
  EXPECT_EQ(l["round"], 1);
  EXPECT_EQ(l["clients_selected"], 3);
  EXPECT_EQ(l["clients_reported"], 2);
  EXPECT_DOUBLE_EQ(l["test_accuracy"].get<double>(), 0.51);
  EXPECT_DOUBLE_EQ(l["test_loss"].get<double>(), 1.0);
  EXPECT_EQ(l["model_hash"], "h1");
  EXPECT_DOUBLE_EQ(l["epsilon"].get<double>(), 1.5);                    // the strategy's own
  EXPECT_DOUBLE_EQ(l["eval_worst_class_accuracy"].get<double>(), 0.25);  // the evaluator's, prefixed
  EXPECT_EQ(l["rejected_by_code"]["bad_signature"], 2);
  EXPECT_DOUBLE_EQ(l["client_eval_accuracy"].get<double>(), 0.75);       // the extra
}

TEST(Recorder, AnEdgesLineHasNoTestFields) {
  const nlohmann::json root = RoundLine(Round(2), true), edge = RoundLine(Round(2), false);
  EXPECT_TRUE(root.contains("test_accuracy") && root.contains("test_loss"));
  EXPECT_FALSE(edge.contains("test_accuracy") || edge.contains("test_loss"));
  EXPECT_EQ(edge["clients_reported"], 2);
}

TEST(Recorder, CheckpointsEachRoundAndResumingDropsTheLinesPastIt) {
  testing::TempDir dir;
  RecorderOptions o;
  o.metrics_out = dir.path() + "/run.jsonl";
  o.checkpoint_path = dir.path() + "/ck/checkpoint.shoal";
  int calls = 0;
  {
    auto rec = Recorder::Open(o).value();
    for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(rec->Record(Round(n), {}, [&] { return State(n, &calls); }).ok());
  }
  EXPECT_EQ(calls, 3);
  auto ck = ReadCheckpoint(o.checkpoint_path);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->round, 3u);
  EXPECT_EQ(ck->params.span()[0], 3.0f);

  // A crash after round 3's line and before its checkpoint: the run resumes from round 2.
  o.resume_after = 2;
  {
    auto rec = Recorder::Open(o).value();
    ASSERT_TRUE(rec->Record(Round(3), {{"again", true}}, [&] { return State(3, &calls); }).ok());
  }
  const auto lines = ReadLines(o.metrics_out);
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lines[i]["round"], i + 1);
  EXPECT_TRUE(lines[2].contains("again")) << "round 3 appears once, as written after the resume";
}

TEST(Recorder, AStepsLineHoldsItsStepAndItsEvaluation) {
  testing::TempDir dir;
  RecorderOptions o;
  o.metrics_out = dir.path() + "/peer.jsonl";
  auto rec = Recorder::Open(o).value();
  PeerStep s;
  s.step = 7;
  s.members = 3;
  s.included = 2;
  s.loss = 0.5;
  s.model_hash = "abc";
  ASSERT_TRUE(rec->Record(s, {{"mode", "allgather"}}).ok());
  s.step = 8;
  s.eval = EvalResult{.loss = 0.25, .accuracy = 0.9};
  s.eval_held_out = true;
  ASSERT_TRUE(rec->Record(s, {}).ok());
  s.step = 9;
  s.eval_held_out = false;  // the application trainer's own evaluation
  ASSERT_TRUE(rec->Record(s, {}).ok());
  const auto lines = ReadLines(o.metrics_out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["step"], 7);
  EXPECT_EQ(lines[0]["members"], 3);
  EXPECT_EQ(lines[0]["mode"], "allgather");
  EXPECT_FALSE(lines[0].contains("test_accuracy") || lines[0].contains("eval_accuracy"));
  EXPECT_DOUBLE_EQ(lines[1]["test_accuracy"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(lines[2]["eval_accuracy"].get<double>(), 0.9);
  EXPECT_FALSE(lines[2].contains("test_accuracy"));
}

TEST(Recorder, AFailedWriteNamesTheFile) {
  if (!std::ifstream("/dev/full")) GTEST_SKIP() << "no /dev/full";
  RecorderOptions o;
  o.metrics_out = "/dev/full";
  auto rec = Recorder::Open(o).value();
  Status st = rec->Record(Round(1), {}, [] { return Checkpoint{}; });
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("--metrics-out /dev/full"), std::string::npos) << st.message();
  o.metrics_out = "/nonexistent-dir/run.jsonl";
  auto bad = Recorder::Open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot open --metrics-out /nonexistent-dir/run.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace shoal::runtime
