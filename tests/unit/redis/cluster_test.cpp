#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "redis/cluster.h"

namespace numaserve::redis {
namespace {

TEST(ClusterUrl, EveryStartupNodeGetsTheUserAndPassword) {
  auto url = parse_cluster_url("redis+cluster://app:s%40c%3Aret@10.0.0.1:7000,10.0.0.2:7001,redis-c");
  ASSERT_TRUE(url) << url.error().message;
  ASSERT_EQ(url->nodes.size(), 3u);
  EXPECT_EQ(url->nodes[0].host, "10.0.0.1");
  EXPECT_EQ(url->nodes[0].port, 7000);
  EXPECT_EQ(url->nodes[1].host, "10.0.0.2");
  EXPECT_EQ(url->nodes[1].port, 7001);
  EXPECT_EQ(url->nodes[2].host, "redis-c");
  EXPECT_EQ(url->nodes[2].port, 6379);
  for (const Url& node : url->nodes) {
    EXPECT_FALSE(node.unix_socket);
    EXPECT_EQ(node.user, "app");
    EXPECT_EQ(node.password, "s@c:ret");
    EXPECT_EQ(node.db, 0);
  }
}

TEST(ClusterUrl, RedactedShowsTheUserOnceAndNeverThePassword) {
  auto url = parse_cluster_url("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001");
  ASSERT_TRUE(url);
  const std::string shown = url->redacted();
  EXPECT_EQ(shown, "redis+cluster://app:****@10.0.0.1:7000,10.0.0.2:7001");
  EXPECT_EQ(shown.find("cret"), std::string::npos);
  EXPECT_EQ(shown.find("app"), shown.rfind("app"));

  auto password_only = parse_cluster_url("redis+cluster://:pw@a:1,b:2");
  ASSERT_TRUE(password_only);
  EXPECT_EQ(password_only->redacted(), "redis+cluster://:****@a:1,b:2");
  auto no_auth = parse_cluster_url("redis+cluster://a:1,b:2");
  ASSERT_TRUE(no_auth);
  EXPECT_EQ(no_auth->redacted(), "redis+cluster://a:1,b:2");
}

TEST(ClusterUrl, PasswordFileReplacesThePasswordOfEveryNode) {
  const std::string file = ::testing::TempDir() + "/redis-cluster-password";
  {
    FILE* f = fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("from-file\n", f);
    fclose(f);
  }
  auto url = parse_cluster_url("redis+cluster://app:in-url@a:7000,b:7001", file);
  ASSERT_TRUE(url) << url.error().message;
  ASSERT_EQ(url->nodes.size(), 2u);
  for (const Url& node : url->nodes) {
    EXPECT_EQ(node.user, "app");
    EXPECT_EQ(node.password, "from-file");
  }
  EXPECT_FALSE(parse_cluster_url("redis+cluster://a:7000", file + ".absent"));
}

TEST(ClusterUrl, MalformedIsAnErrorThatNeverShowsThePassword) {
  struct Case {
    const char* url;
    const char* says;
  };
  for (const auto& [bad, says] : {Case{"redis+cluster://:hunter2@", "no startup node"},
                                  Case{"redis+cluster://", "no startup node"},
                                  Case{"redis+cluster://:hunter2@a:7000/0", "a cluster has no db"},
                                  Case{"redis+cluster://:hunter2@a:7000,b:7001/2", "a cluster has no db"},
                                  Case{"redis+cluster://:hunter2@a:7000,b:0", "startup node 'b:0'"},
                                  Case{"redis+cluster://:hunter2@a:70000", "port"},
                                  Case{"redis+cluster://:hunter2@a:x", "port"},
                                  Case{"redis+cluster://:hunter2@a:7000,", "no host"},
                                  Case{"redis+cluster://:hunter2%zz@a:7000", "%-escape"},
                                  Case{"redis://:hunter2@a:7000", "redis+cluster://"},
                                  Case{"http://:hunter2@a:7000", "redis+cluster://"}}) {
    auto url = parse_cluster_url(bad);
    ASSERT_FALSE(url) << bad;
    const std::string& message = url.error().message;
    EXPECT_NE(message.find(says), std::string::npos) << bad << ": " << message;
    EXPECT_EQ(message.find("hunter2"), std::string::npos) << bad << ": " << message;
  }
}

TEST(ClusterUrl, AnyUrlPicksTheKindByScheme) {
  auto single = parse_any_url("redis://h:6380/2", "");
  ASSERT_TRUE(single) << single.error().message;
  ASSERT_TRUE(std::holds_alternative<Url>(*single));
  EXPECT_EQ(std::get<Url>(*single).port, 6380);
  EXPECT_EQ(std::get<Url>(*single).db, 2);

  auto socket = parse_any_url("unix:///run/redis.sock", "");
  ASSERT_TRUE(socket);
  ASSERT_TRUE(std::holds_alternative<Url>(*socket));
  EXPECT_TRUE(std::get<Url>(*socket).unix_socket);

  auto cluster = parse_any_url("redis+cluster://a:7000,b:7001", "");
  ASSERT_TRUE(cluster);
  ASSERT_TRUE(std::holds_alternative<ClusterUrl>(*cluster));
  EXPECT_EQ(std::get<ClusterUrl>(*cluster).nodes.size(), 2u);

  EXPECT_TRUE(is_cluster_url("redis+cluster://a:1"));
  EXPECT_FALSE(is_cluster_url("redis://a:1"));
  EXPECT_FALSE(parse_any_url("http://a:1", ""));
  EXPECT_FALSE(parse_any_url("redis+cluster://a:1/0", ""));
}

TEST(ClusterKeySlot, MatchesRedisTestVectors) {
  // CRC16/XMODEM's check value is 0x31C3 = 12739, which is below 16384.
  EXPECT_EQ(key_slot("123456789"), 12739);
  // CLUSTER KEYSLOT on a real server.
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot(""), 0);
}

TEST(ClusterKeySlot, HashTagsKeepRelatedKeysTogether) {
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("{user1000}.followers"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
  EXPECT_EQ(key_slot("foo{bar}"), key_slot("bar"));
}

TEST(ClusterKeySlot, EmptyOrUnclosedHashTagHashesTheWholeKey) {
  // An empty tag "{}" is no tag: Redis hashes the whole key, not the later "{bar}".
  EXPECT_EQ(key_slot("foo{}{bar}"), 8363);
  EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));
  EXPECT_EQ(key_slot("{}"), 15257);
  // Only the first '{' opens; the first '}' after it closes.
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  EXPECT_EQ(key_slot("foo{{bar}}zap"), 4015);
  EXPECT_EQ(key_slot("foo{bar"), 15278);
  EXPECT_EQ(key_slot("foo}bar{"), 11073);
  EXPECT_EQ(key_slot("foo}{bar}"), key_slot("bar"));
}

