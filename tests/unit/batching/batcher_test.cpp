// The batcher driven turn by turn, as the workers' loops drive it, with a
// test Forward: what a turn joins, what it refuses, and how idle workers
// take a share. The forward scores a row as twice its value, so a mixed-up
// split shows.
#include "batching/batcher.h"

#include <gtest/gtest.h>

#include <thread>

namespace numaserve::batching {
namespace {

// One dense column per row.
features::Batch rows(std::initializer_list<float> values) {
  features::Batch b;
  b.rows = values.size();
  b.dense_width = 1;
  b.dense = values;
  return b;
}

// A Forward for the tests: runs `fn` on each batch and records its rows.
struct TestForward final : Forward {
  using Fn = std::function<Result<std::vector<float>>(const features::Batch&)>;
  explicit TestForward(Fn f) : fn(std::move(f)) {}
  Fn fn;
  mutable std::vector<std::size_t> calls;  // rows per forward
  Result<std::vector<float>> run(const features::Batch& b) const override {
    calls.push_back(b.rows);
    return fn(b);
  }
};

// Each row's score: twice its dense value.
std::shared_ptr<TestForward> doubling() {
  return std::make_shared<TestForward>([](const features::Batch& b) -> Result<std::vector<float>> {
    std::vector<float> out;
    for (float x : b.dense) out.push_back(2 * x);
    return out;
  });
}

// What a job's completion saw.
struct Seen {
  std::optional<Outcome> outcome;
};

Job job(std::shared_ptr<const Forward> forward, features::Batch batch, Seen& seen,
        Clock::time_point deadline = Clock::time_point::max()) {
  return Job{std::move(forward), std::move(batch), deadline, [&seen](Outcome&& o) { seen.outcome = std::move(o); }};
}

BatcherConfig config(std::size_t workers = 1) {
  BatcherConfig c;
  c.workers = workers;
  return c;
}

TEST(Batcher, WhatArrivedTogetherRunsAsOneForwardAndEachGetsItsScores) {
  auto f = doubling();
  Batcher b(config());
  Seen a, c, d;
  b.submit(0, job(f, rows({1, 2, 3}), a));
  b.submit(0, job(f, rows({10}), c));
  b.submit(0, job(f, rows({20, 30}), d));
  const Turn turn = b.run_turn(0);
  ASSERT_EQ(f->calls.size(), 1u);
  EXPECT_EQ(f->calls[0], 6u);
  ASSERT_TRUE(a.outcome && c.outcome && d.outcome);
  EXPECT_EQ(a.outcome->scores.value(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(c.outcome->scores.value(), (std::vector<float>{20}));
  EXPECT_EQ(d.outcome->scores.value(), (std::vector<float>{40, 60}));
  EXPECT_EQ(a.outcome->timing.batch_requests, 3u);
  // The batch is counted once, by its first request.
  EXPECT_TRUE(a.outcome->timing.first_of_batch);
  EXPECT_FALSE(c.outcome->timing.first_of_batch || d.outcome->timing.first_of_batch);
  EXPECT_EQ(a.outcome->timing.batch_items, 6u);
  EXPECT_FALSE(turn.more_work);
  EXPECT_FALSE(turn.wake_at);
}

TEST(Batcher, ATurnWithoutRequestsRunsNothing) {
  auto f = doubling();
  Batcher b(config());
  const Turn turn = b.run_turn(0);
  EXPECT_TRUE(f->calls.empty());
  EXPECT_FALSE(turn.more_work);
}

TEST(Batcher, BatchesStopAtMaxItemsAndTheRestRunsNextTurn) {
  auto f = doubling();
  auto c = config();
  c.max_batch_items = 4;
  Batcher b(c);
  Seen s1, s2, s3, big;
  b.submit(0, job(f, rows({1, 2}), s1));
  b.submit(0, job(f, rows({3, 4}), s2));
  b.submit(0, job(f, rows({5}), s3));
  EXPECT_TRUE(b.run_turn(0).more_work);
  EXPECT_FALSE(s3.outcome);
  EXPECT_FALSE(b.run_turn(0).more_work);
  ASSERT_TRUE(s3.outcome);
  EXPECT_EQ(s3.outcome->scores.value(), (std::vector<float>{10}));
  // A request larger than the limit runs, alone.
  b.submit(0, job(f, rows({1, 1, 1, 1, 1, 1}), big));
  b.run_turn(0);
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{4, 1, 6}));
  ASSERT_TRUE(big.outcome);
  EXPECT_EQ(big.outcome->scores.value().size(), 6u);
}

TEST(Batcher, ModelsAreNeverMixedInOneForward) {
  auto f = doubling(), other_model = doubling();
  Batcher b(config());
  Seen a, other, c;
  b.submit(0, job(f, rows({1}), a));
  b.submit(0, job(other_model, rows({2}), other));
  b.submit(0, job(f, rows({3}), c));
  EXPECT_TRUE(b.run_turn(0).more_work);
  ASSERT_TRUE(a.outcome && c.outcome);
  EXPECT_FALSE(other.outcome);
  b.run_turn(0);
  ASSERT_TRUE(other.outcome);
  EXPECT_EQ(other.outcome->scores.value(), (std::vector<float>{4}));
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{2}));
  EXPECT_EQ(other_model->calls, (std::vector<std::size_t>{1}));
}

