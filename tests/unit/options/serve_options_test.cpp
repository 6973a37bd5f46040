// The binaries' real option tables (not synthetic rows): every name once,
// and every default shown is one its parser reads back to the same value.
#include <gtest/gtest.h>

#include "options/agent_options.h"
#include "options/operator_options.h"
#include "options/serve_options.h"

namespace numaserve {
namespace {

// Applies each row's shown default to the config the table was made on,
// then makes the table again: a default that does not read back as itself
// (a rounded duration, a quantity in the wrong unit) shows up as a change.
template <typename MakeRows>
void expect_defaults_read_back(MakeRows make_rows) {
  const auto before = make_rows();
  for (const auto& row : before) {
    if (row.default_text.empty()) continue;
    EXPECT_TRUE(row.set(row.default_text).has_value()) << row.name << " = " << row.default_text;
  }
  const auto after = make_rows();
  ASSERT_EQ(before.size(), after.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].default_text, after[i].default_text) << before[i].name;
  }
}

TEST(OptionTables, ServeHealthAgentAndOperatorDeclareEachNameOnce) {
  options::ServeOptions serve_options;
  EXPECT_TRUE(OptionTable(options::serve_options(serve_options)).check_unique().has_value());
  options::HealthOptions health;
  EXPECT_TRUE(OptionTable(options::health_options(health)).check_unique().has_value());
  agent::options::AgentOptions agent;
  using namespace agent::options;
  for (int groups : {kSource | kDiscover, kSource | kPlan | kPlanOnly, kSource | kPlan | kRun, kAllGroups}) {
    const auto status = table_for(agent, groups).check_unique();
    EXPECT_TRUE(status.has_value()) << groups << ": " << status.error().message;
  }
  op::options::OperatorOptions op_options;
  const auto op_status = op::options::operator_table(op_options).check_unique();
  EXPECT_TRUE(op_status.has_value()) << op_status.error().message;
}

TEST(OptionTables, ShownDefaultsAreTheConfigsOwnAndReadBack) {
  options::ServeOptions serve_options;
  expect_defaults_read_back([&] { return options::serve_options(serve_options); });
  agent::options::AgentOptions agent;
  expect_defaults_read_back([&] { return agent::options::table_for(agent, agent::options::kAllGroups).rows(); });
  op::options::OperatorOptions op_options;
  expect_defaults_read_back([&] { return op::options::operator_table(op_options).rows(); });
  // The rows show the parts' own defaults, not copies of them.
  const http::ServerConfig transport;
  const auto rows = options::serve_options(serve_options);
  const auto port = std::find_if(rows.begin(), rows.end(), [](const OptionSpec& r) { return r.name == "port"; });
  ASSERT_NE(port, rows.end());
  EXPECT_EQ(port->default_text, std::to_string(transport.port));
}

TEST(OptionTables, PrecisionOverridesModelYamlOnlyWhenGiven) {
  options::ServeOptions o;
  OptionTable table(options::serve_options(o));
  EXPECT_FALSE(o.precision.has_value());  // unset: each model.yaml's
  ASSERT_TRUE(table.apply_yaml("precision: bf16-if-available\n", "serve.yaml"));
  EXPECT_EQ(o.precision, features::Precision::kBf16IfAvailable);
  const auto refused = table.apply_yaml("precision: half\n", "serve.yaml");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("'half' is not fp32, bf16, bf16-if-available, int8 or int8-if-available"),
            std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(o.embedding_precision.has_value());  // unset: model.yaml's, else as the precision
  ASSERT_TRUE(table.apply_yaml("embedding_precision: int4\n", "serve.yaml"));
  EXPECT_EQ(o.embedding_precision, features::TablePrecision::kInt4);
  const auto tables = table.apply_yaml("embedding_precision: int2\n", "serve.yaml");
  ASSERT_FALSE(tables);
  EXPECT_EQ(tables.error().field, "embedding_precision");
  EXPECT_NE(tables.error().message.find("'int2' is not fp32, bf16, int8 or int4"), std::string::npos) << tables.error().message;
}

TEST(OptionTables, PriorityLevelsReadTritonsPolicyPerLevelInAnyOrder) {
  options::ServeOptions o;
  OptionTable table(options::serve_options(o));
  ASSERT_TRUE(table.apply_yaml("priority_level:\n"
                               "  - '2:max_queue_size=8;timeout_us=250000;timeout_action=delay'\n"
                               "  - '1:allow_timeout_override=true'\n"
                               "priority_levels: 2\n",
                               "serve.yaml"));
  const auto& b = o.service.batching;
  EXPECT_EQ(b.priority_levels, 2u);
  ASSERT_EQ(b.policies.size(), 2u);
  EXPECT_TRUE(b.policies[0].allow_timeout_override);
  EXPECT_EQ(b.policies[1].max_queue_size, 8u);
  EXPECT_EQ(b.policies[1].timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(b.policies[1].timeout_action, batching::TimeoutAction::kDelay);
  EXPECT_TRUE(b.check().has_value());
  for (const char* bad : {"priority_level: '2:timeout_action=drop'\n", "priority_level: '0:max_queue_size=1'\n",
                          "priority_level: 'max_queue_size=1'\n"}) {
    const auto refused = table.apply_yaml(bad, "serve.yaml");
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().field, "priority_level") << refused.error().message;
  }
  ASSERT_TRUE(table.apply_yaml("priority_level: '3:max_queue_size=1'\n", "serve.yaml"));
  EXPECT_EQ(b.check().error().field, "priority_level");  // a third level's policy with two levels
}

}  // namespace
}  // namespace numaserve