TEST(ClusterKeySlot, BinaryKeysHashEveryByte) {
  using namespace std::string_view_literals;
  EXPECT_EQ(key_slot("a\0b"sv), 8383);
  EXPECT_NE(key_slot("a\0b"sv), key_slot("a"sv));
  EXPECT_EQ(key_slot("x{a\0b}y"sv), key_slot("a\0b"sv));
}

TEST(ClusterKeySlot, EverySlotIsBelow16384) {
  std::set<std::uint16_t> seen;
  for (int i = 0; i < 100000; ++i) {
    const std::uint16_t slot = key_slot("key:" + std::to_string(i));
    ASSERT_LT(slot, kSlots);
    seen.insert(slot);
  }
  // 100000 keys spread over the whole range, as a cluster needs them to.
  EXPECT_GT(seen.size(), kSlots * 9 / 10);
}

// CLUSTER SLOTS as hiredis's conversion gives it: an array of ranges, each
// [first, last, node...] with its nodes as children; a node is [ip, port, id].
Reply slot_node(std::optional<std::string> host, std::optional<std::string> port, std::string id = "0123abcd") {
  Reply out;
  out.elements = {std::move(host), std::move(port), std::move(id)};
  return out;
}

Reply slot_range(std::string first, std::string last, std::vector<Reply> nodes) {
  Reply out;
  out.elements = {std::move(first), std::move(last)};
  out.children.resize(2);
  for (Reply& node : nodes) {
    out.elements.push_back(std::nullopt);
    out.children.push_back(std::move(node));
  }
  return out;
}