TEST(Batcher, AFullQueueIsRefusedBeforeAnythingIsParsed) {
  auto f = doubling();
  auto c = config(2);
  c.queue_capacity = 2;
  Batcher b(c);
  Seen s1, s2;
  EXPECT_TRUE(b.admit(0).has_value());
  b.submit(0, job(f, rows({1}), s1));
  b.submit(0, job(f, rows({1}), s2));
  const auto refused = b.admit(0);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, Error::Code::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("queue full: 2 requests waiting for worker 0"), std::string::npos);
  EXPECT_TRUE(b.admit(1).has_value());  // bounds are per worker
  EXPECT_EQ(b.queue_depth(), 2u);
  b.run_turn(0);
  EXPECT_TRUE(b.admit(0).has_value());
}

TEST(Batcher, RequestsOlderThanTheQueueDelayAreRefusedNotRun) {
  auto f = doubling();
  auto c = config();
  c.max_queue_delay = std::chrono::milliseconds(20);
  Batcher b(c);
  Seen old;
  b.submit(0, job(f, rows({1}), old));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  // A worker whose oldest request is that stale takes no more.
  const auto refused = b.admit(0);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("has waited"), std::string::npos) << refused.error().message;
  b.run_turn(0);
  EXPECT_TRUE(f->calls.empty());
  ASSERT_TRUE(old.outcome);
  ASSERT_FALSE(old.outcome->scores.has_value());
  EXPECT_EQ(old.outcome->scores.error().code, Error::Code::kResourceExhausted);
  EXPECT_GE(old.outcome->timing.queue_seconds, 0.02);
}

TEST(Batcher, RowsThatWouldOutlastTheQueueDelayAreRefusedAtOnce) {
  // A forward of 1 ms per row, a queue delay of 30 ms.
  auto c = config();
  c.max_queue_delay = std::chrono::milliseconds(30);
  auto f = std::make_shared<TestForward>([](const features::Batch& batch) -> Result<std::vector<float>> {
    std::this_thread::sleep_for(std::chrono::milliseconds(batch.rows));
    return std::vector<float>(batch.rows, 0);
  });
  Batcher b(c);
  Seen first, ten, more;
  b.submit(0, job(f, rows({1, 1, 1, 1, 1}), first));
  b.run_turn(0);  // the worker learns its speed
  b.submit(0, job(f, rows({1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), ten));
  EXPECT_TRUE(b.admit(0).has_value());  // ~10 ms of forwards ahead of it
  b.submit(0, job(f, features::Batch{25, 1, std::vector<float>(25, 1), {}}, more));
  const auto refused = b.admit(0);  // ~35 ms ahead: more than it may wait
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("35 rows queued"), std::string::npos) << refused.error().message;
}

