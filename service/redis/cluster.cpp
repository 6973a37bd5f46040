// Redis Cluster's pure parts (the URL, the hash slot, the slot map and the
// redirects) and the blocking client over Connection.
#include "redis/cluster.h"

#include <charconv>
#include <map>

namespace numaserve::redis {
namespace {

Error bad_cluster_url(const std::string& why) {
  return Error{Error::Code::kInvalidArgument, "feature store URL: " + why, "feature_store"};
}

std::optional<long long> integer(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  long long value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (text->empty() || ec != std::errc() || end != text->data() + text->size()) return std::nullopt;
  return value;
}

std::optional<NodeAddress> address(std::string_view text, const NodeAddress& fallback) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  int port = 0;
  const std::string_view digits = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || port < 1 || port > 65535) {
    return std::nullopt;
  }
  NodeAddress out{std::string(text.substr(0, colon)), port};
  if (out.host.empty()) out.host = fallback.host;
  return out;
}

// One node of a CLUSTER SLOTS range: [ip, port, id, ...].
std::optional<NodeAddress> slot_node(const Reply& node, const NodeAddress& asked) {
  if (node.elements.size() < 2 || !node.elements[0]) return std::nullopt;
  const auto port = integer(node.elements[1]);
  if (!port || *port < 1 || *port > 65535) return std::nullopt;
  NodeAddress out{*node.elements[0], static_cast<int>(*port)};
  // An empty or "?" endpoint: the node does not know it; the one we asked does.
  if (out.host.empty() || out.host == "?") out.host = asked.host;
  return out;
}

}  // namespace

bool is_cluster_url(std::string_view text) { return text.starts_with(kClusterScheme); }

Result<ClusterUrl> parse_cluster_url(std::string_view text, const std::string& password_file) {
  if (!is_cluster_url(text)) return tl::unexpected(bad_cluster_url("want redis+cluster://host:port[,host:port...]"));
  std::string_view rest = text.substr(kClusterScheme.size());
  std::string userinfo;
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    userinfo = std::string(rest.substr(0, at + 1));
    rest = rest.substr(at + 1);
  }
  if (rest.empty()) return tl::unexpected(bad_cluster_url("no startup node: want redis+cluster://host:port[,host:port...]"));
  ClusterUrl out;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view node = rest.substr(0, comma);
    if (node.find('/') != std::string_view::npos) {
      return tl::unexpected(bad_cluster_url("a cluster has no db to select: drop the /db from " + std::string(node)));
    }
    auto url = parse_url("redis://" + userinfo + std::string(node), password_file);
    if (!url) return tl::unexpected(std::move(url.error()).with_context("startup node '" + std::string(node) + "'"));
    out.nodes.push_back(std::move(*url));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

Result<AnyUrl> parse_any_url(std::string_view text, const std::string& password_file) {
  if (is_cluster_url(text)) {
    auto url = parse_cluster_url(text, password_file);
    if (!url) return tl::unexpected(url.error());
    return AnyUrl(std::move(*url));
  }
  auto url = parse_url(text, password_file);
  if (!url) return tl::unexpected(url.error());
  return AnyUrl(std::move(*url));
}

std::string ClusterUrl::redacted() const {
  std::string out(kClusterScheme);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    // Url::redacted() is redis://[user[:****]@]host:port; the user once, before the first node.
    const std::string one = nodes[i].redacted().substr(8);
    const auto at = one.rfind('@');
    out += i == 0 ? one : "," + (at == std::string::npos ? one : one.substr(at + 1));
  }
  return out;
}

std::uint16_t key_slot(std::string_view key) {
  // CRC16-XMODEM eight bytes at a time (slicing-by-8): a request's cold
  // fetch hashes 200 keys of ~60 bytes, and a byte at a time chains a table
  // read per byte. kTables[k][b] is the CRC of byte b followed by k zero
  // bytes, so eight bytes' contributions are independent reads XORed.
  static constexpr auto kTables = [] {
    std::array<std::array<std::uint16_t, 256>, 8> t{};
    for (unsigned byte = 0; byte < 256; ++byte) {
      unsigned crc = byte << 8;
      for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
      t[0][byte] = static_cast<std::uint16_t>(crc);
    }
    for (std::size_t k = 1; k < 8; ++k) {
      for (unsigned byte = 0; byte < 256; ++byte) {
        const unsigned prev = t[k - 1][byte];
        t[k][byte] = static_cast<std::uint16_t>((prev << 8) ^ t[0][prev >> 8]);
      }
    }
    return t;
  }();
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  const auto* p = reinterpret_cast<const unsigned char*>(key.data());
  std::size_t n = key.size();
  unsigned crc = 0;
  for (; n >= 8; p += 8, n -= 8) {
    crc = kTables[7][(crc >> 8) ^ p[0]] ^ kTables[6][(crc & 0xff) ^ p[1]] ^ kTables[5][p[2]] ^ kTables[4][p[3]] ^
          kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^ kTables[0][p[7]];
  }
  for (; n > 0; ++p, --n) crc = ((crc << 8) ^ kTables[0][((crc >> 8) ^ *p) & 0xff]) & 0xffff;
  return static_cast<std::uint16_t>(crc & (kSlots - 1));
}