Reply slot_map(std::vector<Reply> ranges) {
  Reply out;
  for (Reply& range : ranges) {
    out.elements.push_back(std::nullopt);
    out.children.push_back(std::move(range));
  }
  return out;
}

const NodeAddress kAsked{"10.0.0.9", 7009};

TEST(ClusterSlots, ThreeMastersWithReplicas) {
  const Reply reply = slot_map({
      slot_range("0", "5460", {slot_node("10.0.0.1", "7000"), slot_node("10.0.0.4", "7003")}),
      slot_range("5461", "10922", {slot_node("10.0.0.2", "7001"), slot_node("10.0.0.5", "7004"), slot_node("10.0.0.6", "7005")}),
      slot_range("10923", "16383", {slot_node("10.0.0.3", "7002")}),
  });
  auto slots = parse_slots(reply, kAsked);
  ASSERT_TRUE(slots) << slots.error().message;
  ASSERT_EQ(slots->size(), 3u);
  EXPECT_EQ((*slots)[0].first, 0);
  EXPECT_EQ((*slots)[0].last, 5460);
  EXPECT_EQ((*slots)[0].master, (NodeAddress{"10.0.0.1", 7000}));
  EXPECT_EQ((*slots)[0].replicas, (std::vector<NodeAddress>{{"10.0.0.4", 7003}}));
  EXPECT_EQ((*slots)[1].first, 5461);
  EXPECT_EQ((*slots)[1].last, 10922);
  EXPECT_EQ((*slots)[1].master, (NodeAddress{"10.0.0.2", 7001}));
  EXPECT_EQ((*slots)[1].replicas, (std::vector<NodeAddress>{{"10.0.0.5", 7004}, {"10.0.0.6", 7005}}));
  EXPECT_EQ((*slots)[2].first, 10923);
  EXPECT_EQ((*slots)[2].last, 16383);
  EXPECT_EQ((*slots)[2].master, (NodeAddress{"10.0.0.3", 7002}));
  EXPECT_TRUE((*slots)[2].replicas.empty());
}