// A caller's deadline (a gRPC call's): a request queued past it is refused
// as exceeded and never run, while the rest of its batch runs; admission
// refuses at once what the queue ahead would outlast, or a deadline gone.
TEST(Batcher, RequestsPastTheirCallersDeadlineAreRefusedNotRun) {
  auto f = doubling();
  Batcher b(config());
  Seen late, on_time;
  const auto now = Clock::now();
  b.submit(0, job(f, rows({1}), late, now + std::chrono::milliseconds(5)));
  b.submit(0, job(f, rows({2}), on_time, now + std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  b.run_turn(0);
  ASSERT_TRUE(late.outcome && on_time.outcome);
  ASSERT_FALSE(late.outcome->scores.has_value());
  EXPECT_EQ(late.outcome->scores.error().code, Error::Code::kDeadlineExceeded);
  ASSERT_TRUE(on_time.outcome->scores.has_value());
  EXPECT_EQ(*on_time.outcome->scores, std::vector<float>{4});
  ASSERT_EQ(f->calls.size(), 1u);
  EXPECT_EQ(f->calls[0], 1u);  // the late request's row never reached the forward

  const auto gone = b.admit(0, 1, Clock::now() - std::chrono::milliseconds(1));
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code, Error::Code::kDeadlineExceeded);
  EXPECT_TRUE(b.admit(0, 1, Clock::now() + std::chrono::seconds(1)).has_value());
}

TEST(Batcher, ABatchDelayWaitsForMoreUntilItsDeadline) {
  auto f = doubling();
  auto c = config();
  c.max_batch_delay = std::chrono::milliseconds(50);
  Batcher b(c);
  Seen s1, s2;
  b.submit(0, job(f, rows({1}), s1));
  const Turn first = b.run_turn(0);
  ASSERT_TRUE(first.wake_at);
  EXPECT_TRUE(f->calls.empty());
  b.submit(0, job(f, rows({2}), s2));
  std::this_thread::sleep_until(*first.wake_at);
  b.run_turn(0);
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{2}));
}

TEST(Batcher, AWorkerWithRequestsLeavesIdleWorkersAShareAndWakesThem) {
  auto f = doubling();
  Batcher b(config(3));
  // Workers 1 and 2 had a turn with nothing to do: idle.
  b.run_turn(1);
  b.run_turn(2);
  std::vector<Seen> seen(6);
  for (std::size_t i = 0; i < seen.size(); ++i) b.submit(0, job(f, rows({static_cast<float>(i)}), seen[i]));
  const Turn turn = b.run_turn(0);
  EXPECT_EQ(turn.wake_workers, (std::vector<std::size_t>{1, 2}));
  EXPECT_TRUE(turn.more_work);
  EXPECT_EQ(f->calls.back(), 2u);  // its third of six
  b.run_turn(1);
  b.run_turn(2);
  EXPECT_EQ(f->calls.size(), 3u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    ASSERT_TRUE(seen[i].outcome) << i;
    EXPECT_EQ(seen[i].outcome->scores.value(), (std::vector<float>{2.0f * static_cast<float>(i)})) << i;
  }
  const auto stats = b.stats();
  EXPECT_EQ(stats[0].requests, 2u);
  EXPECT_EQ(stats[0].stolen, 0u);
  EXPECT_EQ(stats[1].stolen + stats[2].stolen, 4u);
  EXPECT_EQ(stats[1].forwards + stats[2].forwards, 2u);
}

TEST(Batcher, WithoutIdleWorkersNothingIsShared) {
  auto f = doubling();
  Batcher b(config(2));
  std::vector<Seen> seen(4);
  for (auto& s : seen) b.submit(0, job(f, rows({1}), s));
  const Turn turn = b.run_turn(0);  // worker 1 never had an empty turn
  EXPECT_TRUE(turn.wake_workers.empty());
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{4}));
}

