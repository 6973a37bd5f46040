#include "repository/repository.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "test_dir.h"

namespace numaserve::repository {
namespace {

namespace fs = std::filesystem;

// A repository in a temp dir, removed after the test.
class RepositoryTest : public ::testing::Test {
 protected:
  static void write(const fs::path& file, const std::string& text) {
    std::ofstream(file, std::ios::binary) << text;
  }
  // A version written elsewhere on the filesystem, then moved into place.
  fs::path moved_in(const std::string& model, const std::string& version) {
    const fs::path staging = root_ / ("." + model + "-" + version + ".tmp");
    fs::create_directories(staging);
    write(staging / "model.pt", "weights");
    write(staging / "model.yaml", "name: " + model);
    fs::create_directories(root_ / model);
    fs::rename(staging, root_ / model / version);
    return root_ / model / version;
  }
  // The kernel's timestamps are coarse (a tick): later writes must land in a later one.
  static void next_tick() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

  const VersionDir& version_of(const ModelDir& m, const std::string& number) {
    for (const auto& v : m.versions) {
      if (v.number == number) return v;
    }
    ADD_FAILURE() << "no version " << number;
    static const VersionDir none;
    return none;
  }

  testing_support::TestDir dir_{"numaserve-repository"};
  const fs::path root_ = dir_.path();
};

TEST(Policy, ParsesEachKindAndLabels) {
  auto latest = parse_policy("version_policy: {latest: 2}\nlabels: {stable: 3, canary: \"4\"}\n", "m/config.yaml");
  ASSERT_TRUE(latest) << latest.error().message;
  EXPECT_EQ(latest->kind, Policy::Kind::kLatest);
  EXPECT_EQ(latest->latest, 2u);
  EXPECT_EQ(latest->labels, (std::map<std::string, std::string>{{"stable", "3"}, {"canary", "4"}}));

  auto specific = parse_policy("version_policy:\n  specific: [1, 3]\n", "c.yaml");
  ASSERT_TRUE(specific) << specific.error().message;
  EXPECT_EQ(specific->kind, Policy::Kind::kSpecific);
  EXPECT_EQ(specific->specific, (std::vector<std::string>{"1", "3"}));

  auto all = parse_policy("version_policy: all\n", "c.yaml");
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(all->kind, Policy::Kind::kAll);

  auto empty = parse_policy("", "c.yaml");
  ASSERT_TRUE(empty);
  EXPECT_EQ(*empty, Policy{});  // latest: 1, no labels
}

TEST(Policy, ErrorsNameTheFileTheLineAndTheField) {
  struct Case {
    const char* text;
    const char* line;
    const char* field;
  };
  const Case cases[] = {
      {"version_policy: {newest: 2}\n", "c.yaml line 1", "version_policy"},
      {"labels: {}\nversion_policy: {latest: 0}\n", "c.yaml line 2", "version_policy.latest"},
      {"version_policy:\n  specific: [1, v2]\n", "c.yaml line 2", "version_policy.specific"},
      {"labels:\n  stable: latest\n", "c.yaml line 2", "labels.stable"},
      {"labels:\n  \"3\": 3\n", "c.yaml line 2", "labels"},
      {"versions: all\n", "c.yaml line 1", "versions"},
      {"version_policy: [1\n", "c.yaml", ""},
  };
  for (const auto& c : cases) {
    auto p = parse_policy(c.text, "c.yaml");
    ASSERT_FALSE(p) << c.text;
    EXPECT_NE(p.error().message.find(c.line), std::string::npos) << c.text << " -> " << p.error().message;
    if (*c.field) {
      EXPECT_EQ(p.error().field, c.field) << c.text;
    }
  }
}

VersionDir complete(const std::string& n) { return VersionDir{n, {}, true, "", ""}; }
VersionDir incomplete(const std::string& n) { return VersionDir{n, {}, false, "", ""}; }

TEST(Wanted, LatestSpecificAndAllAmongCompleteVersionsOnly) {
  const std::vector<VersionDir> versions = {complete("1"), complete("2"), complete("3"), incomplete("4")};
  EXPECT_EQ(wanted(Policy{}, versions), (std::vector<std::string>{"3"}));
  Policy two;
  two.latest = 2;
  EXPECT_EQ(wanted(two, versions), (std::vector<std::string>{"2", "3"}));
  Policy specific;
  specific.kind = Policy::Kind::kSpecific;
  specific.specific = {"1", "4", "9"};
  EXPECT_EQ(wanted(specific, versions), (std::vector<std::string>{"1"}));  // 4 incomplete, 9 absent
  Policy all;
  all.kind = Policy::Kind::kAll;
  EXPECT_EQ(wanted(all, versions), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_TRUE(wanted(Policy{}, {incomplete("1")}).empty());
}

TEST(Names, OnlyOnePathSegmentInsideTheRepository) {
  for (const char* bad : {"", ".", "..", "../etc", "a/b", "/abs", ".hidden", "..data"}) EXPECT_FALSE(check_model_name(bad)) << bad;
  for (const char* good : {"ranker_a", "ranker-b.v2", "m1"}) EXPECT_TRUE(check_model_name(good)) << good;
  for (const char* bad : {"0", "01", "v1", "", "1.5", "-1", "99999999999999999999"}) EXPECT_FALSE(is_version_number(bad)) << bad;
  for (const char* good : {"1", "20", "1700000000"}) EXPECT_TRUE(is_version_number(good)) << good;
}

TEST_F(RepositoryTest, AVersionMovedIntoPlaceIsComplete) {
  const fs::path v = moved_in("ranker", "1");
  auto models = scan(root_, ReadAt::kPolling, {v});
  ASSERT_TRUE(models) << models.error().message;
  ASSERT_EQ(models->size(), 1u);  // the hidden staging directory is not a model
  const auto& m = models->front();
  EXPECT_EQ(m.name, "ranker");
  ASSERT_EQ(m.versions.size(), 1u);
  EXPECT_TRUE(m.versions[0].complete) << m.versions[0].why;
}

TEST_F(RepositoryTest, ACopyInPlaceWaitsForItsMarker) {
  const fs::path v = root_ / "ranker" / "2";
  fs::create_directories(v);
  write(v / "model.yaml", "name: ranker");
  for (const ReadAt at : {ReadAt::kStartUp, ReadAt::kLoadCall, ReadAt::kPolling}) {
    auto m = scan_model(root_, "ranker", at);
    ASSERT_TRUE(m);
    EXPECT_FALSE(version_of(*m, "2").complete);
    EXPECT_NE(version_of(*m, "2").why.find("model.pt"), std::string::npos) << version_of(*m, "2").why;
  }
  // model.pt created, then written a tick later, as a copy does.
  std::ofstream pt(v / "model.pt", std::ios::binary);
  pt << "half";
  pt.flush();
  next_tick();
  pt << " of the weights";
  pt.close();
  next_tick();
  auto m = scan_model(root_, "ranker", ReadAt::kPolling);
  ASSERT_TRUE(m);
  EXPECT_FALSE(version_of(*m, "2").complete) << version_of(*m, "2").why;
  const std::string before = version_of(*m, "2").fingerprint;
  write(v / kMarker, "");
  m = scan_model(root_, "ranker", ReadAt::kPolling);
  ASSERT_TRUE(m);
  EXPECT_TRUE(version_of(*m, "2").complete) << version_of(*m, "2").why;
  EXPECT_NE(version_of(*m, "2").fingerprint, before);
}

TEST_F(RepositoryTest, TheWatchersWordCountsAsARename) {
  const fs::path v = root_ / "ranker" / "3";
  fs::create_directories(v);
  write(v / "model.yaml", "name: ranker");
  write(v / "model.pt", "w");
  next_tick();
  write(v / "model.pt", "weights");  // written after the directory last changed
  auto m = scan_model(root_, "ranker", ReadAt::kPolling);
  ASSERT_TRUE(m);
  EXPECT_FALSE(version_of(*m, "3").complete);
  m = scan_model(root_, "ranker", ReadAt::kPolling, {v});
  ASSERT_TRUE(m);
  EXPECT_TRUE(version_of(*m, "3").complete);
}

// While polling, a version moved in counts only when the watcher saw it (or
// by its marker): never by its timestamps.
TEST_F(RepositoryTest, WhilePollingOnlyTheWatchersWordOrTheMarkerCount) {
  const fs::path v = moved_in("ranker", "4");
  auto m = scan_model(root_, "ranker", ReadAt::kPolling);
  ASSERT_TRUE(m);
  EXPECT_FALSE(version_of(*m, "4").complete) << version_of(*m, "4").why;
  m = scan_model(root_, "ranker", ReadAt::kPolling, {v});
  EXPECT_TRUE(version_of(*m, "4").complete);
  write(v / kMarker, "");
  m = scan_model(root_, "ranker", ReadAt::kPolling);
  EXPECT_TRUE(version_of(*m, "4").complete);
}

// Triton's habit: `cp -r` a model into repo/<model>/1, then start, or call
// load. What is there is complete however long the copy took (each chunk
// of model.pt a kernel tick after the last: the change-time rule this
// replaces passed such a copy or not by the tick); only while polling does
// it wait for its marker.
TEST_F(RepositoryTest, AtStartUpAndOnALoadCallWhatIsThereCounts) {
  const fs::path v = root_ / "ranker" / "1";
  fs::create_directories(v);
  write(v / "model.yaml", "name: ranker");
  {
    std::ofstream pt(v / "model.pt", std::ios::binary);
    for (int chunk = 0; chunk < 8; ++chunk) {
      pt << std::string(1 << 16, static_cast<char>('a' + chunk));
      pt.flush();
      next_tick();
    }
  }
  auto m = scan_model(root_, "ranker", ReadAt::kStartUp);
  ASSERT_TRUE(m);
  EXPECT_TRUE(version_of(*m, "1").complete) << version_of(*m, "1").why;
  EXPECT_EQ(version_of(*m, "1").why, "present at start-up");
  m = scan_model(root_, "ranker", ReadAt::kLoadCall);
  EXPECT_TRUE(version_of(*m, "1").complete) << version_of(*m, "1").why;
  EXPECT_EQ(version_of(*m, "1").why, "named by a load call");
  m = scan_model(root_, "ranker", ReadAt::kPolling);
  EXPECT_FALSE(version_of(*m, "1").complete);
  EXPECT_NE(version_of(*m, "1").why.find(kMarker), std::string::npos) << version_of(*m, "1").why;
}

// The kubelet's atomic writer: files in "..<timestamp>/", "..data" a symlink
// to it, and each top-level name a symlink through "..data".
TEST_F(RepositoryTest, AnAtomicWriterVolumeIsCompleteThroughItsDataLink) {
  const fs::path generation = root_ / "..2026_12_03_06_00_00.1";
  fs::create_directories(generation / "ranker" / "1");
  write(generation / "ranker" / "1" / "model.pt", "w");
  next_tick();
  write(generation / "ranker" / "1" / "model.pt", "weights");
  write(generation / "ranker" / "1" / "model.yaml", "name: ranker");
  fs::create_directory_symlink(generation.filename(), root_ / "..data");
  fs::create_directory_symlink(fs::path("..data") / "ranker", root_ / "ranker");
  auto models = scan(root_, ReadAt::kPolling);
  ASSERT_TRUE(models) << models.error().message;
  ASSERT_EQ(models->size(), 1u);
  ASSERT_EQ(models->front().versions.size(), 1u);
  EXPECT_TRUE(models->front().versions[0].complete) << models->front().versions[0].why;
}

TEST_F(RepositoryTest, PolicyFileAndItsErrorsStayWithTheirModel) {
  moved_in("good", "1");
  moved_in("good", "2");
  moved_in("bad", "1");
  write(root_ / "good" / kPolicyFile, "version_policy: all\nlabels: {stable: 1}\n");
  write(root_ / "bad" / kPolicyFile, "version_policy: {latest: -1}\n");
  fs::create_directories(root_ / "good" / "notes");  // not a version
  auto models = scan(root_, ReadAt::kStartUp);
  ASSERT_TRUE(models) << models.error().message;
  ASSERT_EQ(models->size(), 2u);
  const auto& bad = (*models)[0];
  const auto& good = (*models)[1];
  ASSERT_FALSE(bad.policy);
  EXPECT_NE(bad.policy.error().message.find((root_ / "bad" / kPolicyFile).string() + " line 1"), std::string::npos)
      << bad.policy.error().message;
  ASSERT_TRUE(good.policy);
  EXPECT_EQ(wanted(*good.policy, good.versions), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(good.policy->labels.at("stable"), "1");
}

TEST_F(RepositoryTest, VersionsSortByNumberAndLoadCallsNameOnlyModels) {
  for (const char* n : {"10", "9", "100"}) moved_in("ranker", n);
  auto m = scan_model(root_, "ranker", ReadAt::kStartUp);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->versions.size(), 3u);
  EXPECT_EQ(m->versions[0].number, "9");
  EXPECT_EQ(m->versions[2].number, "100");
  EXPECT_EQ(wanted(m->policy.value(), m->versions), (std::vector<std::string>{"100"}));
  auto outside = scan_model(root_, "../" + root_.filename().string(), ReadAt::kLoadCall);
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, Error::Code::kInvalidArgument);
  auto missing = scan_model(root_, "absent", ReadAt::kLoadCall);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Error::Code::kNotFound);
  EXPECT_FALSE(scan(root_ / "absent", ReadAt::kStartUp));
}

}  // namespace
}  // namespace numaserve::repository