Url node_url(const ClusterUrl& url, const NodeAddress& node) {
  Url out = url.nodes.front();
  out.host = node.host;
  out.port = node.port;
  return out;
}

std::string NodeAddress::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<std::vector<SlotRange>> parse_slots(const Reply& reply, const NodeAddress& asked) {
  auto bad = [&](const std::string& why) {
    return make_error(Error::Code::kInvalidArgument, "CLUSTER SLOTS from " + asked.text() + ": " + why, "slots");
  };
  if (reply.error) return bad("refused: " + *reply.error);
  if (reply.children.size() != reply.elements.size()) return bad("not an array of ranges");
  std::vector<SlotRange> out;
  std::vector<bool> claimed(kSlots, false);
  for (std::size_t r = 0; r < reply.children.size(); ++r) {
    const Reply& range = reply.children[r];
    const std::string where = "range " + std::to_string(r) + ": ";
    if (range.elements.size() < 3 || range.children.size() != range.elements.size()) return bad(where + "want [first, last, master, replicas...]");
    const auto first = integer(range.elements[0]), last = integer(range.elements[1]);
    if (!first || !last || *first < 0 || *last < *first || *last >= static_cast<long long>(kSlots)) {
      return bad(where + "slots must be 0 <= first <= last < 16384");
    }
    SlotRange parsed;
    parsed.first = static_cast<std::uint16_t>(*first);
    parsed.last = static_cast<std::uint16_t>(*last);
    for (std::size_t n = 2; n < range.children.size(); ++n) {
      auto node = slot_node(range.children[n], asked);
      if (!node) return bad(where + "node " + std::to_string(n - 2) + " is not [host, port, ...]");
      if (n == 2) {
        parsed.master = std::move(*node);
      } else {
        parsed.replicas.push_back(std::move(*node));
      }
    }
    for (std::size_t slot = parsed.first; slot <= parsed.last; ++slot) {
      if (claimed[slot]) return bad(where + "slot " + std::to_string(slot) + " claimed twice");
      claimed[slot] = true;
    }
    out.push_back(std::move(parsed));
  }
  return out;
}

bool is_redirect(std::string_view error) { return error.starts_with("MOVED ") || error.starts_with("ASK "); }

std::optional<Redirect> parse_redirect(std::string_view error, const NodeAddress& from) {
  Redirect out{Redirect::Kind::kMoved, 0, {}};
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    out.kind = Redirect::Kind::kAsk;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  const auto [end, ec] = std::from_chars(error.data(), error.data() + space, slot);
  if (space == 0 || ec != std::errc() || end != error.data() + space || slot >= kSlots) return std::nullopt;
  out.slot = static_cast<std::uint16_t>(slot);
  auto to = address(error.substr(space + 1), from);
  if (!to) return std::nullopt;
  out.to = std::move(*to);
  return out;
}

NodeCounters::Counts& NodeCounters::of(const NodeAddress& node) {
  const std::string name = node.text();
  std::lock_guard lock(mutex_);
  for (auto& [known, counts] : nodes_) {
    if (known == name) return counts;
  }
  return nodes_.emplace_back(std::piecewise_construct, std::forward_as_tuple(name), std::forward_as_tuple()).second;
}

std::vector<NodeCounters::Snapshot> NodeCounters::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<Snapshot> out;
  for (const auto& [node, c] : nodes_) {
    auto read = [](const std::atomic<std::uint64_t>& n) { return n.load(std::memory_order_relaxed); };
    out.push_back({node, read(c.pipelines), read(c.errors), read(c.moved), read(c.ask), read(c.refreshes)});
  }
  return out;
}

// ---- The blocking client ----

struct ClusterConnection::Impl {
  ClusterStart start;
  double timeout_seconds;
  std::array<std::uint16_t, kSlots> owner{};  // index into masters; kNone when unserved
  std::vector<NodeAddress> masters;
  std::map<std::string, Connection> open;  // by node address
  static constexpr std::uint16_t kNone = 0xffff;

