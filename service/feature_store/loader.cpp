#include "feature_store/loader.h"

#include <functional>
#include <memory>

#include "feature_store/embedded.h"
#include "feature_store/feast_format.h"
#include "redis/cluster.h"

namespace numaserve::feature_store {
namespace {

constexpr std::size_t kPipeline = 1000;

Result<std::vector<features::ModelSpec>> read_specs(const LoadConfig& c) {
  std::vector<features::ModelSpec> specs;
  for (const auto& dir : c.model_dirs) {
    auto spec = features::read_model_spec(dir);
    if (!spec) return tl::unexpected(spec.error());
    specs.push_back(std::move(*spec));
  }
  if (specs.empty()) {  // no model: the default mapping (model_spec.h), every feature in its entity's view
    features::ModelSpec none;
    none.name = "(no model.yaml)";
    specs.push_back(std::move(none));
  }
  for (auto& spec : specs) {
    if (!c.project.empty()) spec.store.project = c.project;
  }
  return specs;
}

// Where the loader writes: one server, or a cluster (each command to its
// key's master), and its address without the password.
using Send = std::function<Result<std::vector<redis::Reply>>(const std::vector<redis::Command>&)>;
struct Server {
  Send send;
  std::string where;
};
Result<Server> connect(const redis::AnyUrl& url, double timeout_seconds) {
  if (const auto* cluster = std::get_if<redis::ClusterUrl>(&url)) {
    auto connection = redis::ClusterConnection::open(*cluster, timeout_seconds);
    if (!connection) return tl::unexpected(connection.error());
    return Server{[shared = std::make_shared<redis::ClusterConnection>(std::move(*connection))](const auto& batch) {
                    return shared->pipeline(batch);
                  },
                  cluster->redacted()};
  }
  auto connection = redis::Connection::open(std::get<redis::Url>(url), timeout_seconds);
  if (!connection) return tl::unexpected(connection.error());
  return Server{[shared = std::make_shared<redis::Connection>(std::move(*connection))](const auto& batch) { return shared->pipeline(batch); },
                std::get<redis::Url>(url).redacted()};
}

}  // namespace

std::vector<OptionSpec> load_options(LoadConfig& c) {
  return command_line_only({
      text_option("to", "URL",
                  "The Redis to write: redis://[user:password@]host[:port][/db], unix:///path.sock[?db=N] or a Redis "
                  "Cluster's redis+cluster://[user:password@]host:port[,host:port...]",
                  c.to),
      text_option("password_file", "FILE", "The Redis password, the file's first line", c.password_file),
      text_option("project", "NAME", "Feast project, the keys' suffix (default: model.yaml's, else numaserve)", c.project),
      list_option("model_dir", "DIR", "Models whose model.yaml feature_store mapping places the features", c.model_dirs),
      seconds_option("timeout", "Longest wait for Redis to connect or answer", c.timeout_seconds),
  });
}

Result<Loaded> load(const LoadConfig& c) {
  if (c.to.empty()) return make_error(Error::Code::kInvalidArgument, "--to: give the Redis URL to write", "to");
  auto url = redis::parse_any_url(c.to, c.password_file);
  if (!url) return tl::unexpected(url.error());
  auto store = Entities::load(c.file);
  if (!store) return tl::unexpected(store.error());
  auto specs = read_specs(c);
  if (!specs) return tl::unexpected(specs.error());
  std::vector<const features::ModelSpec*> models;
  for (const auto& spec : *specs) models.push_back(&spec);
  auto layout = Layout::build(models);
  if (!layout) return tl::unexpected(layout.error());
  auto server = connect(*url, c.timeout_seconds);
  if (!server) return tl::unexpected(server.error());
  const Send& send = server->send;
  const std::string& where = server->where;

  Loaded loaded{0, 0, where};
  const auto now = std::chrono::system_clock::now();
  std::vector<redis::Command> batch;
  std::optional<Error> failed;
  auto flush = [&]() {
    if (batch.empty() || failed) return;
    auto replies = send(batch);
    if (!replies) failed = replies.error();
    for (std::size_t i = 0; !failed && i < replies->size(); ++i) {
      if ((*replies)[i].error) failed = Error{Error::Code::kIo, "feature store " + loaded.where + ": HSET refused: " + *(*replies)[i].error, "to"};
    }
    batch.clear();
  };
  auto write = [&](const EntityLayout& entity, const std::string& id, const features::Features& features, std::size_t& count) {
    if (failed) return;
    auto key = entity.redis_key(id);
    if (!key) {
      failed = std::move(key.error()).with_context(c.file);
      return;
    }
    redis::Command command{"HSET", std::move(*key)};
    for (auto& [field, value] : Layout::encode(entity, features, now)) {
      command.push_back(std::move(field));
      command.push_back(std::move(value));
    }
    if (command.size() == 2) return;  // an entity without features: nothing to store
    batch.push_back(std::move(command));
    ++count;
    if (batch.size() == kPipeline) flush();
  };
  (*store)->for_each_user([&](const std::string& id, const features::Features& f) { write(layout->user(), id, f, loaded.users); });
  (*store)->for_each_item([&](const std::string& id, const features::Features& f) { write(layout->item(), id, f, loaded.items); });
  flush();
  if (failed) return tl::unexpected(*failed);
  return loaded;
}

}  // namespace numaserve::feature_store