TEST(ClusterSlots, SingleSlotRangesAndGapsAreAccepted) {
  // Slots no range names are unserved, not an error: the map is read mid-resharding.
  auto slots = parse_slots(slot_map({slot_range("7", "7", {slot_node("a", "1")}), slot_range("100", "200", {slot_node("b", "2")})}),
                           kAsked);
  ASSERT_TRUE(slots) << slots.error().message;
  ASSERT_EQ(slots->size(), 2u);
  EXPECT_EQ((*slots)[0].first, 7);
  EXPECT_EQ((*slots)[0].last, 7);
  auto none = parse_slots(slot_map({}), kAsked);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST(ClusterSlots, NodeThatDoesNotKnowItsAddressIsTheAskedOne) {
  auto slots = parse_slots(slot_map({slot_range("0", "16383", {slot_node("", "7000"), slot_node("?", "7003")})}), kAsked);
  ASSERT_TRUE(slots) << slots.error().message;
  ASSERT_EQ(slots->size(), 1u);
  EXPECT_EQ((*slots)[0].master, (NodeAddress{"10.0.0.9", 7000}));
  EXPECT_EQ((*slots)[0].replicas, (std::vector<NodeAddress>{{"10.0.0.9", 7003}}));
}

TEST(ClusterSlots, Redis7NodeMetadataIsIgnored) {
  // Redis 7 adds a fourth element to each node: a map of hostname and more, an array in RESP2.
  Reply node = slot_node("10.0.0.1", "7000");
  node.elements.push_back(std::nullopt);
  node.children.resize(4);
  node.children[3].elements = {"hostname", "redis-0.cluster"};
  auto slots = parse_slots(slot_map({slot_range("0", "16383", {std::move(node)})}), kAsked);
  ASSERT_TRUE(slots) << slots.error().message;
  EXPECT_EQ((*slots)[0].master, (NodeAddress{"10.0.0.1", 7000}));
}

TEST(ClusterSlots, MalformedMapIsRefusedNamingTheAskedNode) {
  Reply refused;
  refused.error = "ERR This instance has cluster support disabled";
  Reply scalar;
  scalar.elements = {"OK"};
  Reply nil;
  nil.elements = {std::nullopt};
  Reply flat;
  flat.elements = {"0", "16383"};
  struct Case {
    const char* what;
    Reply reply;
  };
  const std::vector<Case> cases = {
      {"an error reply", refused},
      {"a scalar", scalar},
      {"a nil", nil},
      {"an array of scalars", flat},
      {"first > last", slot_map({slot_range("10", "9", {slot_node("a", "1")})})},
      {"last = 16384", slot_map({slot_range("0", "16384", {slot_node("a", "1")})})},
      {"first < 0", slot_map({slot_range("-1", "5", {slot_node("a", "1")})})},
      {"a slot that is no number", slot_map({slot_range("zero", "5", {slot_node("a", "1")})})},
      {"a slot claimed twice",
       slot_map({slot_range("0", "100", {slot_node("a", "1")}), slot_range("100", "200", {slot_node("b", "2")})})},
      {"a range claimed twice by one node",
       slot_map({slot_range("0", "100", {slot_node("a", "1")}), slot_range("0", "100", {slot_node("a", "1")})})},
      {"a range without a master", slot_map({slot_range("0", "100", {})})},
      {"a node without a port", [] {
         Reply node;
         node.elements = {"10.0.0.1"};
         return slot_map({slot_range("0", "100", {std::move(node)})});
       }()},
      {"a nil port", slot_map({slot_range("0", "100", {slot_node("a", std::nullopt)})})},
      {"a nil host", slot_map({slot_range("0", "100", {slot_node(std::nullopt, "1")})})},
      {"port 0", slot_map({slot_range("0", "100", {slot_node("a", "0")})})},
      {"port 65536", slot_map({slot_range("0", "100", {slot_node("a", "65536")})})},
      {"a replica without a port", slot_map({slot_range("0", "100", {slot_node("a", "1"), slot_node("b", "x")})})},
      {"a node that is a scalar", [] {
         Reply range = slot_range("0", "100", {slot_node("a", "1")});
         range.elements[2] = "10.0.0.1";
         range.children[2] = Reply{};
         return slot_map({std::move(range)});
       }()},
  };
  for (const auto& [what, reply] : cases) {
    auto slots = parse_slots(reply, kAsked);
    ASSERT_FALSE(slots) << what;
    EXPECT_NE(slots.error().message.find("10.0.0.9:7009"), std::string::npos) << what << ": " << slots.error().message;
  }
}

TEST(ClusterRedirect, MovedAndAskNameTheSlotAndTheNode) {
  const NodeAddress from{"10.0.0.9", 7009};
  auto moved = parse_redirect("MOVED 3999 127.0.0.1:6381", from);
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->to, (NodeAddress{"127.0.0.1", 6381}));
  EXPECT_EQ(kRedirectNames.name(moved->kind), "moved");

  auto ask = parse_redirect("ASK 3999 10.0.0.2:7000", from);
  ASSERT_TRUE(ask);
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->slot, 3999);
  EXPECT_EQ(ask->to, (NodeAddress{"10.0.0.2", 7000}));
  EXPECT_EQ(kRedirectNames.name(ask->kind), "ask");

  auto edges = parse_redirect("MOVED 16383 h:65535", from);
  ASSERT_TRUE(edges);
  EXPECT_EQ(edges->slot, 16383);
  EXPECT_EQ(edges->to.port, 65535);
}

