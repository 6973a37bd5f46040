// The scheduler with a plain function as the forward: queue bounds, dynamic
// batching, ordering of scores, shutdown. The forward here computes each
// row's score from its own input, so a mixed-up split shows.
#include "batching/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <set>

namespace numaserve::batching {
namespace {

// One dense column; the "model" scores a row as 2x its value.
features::Batch rows(std::initializer_list<float> values) {
  features::Batch b;
  b.rows = values.size();
  b.dense_width = 1;
  b.dense = values;
  return b;
}

struct Recorder {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, std::size_t>> batches;  // rows, requests
  std::atomic<int> started{0};
};

ForwardFn doubling(Recorder& r, std::chrono::milliseconds delay = {}) {
  return [&r, delay](std::size_t, const features::Batch& b, std::size_t requests) -> Result<std::vector<float>> {
    {
      std::lock_guard lock(r.mutex);
      r.batches.emplace_back(b.rows, requests);
    }
    std::this_thread::sleep_for(delay);
    std::vector<float> out;
    for (float x : b.dense) out.push_back(2 * x);
    return out;
  };
}

// One worker gathering dynamic batches of at most `items` rows.
SchedulerConfig batching(std::size_t items, std::chrono::milliseconds delay) {
  SchedulerConfig config;
  config.workers = 1;
  config.dynamic_batching = true;
  config.max_batch_items = items;
  config.max_delay = delay;
  return config;
}

TEST(Scheduler, EachRequestGetsItsOwnScores) {
  Recorder r;
  SchedulerConfig config;
  config.workers = 2;
  Scheduler s(config, doubling(r), nullptr);
  auto a = s.submit(0, rows({1, 2, 3}));
  auto b = s.submit(0, rows({10}));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get().scores.value(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(b->get().scores.value(), (std::vector<float>{20}));
}

TEST(Scheduler, WorkersStartThroughTheHookWithTheirIndex) {
  Recorder r;
  std::mutex mutex;
  std::set<std::size_t> seen;
  std::latch started(3);
  SchedulerConfig config;
  config.workers = 3;
  Scheduler s(config, doubling(r), [&](std::size_t worker) {
    std::lock_guard lock(mutex);
    seen.insert(worker);
    started.count_down();
  });
  started.wait();
  EXPECT_EQ(seen, (std::set<std::size_t>{0, 1, 2}));
}

TEST(Scheduler, AFullQueueRefusesAtOnce) {
  Recorder r;
  SchedulerConfig config;
  config.workers = 1;
  config.queue_capacity = 2;
  Scheduler s(config, doubling(r, std::chrono::milliseconds(200)), nullptr);
  auto running = s.submit(0, rows({1}));
  while (s.busy_workers() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto q1 = s.submit(0, rows({2}));
  auto q2 = s.submit(0, rows({3}));
  auto refused = s.submit(0, rows({4}));
  ASSERT_TRUE(running && q1 && q2);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, Error::Code::kUnavailable);
  EXPECT_NE(refused.error().message.find("queue full: 2 requests waiting"), std::string::npos) << refused.error().message;
  EXPECT_EQ(s.queue_depth(), 2u);
  EXPECT_EQ(q2->get().scores.value(), (std::vector<float>{6}));
}

TEST(Scheduler, DynamicBatchingJoinsQueuedRequestsOfOneModel) {
  Recorder r;
  Scheduler s(batching(5, std::chrono::milliseconds(50)), doubling(r, std::chrono::milliseconds(100)), nullptr);
  auto blocker = s.submit(0, rows({0}));
  while (s.busy_workers() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Queued behind the blocker: two of model 0 fit in one batch (2 + 3 rows),
  // the model-1 request and the one that would overflow 5 rows wait.
  auto a = s.submit(0, rows({1, 2}));
  auto other_model = s.submit(1, rows({7}));
  auto b = s.submit(0, rows({3, 4, 5}));
  auto overflow = s.submit(0, rows({6}));
  ASSERT_TRUE(blocker && a && other_model && b && overflow);
  const auto oa = a->get();
  const auto ob = b->get();
  EXPECT_EQ(oa.scores.value(), (std::vector<float>{2, 4}));
  EXPECT_EQ(ob.scores.value(), (std::vector<float>{6, 8, 10}));
  EXPECT_EQ(oa.timing.batch_requests, 2u);
  EXPECT_EQ(oa.timing.batch_items, 5u);
  EXPECT_EQ(other_model->get().scores.value(), (std::vector<float>{14}));
  EXPECT_EQ(overflow->get().scores.value(), (std::vector<float>{12}));
  std::lock_guard lock(r.mutex);
  EXPECT_EQ(r.batches[1], (std::pair<std::size_t, std::size_t>{5, 2}));
}

TEST(Scheduler, WithoutDynamicBatchingEveryRequestRunsAlone) {
  Recorder r;
  SchedulerConfig config;
  config.workers = 1;
  Scheduler s(config, doubling(r, std::chrono::milliseconds(20)), nullptr);
  std::vector<std::future<Outcome>> futures;
  for (float x : {1.f, 2.f, 3.f}) futures.push_back(std::move(*s.submit(0, rows({x}))));
  for (auto& f : futures) EXPECT_EQ(f.get().timing.batch_requests, 1u);
}

TEST(Scheduler, ADelayedBatchWaitsAtMostMaxDelay) {
  Recorder r;
  Scheduler s(batching(100, std::chrono::milliseconds(30)), doubling(r), nullptr);
  auto lone = s.submit(0, rows({1}));
  ASSERT_TRUE(lone);
  // Nobody joins: it runs after max_delay, not never. (A bound, not a timing
  // measurement: the wait_for fails only if the request is stuck.)
  ASSERT_EQ(lone->wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(lone->get().timing.batch_requests, 1u);
}

TEST(Scheduler, ForwardErrorsReachEveryRequestOfTheBatch) {
  SchedulerConfig config;
  config.workers = 1;
  Scheduler s(config, [](std::size_t, const features::Batch&, std::size_t) -> Result<std::vector<float>> {
    return make_error(Error::Code::kInternal, "boom");
  }, nullptr);
  auto f = s.submit(0, rows({1}));
  const auto outcome = f->get();
  ASSERT_FALSE(outcome.scores.has_value());
  EXPECT_EQ(outcome.scores.error().message, "boom");
}

TEST(Scheduler, AForwardReturningTheWrongCountIsAnError) {
  SchedulerConfig config;
  Scheduler s(config, [](std::size_t, const features::Batch&, std::size_t) -> Result<std::vector<float>> {
    return std::vector<float>{1};
  }, nullptr);
  const auto outcome = s.submit(0, rows({1, 2}))->get();
  ASSERT_FALSE(outcome.scores.has_value());
  EXPECT_NE(outcome.scores.error().message.find("1 scores for a batch of 2 rows"), std::string::npos);
}

TEST(Scheduler, StopRunsWhatIsQueuedThenRefuses) {
  Recorder r;
  SchedulerConfig config;
  config.workers = 1;
  auto s = std::make_unique<Scheduler>(config, doubling(r, std::chrono::milliseconds(20)), nullptr);
  std::vector<std::future<Outcome>> futures;
  for (float x : {1.f, 2.f, 3.f, 4.f}) futures.push_back(std::move(*s->submit(0, rows({x}))));
  s->stop();
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    EXPECT_TRUE(f.get().scores.has_value());
  }
  auto late = s->submit(0, rows({5}));
  ASSERT_FALSE(late.has_value());
  EXPECT_NE(late.error().message.find("shutting down"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::batching
