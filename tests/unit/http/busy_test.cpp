// The worker's busy share on samples the test gives: it follows the CPU
// time over wall time of the last window, whatever the sampling period.
#include "http/busy.h"

#include <gtest/gtest.h>

#include <thread>

namespace numaserve::http {
namespace {

using Clock = BusyShare::Clock;

TEST(BusyShare, FollowsCpuOverWallTimeOverItsWindow) {
  for (const double load : {0.25, 0.5, 0.75, 1.0}) {
    for (const double period : {0.01, 0.5}) {
      SCOPED_TRACE(std::to_string(load) + " sampled every " + std::to_string(period) + " s");
      BusyShare busy(5);
      Clock::time_point t{};
      double cpu = 0;
      for (double elapsed = 0; elapsed < 30; elapsed += period) {
        busy.sample(t, cpu);
        t += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period));
        cpu += load * period;
      }
      EXPECT_NEAR(busy.share(), load, 0.01);
    }
  }
}

TEST(BusyShare, AnIdleStretchFadesOverTheWindowAndTheFirstSampleOnlyStarts) {
  BusyShare busy(1);
  Clock::time_point t{};
  busy.sample(t, 100);  // CPU used before: not this window's
  EXPECT_EQ(busy.share(), 0);
  for (int i = 1; i <= 100; ++i) busy.sample(t + std::chrono::milliseconds(100 * i), 100 + 0.1 * i);
  EXPECT_GT(busy.share(), 0.99);
  busy.sample(t + std::chrono::seconds(11), 110);  // a second idle
  EXPECT_NEAR(busy.share(), std::exp(-1.0), 0.01);
}

TEST(BusyShare, ThisThreadsCpuTimeGrowsWithWorkNotWithSleep) {
  const double before = BusyShare::thread_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double slept = BusyShare::thread_cpu_seconds();
  EXPECT_LT(slept - before, 0.02);
  const auto until = Clock::now() + std::chrono::milliseconds(50);
  volatile double x = 0;
  while (Clock::now() < until) x = x + 1;
  EXPECT_GT(BusyShare::thread_cpu_seconds() - slept, 0.02);
}

}  // namespace
}  // namespace numaserve::http