TEST(ClusterRedirect, AddressWithoutHostIsTheRedirectingNodesHost) {
  auto moved = parse_redirect("MOVED 1 :6380", NodeAddress{"10.0.0.9", 7009});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->to, (NodeAddress{"10.0.0.9", 6380}));
  auto ask = parse_redirect("ASK 1 :7000", NodeAddress{"redis-2.cluster", 7009});
  ASSERT_TRUE(ask);
  EXPECT_EQ(ask->to, (NodeAddress{"redis-2.cluster", 7000}));
}

TEST(ClusterRedirect, Ipv6NodeIsBracketedInItsName) {
  auto moved = parse_redirect("MOVED 12 ::1:7000", NodeAddress{"10.0.0.9", 7009});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->slot, 12);
  EXPECT_EQ(moved->to.host, "::1");
  EXPECT_EQ(moved->to.port, 7000);
  EXPECT_EQ(moved->to.text(), "[::1]:7000");
  EXPECT_EQ((NodeAddress{"10.0.0.1", 7000}).text(), "10.0.0.1:7000");
}

TEST(ClusterRedirect, OtherErrorsAndMalformedRedirectsAreNotRedirects) {
  const NodeAddress from{"10.0.0.9", 7009};
  for (const char* error : {"MOVED", "MOVED ", "MOVED 3999", "MOVED x 1.2.3.4:5", "MOVED -1 1.2.3.4:5", "MOVED 16384 1.2.3.4:5",
                            "MOVED 99999999999 1.2.3.4:5", "MOVED  3999 1.2.3.4:5", "MOVED 3999 1.2.3.4", "MOVED 3999 1.2.3.4:",
                            "MOVED 3999 1.2.3.4:0", "MOVED 3999 1.2.3.4:70000", "MOVED 3999 1.2.3.4:5x", "ASK 1 h:-1",
                            "moved 1 h:1", "ASK", "ERR something", "CLUSTERDOWN The cluster is down",
                            "TRYAGAIN Multiple keys request during rehashing of slot", ""}) {
    EXPECT_FALSE(parse_redirect(error, from)) << "'" << error << "'";
  }
}

TEST(ClusterNodeCounters, OneSetOfCountersPerNode) {
  NodeCounters counters;
  NodeCounters::Counts& a = counters.of({"10.0.0.1", 7000});
  NodeCounters::Counts& b = counters.of({"10.0.0.2", 7000});
  EXPECT_EQ(&counters.of({"10.0.0.1", 7000}), &a);
  EXPECT_NE(&a, &b);
  a.pipelines += 3;
  a.moved += 1;
  b.errors += 2;
  b.ask += 4;
  counters.of({"10.0.0.1", 7000}).refreshes += 1;

  const auto snapshot = counters.snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot[0].node, "10.0.0.1:7000");
  EXPECT_EQ(snapshot[0].pipelines, 3u);
  EXPECT_EQ(snapshot[0].errors, 0u);
  EXPECT_EQ(snapshot[0].moved, 1u);
  EXPECT_EQ(snapshot[0].ask, 0u);
  EXPECT_EQ(snapshot[0].refreshes, 1u);
  EXPECT_EQ(snapshot[1].node, "10.0.0.2:7000");
  EXPECT_EQ(snapshot[1].pipelines, 0u);
  EXPECT_EQ(snapshot[1].errors, 2u);
  EXPECT_EQ(snapshot[1].moved, 0u);
  EXPECT_EQ(snapshot[1].ask, 4u);
  EXPECT_EQ(snapshot[1].refreshes, 0u);
}

TEST(ClusterNodeCounters, CountersOutliveLaterNodes) {
  // Clients keep the reference of() gave them while other nodes are met.
  NodeCounters counters;
  NodeCounters::Counts& first = counters.of({"a", 1});
  for (int port = 2; port < 2000; ++port) counters.of({"a", port});
  first.pipelines += 1;
  EXPECT_EQ(&counters.of({"a", 1}), &first);
  EXPECT_EQ(counters.snapshot().size(), 1999u);
  EXPECT_EQ(counters.snapshot().front().pipelines, 1u);
}

}  // namespace
}  // namespace numaserve::redis
