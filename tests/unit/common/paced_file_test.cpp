#include "numaserve/common/paced_file.h"

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <istream>
#include <random>
#include <string>

namespace numaserve {
namespace {

namespace fs = std::filesystem;

std::string random_bytes(std::size_t n) {
  std::mt19937 rng(7);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

fs::path write_file(const std::string& name, const std::string& bytes) {
  const auto path = fs::temp_directory_path() / ("paced-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// torch::jit::load's reader asks for the size (seek to the end, tell), then
// reads headers of a few bytes and records of megabytes at offsets it seeks to.
TEST(PacedFile, ReadsWhatTheFileHoldsThroughSeeksSmallAndLargeReads) {
  const std::string bytes = random_bytes((5u << 20) + 17);
  const auto path = write_file("bytes", bytes);
  CpuPacer pacer(1.0);
  auto file = PacedFile::open(path, pacer);
  ASSERT_TRUE(file.has_value()) << file.error().message;
  std::istream in(file->get());
  in.seekg(0, std::ios::end);
  EXPECT_EQ(static_cast<std::size_t>(in.tellg()), bytes.size());
  in.seekg(0);
  std::string head(10, '\0');
  ASSERT_TRUE(in.read(head.data(), 10));
  EXPECT_EQ(head, bytes.substr(0, 10));
  EXPECT_EQ(in.tellg(), 10);  // the small reads' buffer is not where the reader is
  std::string big(3u << 20, '\0');
  ASSERT_TRUE(in.read(big.data(), static_cast<std::streamsize>(big.size())));
  EXPECT_TRUE(big == bytes.substr(10, big.size()));
  in.seekg(4 << 20);
  std::string mid(100, '\0');
  ASSERT_TRUE(in.read(mid.data(), 100));
  EXPECT_EQ(mid, bytes.substr(4 << 20, 100));
  in.seekg(-7, std::ios::end);
  std::string tail(20, '\0');
  in.read(tail.data(), 20);
  EXPECT_EQ(in.gcount(), 7);  // a read past the end is short, and says so
  EXPECT_TRUE(in.eof());
  EXPECT_EQ(tail.substr(0, 7), bytes.substr(bytes.size() - 7));
  fs::remove(path);
}

TEST(PacedFile, AMissingFileIsAnErrorNamingIt) {
  CpuPacer pacer(0.5);
  auto file = PacedFile::open("/nonexistent/model.pt", pacer);
  ASSERT_FALSE(file.has_value());
  EXPECT_NE(file.error().message.find("/nonexistent/model.pt"), std::string::npos);
}

// The bound itself: reading at share 0.2, the thread's CPU is at most about
// a fifth of the time the read took. (A slow machine only lowers the ratio.)
TEST(PacedFile, ReadingTakesAtMostItsShareOfACpu) {
  const std::string bytes = random_bytes(48u << 20);
  const auto path = write_file("share", bytes);
  std::string out(bytes.size(), '\0');
  for (int warm = 0; warm < 2; ++warm) {  // the first pass faults `out` in: it counts too, and is paced too
    CpuPacer pacer(0.2);
    auto file = PacedFile::open(path, pacer);
    ASSERT_TRUE(file.has_value());
    std::istream in(file->get());
    const double cpu0 = thread_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(in.read(out.data(), static_cast<std::streamsize>(out.size())));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = thread_cpu_seconds() - cpu0;
    EXPECT_TRUE(out == bytes);
    EXPECT_LE(cpu / wall, 0.25) << "cpu " << cpu << " s over " << wall << " s";
  }
  fs::remove(path);
}

}  // namespace
}  // namespace numaserve
