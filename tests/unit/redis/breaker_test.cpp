// The Redis client's breaker by its rules, time handed in: no server, no wait.
#include "redis/breaker.h"

#include <gtest/gtest.h>

namespace numaserve::redis {
namespace {

using std::chrono::milliseconds;
const Breaker::Clock::time_point t0{};

TEST(Breaker, OpensAfterTheFailuresInARowAndRefusesUntilItsTimeIsUp) {
  Breaker b(3, 1.0);
  EXPECT_TRUE(b.admit(t0));
  EXPECT_FALSE(b.record(false, t0));
  EXPECT_FALSE(b.record(false, t0));
  EXPECT_FALSE(b.record(true, t0));  // a success in between: the count starts again
  EXPECT_FALSE(b.record(false, t0));
  EXPECT_FALSE(b.record(false, t0));
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_TRUE(b.record(false, t0));  // the third in a row
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_FALSE(b.admit(t0 + milliseconds(999)));
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

// A new connection (the server back after a restart) probes at once: the
// breaker's second of refusals would otherwise outlast the outage.
TEST(Breaker, ANewConnectionProbesAtOnceAndOnlyWhenOpen) {
  Breaker b(1, 1.0);
  b.connected(t0);  // closed: nothing changes
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_TRUE(b.record(false, t0));
  EXPECT_FALSE(b.admit(t0 + milliseconds(100)));
  b.connected(t0 + milliseconds(200));
  EXPECT_TRUE(b.admit(t0 + milliseconds(200)));  // the probe, 800 ms early
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  b.connected(t0 + milliseconds(210));  // half open: the probe is out, nothing changes
  EXPECT_FALSE(b.admit(t0 + milliseconds(210)));
  EXPECT_TRUE(b.record(true, t0 + milliseconds(220)));
  EXPECT_EQ(b.state(), BreakerState::kClosed);
}

TEST(Breaker, OneProbeAfterTheOpenTimeDecides) {
  Breaker b(1, 0.5);
  EXPECT_TRUE(b.record(false, t0));
  EXPECT_TRUE(b.admit(t0 + milliseconds(500)));  // the probe goes
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  EXPECT_FALSE(b.admit(t0 + milliseconds(501)));  // and only the probe
  EXPECT_TRUE(b.record(false, t0 + milliseconds(600)));  // it failed: open again, from now
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_FALSE(b.admit(t0 + milliseconds(1099)));
  EXPECT_TRUE(b.admit(t0 + milliseconds(1100)));
  EXPECT_TRUE(b.record(true, t0 + milliseconds(1100)));  // it answered: closed
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_TRUE(b.admit(t0 + milliseconds(1100)));
  EXPECT_EQ(kBreakerStateNames.name(b.state()), "closed");
}

}  // namespace
}  // namespace numaserve::redis