TEST(Batcher, AnIdleWorkerTakesHalfOfABusyWorkersQueue) {
  auto f = doubling();
  auto c = config(2);
  c.max_batch_items = 100;
  Batcher b(c);
  std::vector<Seen> seen(4);
  for (auto& s : seen) b.submit(0, job(f, rows({1}), s));
  b.run_turn(1);  // worker 0 has not had its turn yet: worker 1 takes the older half
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{2}));
  EXPECT_TRUE(seen[0].outcome && seen[1].outcome);
  EXPECT_EQ(b.stats()[1].stolen, 2u);
  // Worker 1 sleeps now: worker 0 runs one of the two left and leaves it the other.
  EXPECT_EQ(b.run_turn(0).wake_workers, (std::vector<std::size_t>{1}));
  b.run_turn(1);
  EXPECT_TRUE(seen[2].outcome && seen[3].outcome);
  EXPECT_EQ(b.stats()[1].stolen, 3u);
}

TEST(Batcher, AFailedForwardFailsEveryRequestOfItsBatch) {
  auto f = std::make_shared<TestForward>([](const features::Batch&) -> Result<std::vector<float>> {
    return make_error(Error::Code::kInternal, "the model failed");
  });
  Batcher b(config());
  Seen a, c;
  b.submit(0, job(f, rows({1}), a));
  b.submit(0, job(f, rows({2}), c));
  b.run_turn(0);
  ASSERT_TRUE(a.outcome && c.outcome);
  ASSERT_FALSE(a.outcome->scores.has_value());
  ASSERT_FALSE(c.outcome->scores.has_value());
  EXPECT_EQ(a.outcome->scores.error().message, "the model failed");
  EXPECT_EQ(c.outcome->scores.error().code, Error::Code::kInternal);
}

TEST(Batcher, AForwardReturningTheWrongNumberOfScoresIsAnInternalError) {
  auto f = std::make_shared<TestForward>([](const features::Batch&) -> Result<std::vector<float>> {
    return std::vector<float>{1};
  });
  Batcher b(config());
  Seen a;
  b.submit(0, job(f, rows({1, 2}), a));
  b.run_turn(0);
  ASSERT_TRUE(a.outcome);
  ASSERT_FALSE(a.outcome->scores.has_value());
  EXPECT_EQ(a.outcome->scores.error().code, Error::Code::kInternal);
}

// Priority levels: two levels unless a test says otherwise, one row per
// request and one request per forward where the order is what is tested.
BatcherConfig levels(std::size_t count = 2) {
  BatcherConfig c = config();
  c.priority_levels = count;
  c.policies.assign(count, LevelPolicy{});
  return c;
}

Job job_at(std::size_t priority, std::shared_ptr<const Forward> forward, float value, Seen& seen) {
  Job j = job(std::move(forward), rows({value}), seen);
  j.priority = priority;
  return j;
}

TEST(BatcherPriority, AHigherLevelRunsFirstWhateverCameFirst) {
  auto f = doubling();
  auto c = levels();
  c.max_batch_items = 1;
  Batcher b(c);
  Seen low, high;
  b.submit(0, job_at(2, f, 1, low));
  b.submit(0, job_at(1, f, 2, high));
  b.run_turn(0);
  ASSERT_TRUE(high.outcome);
  EXPECT_FALSE(low.outcome);
  EXPECT_EQ(*high.outcome->scores, std::vector<float>{4});
  b.run_turn(0);
  ASSERT_TRUE(low.outcome);
  EXPECT_EQ(*low.outcome->scores, std::vector<float>{2});
}

