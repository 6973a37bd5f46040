#include "apiserver/apiserver.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "http/http.h"
#include "numaserve/common/duration.h"
#include "numaserve/common/text_file.h"

namespace numaserve::kube::apiserver {
namespace {

bool transient(int status) { return status == 429 || status >= 500; }

}  // namespace

std::string refusal_reason(const std::string& body) {
  const auto status = nlohmann::json::parse(body, nullptr, false);
  if (status.is_object() && status.contains("message") && status["message"].is_string()) {
    return status["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

std::optional<ApiServerConfig> in_cluster_config(const std::filesystem::path& service_account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  if (host == nullptr || *host == '\0') return std::nullopt;
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  std::string address = host;
  if (address.find(':') != std::string::npos) address = "[" + address + "]";  // IPv6
  ApiServerConfig config;
  config.url = "https://" + address + ":" + (port != nullptr && *port != '\0' ? port : "443");
  config.token_file = (service_account_dir / "token").string();
  config.ca_file = (service_account_dir / "ca.crt").string();
  return config;
}

std::optional<ApiServerConfig> Connection::config() const {
  auto config = in_cluster_config();
  if (!url.empty()) {
    if (!config) config.emplace();
    config->url = url;
  }
  if (config) {
    if (!ca_file.empty()) config->ca_file = ca_file;
    if (!token_file.empty()) config->token_file = token_file;
  }
  return config;
}

std::vector<OptionSpec> connection_options(Connection& c) {
  return {text_option("apiserver_url", "URL",
                      "API server to talk to (default in a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)",
                      c.url),
          text_option("apiserver_ca_file", "FILE", "CA bundle for the API server (default the service account's ca.crt)",
                      c.ca_file),
          text_option("apiserver_token_file", "FILE", "Bearer token file (default the service account's token)",
                      c.token_file)};
}

std::string Reply::reason() const {
  return "HTTP " + std::to_string(status) + ": " + refusal_reason(text);
}

ApiServer::ApiServer(ApiServerConfig config, std::string field_manager)
    : config_(std::move(config)), field_manager_(std::move(field_manager)) {}

Status ApiServer::apply_node_resource_topology(const nlohmann::json& nrt) {
  const std::string path =
      "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/" + nrt["metadata"]["name"].get<std::string>();
  return expect_ok(apply(path, nrt), path);
}

Status ApiServer::apply_node_labels(const std::string& node_name, const std::map<std::string, std::string>& labels) {
  // Only the labels: server-side apply makes this manager own exactly these
  // fields and leaves every other label and field of the Node alone.
  const nlohmann::json node = {{"apiVersion", "v1"},
                               {"kind", "Node"},
                               {"metadata", {{"name", node_name}, {"labels", labels}}}};
  const std::string path = "/api/v1/nodes/" + node_name;
  return expect_ok(apply(path, node), path);
}

Status ApiServer::expect_ok(Result<Reply> reply, const std::string& path) {
  if (!reply) return tl::unexpected(std::move(reply.error()));
  if (reply->ok()) return {};
  return make_error(Error::Code::kUnavailable, "PATCH " + path + ": " + reply->reason(), path);
}

Result<Reply> ApiServer::get(const std::string& path) { return send("GET", path, "", ""); }

Result<Reply> ApiServer::apply(const std::string& path, const nlohmann::json& object) {
  // JSON is YAML, so the apply-patch content type takes it as it is.
  return send("PATCH", path + (path.find('?') == std::string::npos ? "?" : "&") + "fieldManager=" + field_manager_ +
                           "&force=true",
              object.dump(), "application/apply-patch+yaml");
}

Result<Reply> ApiServer::create(const std::string& collection_path, const nlohmann::json& object) {
  return send("POST", collection_path + "?fieldManager=" + field_manager_, object.dump(), "application/json");
}

Result<Reply> ApiServer::replace(const std::string& path, const nlohmann::json& object) {
  return send("PUT", path + "?fieldManager=" + field_manager_, object.dump(), "application/json");
}

Result<Reply> ApiServer::remove(const std::string& path) { return send("DELETE", path, "", ""); }

Result<Reply> ApiServer::send(const std::string& method, const std::string& path, const std::string& body,
                              const std::string& content_type) {
  double backoff = config_.first_backoff_seconds;
  std::string last_error;
  for (unsigned attempt = 1; attempt <= config_.attempts; ++attempt) {
    if (attempt > 1) {
      ++retries_;
      std::this_thread::sleep_for(to_duration(backoff));
      backoff *= 2;
    }
    auto token = read_text_file(config_.token_file);
    if (!token) return tl::unexpected(std::move(token.error()).with_context("service-account token"));
    while (!token->empty() && (token->back() == '\n' || token->back() == ' ')) token->pop_back();

    http::Client client({config_.url, config_.ca_file, config_.timeout_seconds});
    auto response = client.send({method, path, {{"Authorization", "Bearer " + *token}, {"Accept", "application/json"}},
                                 body, content_type});
    if (!response) {
      last_error = response.error().message;
      continue;
    }
    Reply reply{response->status, nlohmann::json::parse(response->body, nullptr, false), response->body};
    if (reply.body.is_discarded()) reply.body = nullptr;
    if (!transient(response->status)) return reply;
    last_error = method + " " + path + ": HTTP " + std::to_string(response->status) + ": " + refusal_reason(response->body);
  }
  return make_error(Error::Code::kUnavailable,
                    last_error + " (gave up after " + std::to_string(config_.attempts) + " attempts)", path);
}

}  // namespace numaserve::kube::apiserver