  Result<Connection*> connection(const NodeAddress& node) {
    const std::string name = node.text();
    if (auto it = open.find(name); it != open.end()) return &it->second;
    auto c = Connection::open(node_url(start.url, node), timeout_seconds);
    if (!c) return tl::unexpected(c.error());
    return &open.emplace(name, std::move(*c)).first->second;
  }
  void adopt(std::vector<SlotRange> slots, NodeAddress from) {
    owner.fill(kNone);
    masters.clear();
    for (const auto& range : slots) {
      auto known = std::find(masters.begin(), masters.end(), range.master);
      if (known == masters.end()) known = masters.insert(masters.end(), range.master);
      for (std::size_t s = range.first; s <= range.last; ++s) owner[s] = static_cast<std::uint16_t>(known - masters.begin());
    }
    start.slots = std::move(slots);
    start.read_from = std::move(from);
  }
  // From the startup nodes, then from the masters known: the first that answers.
  Status read_map() {
    std::vector<NodeAddress> candidates;
    for (const auto& n : start.url.nodes) candidates.push_back({n.host, n.port});
    candidates.insert(candidates.end(), masters.begin(), masters.end());
    std::string errors;
    for (const auto& node : candidates) {
      auto c = connection(node);
      auto replies = c ? (*c)->pipeline({{"CLUSTER", "SLOTS"}}) : tl::unexpected(c.error());
      auto slots = replies ? parse_slots(replies->front(), node) : tl::unexpected(replies.error());
      if (slots && !slots->empty()) {
        adopt(std::move(*slots), node);
        return {};
      }
      if (!c || !replies) open.erase(node.text());
      errors += (errors.empty() ? "" : "; ") + (slots ? node.text() + ": serves no slot" : slots.error().message);
    }
    return make_error(Error::Code::kIo, "feature store " + start.url.redacted() + ": no node gave the slot map: " + errors);
  }
};

ClusterConnection::ClusterConnection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterConnection::ClusterConnection(ClusterConnection&&) noexcept = default;
ClusterConnection& ClusterConnection::operator=(ClusterConnection&&) noexcept = default;
ClusterConnection::~ClusterConnection() = default;
const ClusterStart& ClusterConnection::start() const { return impl_->start; }

Result<ClusterConnection> ClusterConnection::open(const ClusterUrl& url, double timeout_seconds) {
  auto impl = std::make_unique<Impl>();
  impl->start.url = url;
  impl->timeout_seconds = timeout_seconds;
  if (auto read = impl->read_map(); !read) return tl::unexpected(read.error());
  return ClusterConnection(std::move(impl));
}

Status ClusterConnection::ping_masters() {
  for (const auto& master : impl_->masters) {
    auto c = impl_->connection(master);
    auto replies = c ? (*c)->pipeline({{"PING"}}) : tl::unexpected(c.error());
    if (!replies || replies->front().error) {
      return make_error(Error::Code::kIo, "feature store " + impl_->start.url.redacted() + ": master " + master.text() +
                                              ": PING failed: " + (!replies ? replies.error().message : *replies->front().error));
    }
  }
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    if (impl_->owner[slot] == Impl::kNone) {
      return make_error(Error::Code::kUnavailable, "feature store " + impl_->start.url.redacted() + ": slot " +
                                                       std::to_string(slot) + " is served by no master (CLUSTER SLOTS from " +
                                                       impl_->start.read_from.text() + ")");
    }
  }
  return {};
}

Result<std::vector<Reply>> ClusterConnection::pipeline(const std::vector<Command>& commands) {
  Impl& s = *impl_;
  std::vector<Reply> out(commands.size());
  std::vector<std::size_t> todo(commands.size());
  for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  // A slot that moves while we write is followed; one that keeps moving is an error.
  for (int round = 0; round < 5 && !todo.empty(); ++round) {
    std::map<std::uint16_t, std::vector<std::size_t>> by_master;
    for (const std::size_t i : todo) {
      const std::uint16_t master = s.owner[key_slot(commands[i].at(1))];
      if (master == Impl::kNone) {
        return make_error(Error::Code::kUnavailable, "feature store " + s.start.url.redacted() + ": slot " +
                                                         std::to_string(key_slot(commands[i][1])) + " is served by no master");
      }
      by_master[master].push_back(i);
    }
    std::vector<std::size_t> again;
    bool moved = false;
    for (const auto& [master, indices] : by_master) {
      const NodeAddress node = s.masters[master];
      auto c = s.connection(node);
      if (!c) return tl::unexpected(c.error());
      std::vector<Command> batch;
      for (const std::size_t i : indices) batch.push_back(commands[i]);
      auto replies = (*c)->pipeline(batch);
      if (!replies) {
        s.open.erase(node.text());
        return tl::unexpected(replies.error());
      }
      for (std::size_t k = 0; k < indices.size(); ++k) {
        Reply& reply = (*replies)[k];
        const auto redirect = reply.error ? parse_redirect(*reply.error, node) : std::nullopt;
        if (redirect && redirect->kind == Redirect::Kind::kAsk) {
          auto target = s.connection(redirect->to);
          if (!target) return tl::unexpected(target.error());
          auto asked = (*target)->pipeline({{"ASKING"}, commands[indices[k]]});
          if (!asked) return tl::unexpected(asked.error());
          out[indices[k]] = std::move((*asked)[1]);
        } else if (redirect) {
          moved = true;
          again.push_back(indices[k]);
        } else {
          out[indices[k]] = std::move(reply);
        }
      }
    }
    if (moved) {
      if (auto read = s.read_map(); !read) return tl::unexpected(read.error());
    }
    todo = std::move(again);
  }
  if (!todo.empty()) {
    return make_error(Error::Code::kUnavailable, "feature store " + s.start.url.redacted() + ": slot " +
                                                     std::to_string(key_slot(commands[todo.front()][1])) +
                                                     " kept moving (MOVED five times)");
  }
  return out;
}

}  // namespace numaserve::redis