TEST(BatcherPriority, ABatchHoldsOneLevelAndALowerOneRunsAloneWhileAHigherHasTraffic) {
  auto f = doubling();
  auto c = levels();
  c.higher_level_active = std::chrono::minutes(1);  // "just now", however slow this machine is today
  Batcher b(c);
  Seen high_1, high_2, low_1, low_2;
  b.submit(0, job_at(2, f, 1, low_1));
  b.submit(0, job_at(1, f, 2, high_1));
  b.submit(0, job_at(2, f, 3, low_2));
  b.submit(0, job_at(1, f, 4, high_2));
  b.run_turn(0);  // level 1's two, without the level-2 rows the forward had room for
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{2}));
  ASSERT_TRUE(high_1.outcome && high_2.outcome);
  EXPECT_EQ(*high_2.outcome->scores, std::vector<float>{8});
  EXPECT_FALSE(low_1.outcome);
  b.run_turn(0);  // level 1 had traffic just now: one level-2 request per forward
  b.run_turn(0);
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{2, 1, 1}));
  ASSERT_TRUE(low_1.outcome && low_2.outcome);
  EXPECT_EQ(*low_2.outcome->scores, std::vector<float>{6});
}

TEST(BatcherPriority, AHigherLevelsRequestAsksForTheTurnAtOnceALowestOneDoesNot) {
  auto f = doubling();
  Batcher b(levels(3));
  Seen lowest, middle;
  b.submit(0, job_at(3, f, 1, lowest));
  EXPECT_FALSE(b.turn_due(0));  // the lowest level batches with what the loop reads next
  b.submit(0, job_at(2, f, 2, middle));
  EXPECT_TRUE(b.turn_due(0));
  b.run_turn(0);
  EXPECT_FALSE(b.turn_due(0));
  ASSERT_TRUE(middle.outcome);

  Batcher one_level(config());  // today's behaviour: batches grow under load
  Seen alone;
  one_level.submit(0, job(f, rows({1}), alone));
  EXPECT_FALSE(one_level.turn_due(0));
  auto delayed = levels();
  delayed.max_batch_delay = std::chrono::milliseconds(5);  // a batch waits on purpose
  Batcher waiting(delayed);
  Seen high;
  waiting.submit(0, job_at(1, f, 1, high));
  EXPECT_FALSE(waiting.turn_due(0));
}

TEST(BatcherPriority, ALowerLevelAloneBatchesAsUsual) {
  auto f = doubling();
  Batcher b(levels());
  Seen low_1, low_2;
  b.submit(0, job_at(2, f, 1, low_1));
  b.submit(0, job_at(2, f, 2, low_2));
  b.run_turn(0);
  EXPECT_EQ(f->calls, (std::vector<std::size_t>{2}));
}

TEST(BatcherPriority, AFullQueueRefusesTheNewestOfTheLowestLevelNeverAHigherOne) {
  auto f = doubling();
  auto c = levels(3);
  c.queue_capacity = 3;
  Batcher b(c);
  Seen two_old, three_old, three_new, one;
  b.submit(0, job_at(2, f, 1, two_old));
  b.submit(0, job_at(3, f, 2, three_old));
  b.submit(0, job_at(3, f, 3, three_new));
  const auto refused = b.admit(0, 3);  // nothing below level 3 to take the place of
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, Error::Code::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("queue full"), std::string::npos) << refused.error().message;
  ASSERT_TRUE(b.admit(0, 1).has_value());
  b.submit(0, job_at(1, f, 4, one));
  EXPECT_EQ(b.queue_depth(), 3u);
  for (int turn = 0; turn < 3; ++turn) b.run_turn(0);  // a level a turn
  ASSERT_TRUE(three_new.outcome);
  ASSERT_FALSE(three_new.outcome->scores.has_value());
  EXPECT_EQ(three_new.outcome->scores.error().code, Error::Code::kResourceExhausted);
  EXPECT_NE(three_new.outcome->scores.error().message.find("higher-priority request took this priority-3"),
            std::string::npos)
      << three_new.outcome->scores.error().message;
  for (Seen* s : {&one, &two_old, &three_old}) {
    ASSERT_TRUE(s->outcome && s->outcome->scores.has_value());
  }
  EXPECT_EQ(*one.outcome->scores, std::vector<float>{8});
  const auto stats = b.level_stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].answered, 1u);
  EXPECT_EQ(stats[0].refused, 0u);
  EXPECT_EQ(stats[1].answered, 1u);
  EXPECT_EQ(stats[2].answered, 1u);
  EXPECT_EQ(stats[2].refused, 2u);  // the admission and the request taken over
  EXPECT_EQ(stats[2].queued, 0u);
}

