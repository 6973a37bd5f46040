#include <gtest/gtest.h>

#include "redis/redis.h"

namespace numaserve::redis {
namespace {

TEST(RedisUrl, TcpWithUserPasswordPortAndDb) {
  auto url = parse_url("redis://app:s%40cret@10.0.0.5:6380/3");
  ASSERT_TRUE(url) << url.error().message;
  EXPECT_FALSE(url->unix_socket);
  EXPECT_EQ(url->host, "10.0.0.5");
  EXPECT_EQ(url->port, 6380);
  EXPECT_EQ(url->user, "app");
  EXPECT_EQ(url->password, "s@cret");
  EXPECT_EQ(url->db, 3);
  EXPECT_EQ(url->redacted(), "redis://app:****@10.0.0.5:6380/3");
}

TEST(RedisUrl, DefaultsAndPasswordOnly) {
  auto url = parse_url("redis://:pw@redis");
  ASSERT_TRUE(url);
  EXPECT_EQ(url->port, 6379);
  EXPECT_EQ(url->db, 0);
  EXPECT_EQ(url->user, "");
  EXPECT_EQ(url->password, "pw");
  EXPECT_EQ(url->redacted(), "redis://:****@redis:6379");
}

TEST(RedisUrl, UnixSocketWithDb) {
  auto url = parse_url("unix:///run/redis/redis.sock?db=2");
  ASSERT_TRUE(url);
  EXPECT_TRUE(url->unix_socket);
  EXPECT_EQ(url->host, "/run/redis/redis.sock");
  EXPECT_EQ(url->db, 2);
  EXPECT_EQ(url->redacted(), "unix:///run/redis/redis.sock?db=2");
}

TEST(RedisUrl, MalformedIsAnErrorThatNeverShowsThePassword) {
  for (const char* bad : {"http://x", "redis://", "redis://:hunter2@h:0", "redis://:hunter2@h:99999", "redis://:hunter2@h/x",
                          "unix://relative.sock", "unix:///s.sock?database=1", "redis://:hunter2%zz@h"}) {
    auto url = parse_url(bad);
    ASSERT_FALSE(url) << bad;
    EXPECT_EQ(url.error().message.find("hunter2"), std::string::npos) << url.error().message;
    EXPECT_EQ(url.error().field, "feature_store");
  }
}

TEST(RedisUrl, PasswordFileOverridesAndNamesItselfWhenMissing) {
  const std::string file = ::testing::TempDir() + "/redis-password";
  {
    FILE* f = fopen(file.c_str(), "w");
    fputs("from-file\r\nsecond line\n", f);
    fclose(f);
  }
  auto url = parse_url("redis://:in-url@h", file);
  ASSERT_TRUE(url);
  EXPECT_EQ(url->password, "from-file");
  auto missing = parse_url("redis://h", file + ".absent");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("redis-password.absent"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::redis