TEST(BatcherPriority, ALevelsOwnQueueLimitRefusesItAloneAndIsCounted) {
  auto f = doubling();
  auto c = levels();
  c.policies[1].max_queue_size = 1;
  Batcher b(c);
  Seen low;
  b.submit(0, job_at(2, f, 1, low));
  const auto refused = b.admit(0, 2);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("priority-2 has 1 requests waiting"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(b.admit(0, 1).has_value());
  EXPECT_EQ(b.level_stats()[1].refused, 1u);
  EXPECT_EQ(b.level_stats()[1].queued, 1u);
  EXPECT_FALSE(b.admit(0, 2, Clock::time_point::max(), false).has_value());
  EXPECT_EQ(b.level_stats()[1].refused, 1u);  // not counted when asked not to
}

TEST(BatcherPriority, PastItsTimeoutARejectLevelIsRefusedAndADelayLevelRunsLast) {
  auto f = doubling();
  auto c = levels();
  c.max_batch_items = 1;
  // Wide margins: the request still in time must be run within 300 ms of
  // its submission, however loaded the machine.
  c.policies[0].timeout = std::chrono::milliseconds(300);
  c.policies[1].timeout = std::chrono::milliseconds(300);
  c.policies[1].timeout_action = TimeoutAction::kDelay;
  Batcher b(c);
  Seen rejected, late, in_time;
  b.submit(0, job_at(1, f, 1, rejected));
  b.submit(0, job_at(2, f, 2, late));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  b.submit(0, job_at(2, f, 3, in_time));
  b.run_turn(0);
  ASSERT_TRUE(rejected.outcome);
  EXPECT_EQ(rejected.outcome->scores.error().code, Error::Code::kResourceExhausted);
  EXPECT_NE(rejected.outcome->scores.error().message.find("priority-1 limit of 300 ms"), std::string::npos)
      << rejected.outcome->scores.error().message;
  ASSERT_TRUE(in_time.outcome);  // the delayed one waits behind it
  EXPECT_FALSE(late.outcome);
  b.run_turn(0);
  ASSERT_TRUE(late.outcome && late.outcome->scores.has_value());
  EXPECT_EQ(*late.outcome->scores, std::vector<float>{4});
}

TEST(BatcherPriority, ARequestsOwnTimeoutIsKeptBelowItsLevels) {
  auto f = doubling();
  Batcher b(levels());
  Seen own, level;
  Job j = job_at(1, f, 1, own);
  j.timeout = std::chrono::milliseconds(5);
  b.submit(0, std::move(j));
  b.submit(0, job_at(1, f, 2, level));  // its level's: max_queue_delay, a second
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  b.run_turn(0);
  ASSERT_TRUE(own.outcome && level.outcome);
  EXPECT_EQ(own.outcome->scores.error().code, Error::Code::kResourceExhausted);
  EXPECT_TRUE(level.outcome->scores.has_value());
}

TEST(BatcherPriority, AConfigurationThatContradictsItselfNamesTheOption) {
  auto c = levels();
  EXPECT_TRUE(c.check().has_value());
  EXPECT_EQ(c.default_level(), 2u);  // unset: the lowest
  c.policies[1].max_queue_size = c.queue_capacity + 1;
  ASSERT_FALSE(c.check().has_value());
  EXPECT_EQ(c.check().error().field, "priority_level");
  c = levels();
  c.policies.resize(3);  // a level's policy beyond the levels
  ASSERT_FALSE(c.check().has_value());
  EXPECT_EQ(c.check().error().field, "priority_level");
  c = levels();
  c.default_priority = 3;
  ASSERT_FALSE(c.check().has_value());
  EXPECT_EQ(c.check().error().field, "default_priority");
}

}  // namespace
}  // namespace numaserve::batching
