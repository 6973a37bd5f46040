#include "lifecycle/manager.h"

#include <malloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "numaserve/common/log.h"
#include "numaserve/common/options.h"
#include "numaserve/common/placement.h"
#include "lifecycle/watcher.h"

namespace numaserve::lifecycle {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Why a version left: the index keeps saying it once the version is freed.
constexpr const char* kUnloadCall = "unloaded";
constexpr const char* kDirectoryGone = "its model directory was removed";

constexpr auto kRetireCheck = std::chrono::milliseconds(50);
// A warm-up that has not ended by then has a worker stuck: the version is refused.
constexpr auto kWarmupLimit = std::chrono::seconds(300);
// How long an unload (or the resource policy's unload-first) waits for the
// requests holding a version before it goes on without it freed.
constexpr auto kFreeLimit = std::chrono::seconds(30);

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<std::string> served_numbers(const ModelTable& table, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& v : table.versions(name)) out.push_back(v->version);
  return out;
}

// A model's name is its directory's: model.yaml must say the same.
Status same_name(const std::string& name, const repository::VersionDir& v, const api::Model& loaded) {
  if (loaded.spec().name == name) return {};
  return make_error(Error::Code::kInvalidArgument,
                    (v.dir / "model.yaml").string() + ": names the model '" + loaded.spec().name + "', its directory '" + name +
                        "' (they must be the same)",
                    "name");
}

// "repo/" and "repo" name one repository: the watcher's paths and the
// scan's must compare equal.
std::string normal(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p.string();
}
}  // namespace

Manager::Manager(ReloadConfig config, Loader loader, std::function<void()> prepare_thread)
    : config_([&config] {
        config.repository = normal(config.repository);
        return std::move(config);
      }()),
      loader_(std::move(loader)),
      prepare_thread_(std::move(prepare_thread)),
      event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  // An unloaded version's memory must go back to the system. glibc raises
  // its mmap threshold to the size of each mmapped block freed (up to 32
  // MiB), so after the first unload the next version's tables come from the
  // heap, where freed pages may stay resident: measured here, RSS after 20
  // reloads of a 16 MiB model was up to one version above that after the
  // first; with the threshold fixed at 1 MiB, 1.3 MiB above, every run. A
  // request's buffers rarely reach 1 MiB, so they stay on the heap.
  if (config_.control_mode != ControlMode::kNone) mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

Manager::~Manager() {
  stop();
  if (event_fd_ >= 0) ::close(event_fd_);
}

void Manager::set_entry(const std::string& name, const std::string& version, VersionState state, std::string reason) {
  std::lock_guard lock(mutex_);
  entries_[name][version] = RepositoryEntry{name, version, std::move(state), std::move(reason)};
}

std::vector<RepositoryEntry> Manager::index() const {
  std::lock_guard lock(mutex_);
  std::vector<RepositoryEntry> out;
  for (const auto& [name, versions] : entries_) {
    std::vector<const RepositoryEntry*> sorted;
    for (const auto& [number, e] : versions) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return version_less(a->version, b->version); });
    for (const auto* e : sorted) out.push_back(*e);
  }
  return out;
}

Result<std::vector<std::unique_ptr<api::Model>>> Manager::load_initial() {
  auto models = repository::scan(config_.repository, repository::ReadAt::kStartUp);
  if (!models) return tl::unexpected(std::move(models.error()).with_context("reading --model-repository"));
  if (models->empty()) {
    return make_error(Error::Code::kNotFound, config_.repository + ": no model directory (DIR/<model>/<version>/model.pt)", "model_repository");
  }
  std::vector<std::unique_ptr<api::Model>> out;
  for (const auto& model : *models) {
    if (!model.policy) return tl::unexpected(model.policy.error());
    // Nothing serves and nothing failed yet: the plan loads what the policy wants.
    const VersionPlan plan = plan_versions({&model, {}, {}, {}, true, config_.availability});
    std::optional<features::ModelSpec> contract;
    std::string failures;
    for (const auto& v : model.versions) {
      // What was there at start-up stays complete; later versions complete
      // by the watcher's word, their marker or a load call.
      if (v.complete) renamed_.insert(v.dir);
    }
    for (const auto& u : plan.unavailable) set_entry(model.name, u.version, VersionState::kUnavailable, u.reason);
    for (const auto& number : plan.load) {
      const auto& v = *std::find_if(model.versions.begin(), model.versions.end(), [&](const auto& x) { return x.number == number; });
      auto loaded = loader_(v.dir, v.number, 1.0);  // nothing serves yet
      Status ok = loaded ? same_name(model.name, v, **loaded) : Status(tl::unexpected(loaded.error()));
      if (ok && contract) ok = features::same_feature_contract(*contract, (*loaded)->spec());
      if (!ok) {
        failed_[model.name][v.number] = v.fingerprint;
        set_entry(model.name, v.number, VersionState::kUnavailable, ok.error().message);
        failures += (failures.empty() ? "" : "; ") + ok.error().message;
        log(LogLevel::kWarning, "version not loaded", {{"model", model.name}, {"version", v.number}, {"reason", ok.error().message}});
        continue;
      }
      if (!contract) contract = (*loaded)->spec();
      set_entry(model.name, v.number, VersionState::kReady);
      log(LogLevel::kInfo, "version loaded at start-up", {{"model", model.name}, {"version", v.number}, {"complete", v.why}});
      out.push_back(std::move(*loaded));
    }
    if (!contract) {
      std::string why = failures;
      if (why.empty()) {
        for (const auto& v : model.versions) why += (why.empty() ? "" : "; ") + v.number + ": " + v.why;
      }
      return make_error(Error::Code::kNotFound,
                        config_.repository + "/" + model.name + ": no version could be served (" + (why.empty() ? "no version directory" : why) + ")",
                        "model_repository");
    }
    names_.insert(model.name);
    labels_at_start_[model.name] = model.policy->labels;
  }
  return out;
}

Status Manager::start(ServiceHooks hooks) {
  hooks_ = std::move(hooks);
  for (const auto& [name, labels] : labels_at_start_) apply_labels(name, labels);
  if (config_.control_mode == ControlMode::kPoll) {
    auto watcher = Watcher::open(config_.repository);
    if (!watcher) return tl::unexpected(watcher.error());
    watcher_ = std::move(*watcher);
  }
  if (event_fd_ < 0) return make_error(Error::Code::kUnavailable, "eventfd failed", "model_control_mode");
  // Started from the bound main thread: the new thread has its CPUs and
  // memory policy, so versions loaded later land on this replica's node.
  thread_ = std::thread([this] { run(); });
  return {};
}

void Manager::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  notify();
  if (thread_.joinable()) thread_.join();
  for (auto& r : requests_) r.done(make_error(Error::Code::kUnavailable, "the service is shutting down", "model"));
  requests_.clear();
}

void Manager::ask(Request::Kind kind, const std::string& name, std::function<void(Status)> done) {
  if (auto ok = repository::check_model_name(name); !ok) return done(ok);
  if (config_.control_mode == ControlMode::kNone) {
    return done(make_error(Error::Code::kNotAllowed,
                           "--model-control-mode none: the repository is read at start only (use poll or explicit)", "model_control_mode"));
  }
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return done(make_error(Error::Code::kUnavailable, "the service is shutting down", "model"));
    requests_.push_back(Request{kind, name, std::move(done)});
  }
  notify();
}

void Manager::load(const std::string& name, std::function<void(Status)> done) { ask(Request::Kind::kLoad, name, std::move(done)); }
void Manager::unload(const std::string& name, std::function<void(Status)> done) { ask(Request::Kind::kUnload, name, std::move(done)); }

void Manager::notify() {
  const std::uint64_t one = 1;
  if (event_fd_ >= 0 && ::write(event_fd_, &one, sizeof one) < 0) log(LogLevel::kWarning, "eventfd write failed");
}

void Manager::run() {
  const auto rescan_every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.rescan_seconds));
  auto next_rescan = Clock::now() + rescan_every;
  // Events come in bursts (a copy: a create, then writes); the repository
  // is read once they pause for kSettle, and at most kSettleLimit after the
  // first. kSettle is longer than the kernel's timestamp tick, so a file
  // created under way has been written to since (and is newer than its
  // directory: not complete by the rename rule) when it is read.
  constexpr auto kSettle = std::chrono::milliseconds(50);
  constexpr auto kSettleLimit = std::chrono::milliseconds(500);
  bool heard = false;  // events wait to be read: the scan is due at scan_at
  Clock::time_point first_event, scan_at;
  for (;;) {
    std::optional<Clock::time_point> deadline;
    auto sooner = [&deadline](Clock::time_point t) { deadline = deadline ? std::min(*deadline, t) : t; };
    if (!retiring_.empty()) sooner(Clock::now() + kRetireCheck);
    if (watcher_) sooner(next_rescan);
    if (heard) sooner(scan_at);
    const int timeout_ms =
        deadline ? static_cast<int>(std::max<long long>(0, std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count())) : -1;
    pollfd fds[2] = {{event_fd_, POLLIN, 0}, {watcher_ ? watcher_->fd() : -1, POLLIN, 0}};
    ::poll(fds, watcher_ ? 2 : 1, timeout_ms);
    std::uint64_t count = 0;
    [[maybe_unused]] auto n = ::read(event_fd_, &count, sizeof count);
    std::deque<Request> requests;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      requests.swap(requests_);
    }
    for (auto& r : requests) serve_request(r);
    const auto now = Clock::now();
    if (watcher_ && (fds[1].revents & POLLIN) && watcher_->read(renamed_)) {
      if (!heard) first_event = now;
      heard = true;
      scan_at = std::min(now + kSettle, first_event + kSettleLimit);
    }
    if (watcher_ && (now >= next_rescan || (heard && now >= scan_at))) {
      heard = false;
      next_rescan = now + rescan_every;
      reconcile_all();
      watcher_->rewatch();
    }
    free_retired(false);
  }
  free_retired(false);
}

void Manager::on_load_thread(const std::function<void()>& work) const {
  std::thread thread([&] {
    // Under --reload-priority idle a SCHED_IDLE thread runs on what the
    // workers leave idle, and a worker woken by a request preempts it at once (nice +10 did not:
    // it held a worker off for a scheduler slice, p99 x7 during reloads on
    // one CPU at 70% load, bench/reload.sh). Under saturation a load waits.
    sched_param idle{};
    if (config_.idle_priority && pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle) != 0) {
      log(LogLevel::kWarning, "a loading thread could not be made SCHED_IDLE; it runs beside the workers");
    }
    if (prepare_thread_) prepare_thread_();
    work();
  });
  thread.join();
}

void Manager::serve_request(Request& r) {
  std::error_code ec;
  if (!names_.contains(r.name) && !fs::is_directory(fs::path(config_.repository) / r.name, ec)) {
    return r.done(make_error(Error::Code::kNotFound, "no model '" + r.name + "' in the repository", "name"));
  }
  if (r.kind == Request::Kind::kUnload) {
    unloaded_.insert(r.name);
    hooks_.models->set_unloaded(r.name, true);
    for (const auto& number : served_numbers(*hooks_.models, r.name)) retire(r.name, number, kUnloadCall);
    free_retired(true);
    log(LogLevel::kInfo, "model unloaded", {{"model", r.name}});
    return r.done({});
  }
  unloaded_.erase(r.name);
  hooks_.models->set_unloaded(r.name, false);
  auto model = repository::scan_model(config_.repository, r.name, repository::ReadAt::kLoadCall, renamed_);
  if (!model) {
    log(LogLevel::kWarning, "model directory unreadable; still serving what serves", {{"model", r.name}, {"reason", model.error().message}});
    return r.done(tl::unexpected(model.error()));
  }
  r.done(reconcile(*model, true));
}

void Manager::reconcile_all() {
  auto models = repository::scan(config_.repository, repository::ReadAt::kPolling, renamed_);
  if (!models) {
    log(LogLevel::kWarning, "repository unreadable; still serving what serves", {{"reason", models.error().message}});
    return;
  }
  std::set<std::string> present;
  for (auto& m : *models) {
    present.insert(m.name);
    // An operator's unload holds until their load call, whatever the files do.
    if (!unloaded_.contains(m.name)) (void)reconcile(m, false);
  }
  // A model whose directory went is unloaded, each version once its last
  // request has answered; it serves again if its directory comes back.
  for (const auto& name : names_) {
    const auto served = served_numbers(*hooks_.models, name);
    if (present.contains(name) || served.empty()) continue;
    hooks_.models->set_unloaded(name, true);
    for (const auto& number : served) retire(name, number, kDirectoryGone);
    log(LogLevel::kInfo, "model directory removed: unloading it", {{"model", name}});
  }
}

Status Manager::reconcile(repository::ModelDir& model, bool asked) {
  const std::string& name = model.name;
  if (!model.policy) {
    log(LogLevel::kWarning, "version policy refused; still serving what serves", {{"model", name}, {"reason", model.policy.error().message}});
    return tl::unexpected(model.policy.error());
  }
  auto& table = *hooks_.models;
  VersionPlanInput input{&model, served_numbers(table, name), {}, failed_[name], asked, config_.availability};
  {
    std::lock_guard lock(mutex_);
    for (const auto& [number, e] : entries_[name]) input.shown[number] = e.state;
  }
  const VersionPlan plan = plan_versions(input);
  {
    std::lock_guard lock(mutex_);
    for (const auto& number : plan.forget) entries_[name].erase(number);
  }
  for (const auto& u : plan.unavailable) set_entry(name, u.version, VersionState::kUnavailable, u.reason);
  Status result;
  auto load = [&](const std::vector<std::string>& numbers, bool asked_now) {
    for (const auto& number : numbers) {
      const auto v = std::find_if(model.versions.begin(), model.versions.end(), [&](const auto& x) { return x.number == number; });
      if (v == model.versions.end()) continue;  // a retired version gone from disk cannot come back
      if (auto ok = load_version(model, *v, asked_now); !ok && result) result = ok;
    }
  };
  if (plan.retire_first) {
    // resource: the old versions go first, so only one is in memory.
    for (const auto& number : plan.retire) retire(name, number, kNotWanted);
    free_retired(true);
  }
  load(plan.load, asked);
  load(restore(plan, served_numbers(table, name)), true);
  for (const auto& number : retire_after_loads(plan, served_numbers(table, name))) {
    retire(name, number, kNotWanted);
  }
  apply_labels(name, model.policy->labels);
  return result;
}

Status Manager::check_memory(const repository::VersionDir& v) const {
  auto memory = discover_cgroup_memory("/");
  if (!memory || !*memory) return {};  // no memory cgroup to read: nothing to check against
  const auto room = (*memory)->room();
  if (!room) return {};
  std::error_code ec;
  const std::uint64_t weights = fs::file_size(v.dir / "model.pt", ec);
  // The weights as model.pt stores them, plus what a load allocates beside
  // them (the graph, its frozen copy, the first forwards' buffers).
  const std::uint64_t reserve = std::max<std::uint64_t>(64ull << 20, *(*memory)->limit / 20);
  if (weights + reserve <= *room) return {};
  const std::string advice = config_.availability ? " (--reload-policy resource unloads the old version first)" : "";
  return make_error(Error::Code::kUnavailable,
                    "memory: the version needs about " + mib(weights + reserve) + " (model.pt " + mib(weights) + " and " +
                        mib(reserve) + " beside it) and the container's cgroup " + (*memory)->dir.string() + " has " +
                        mib(*room) + " left of its " + mib(*(*memory)->limit) + " limit" + advice,
                    "memory");
}

Status Manager::load_version(const repository::ModelDir& model, const repository::VersionDir& v, bool asked) {
  const std::string& name = model.name;
  set_entry(name, v.number, VersionState::kLoading);
  const auto started = Clock::now();
  std::string result = "memory";
  Status ok;
  std::shared_ptr<ServedVersion> prepared;
  on_load_thread([&] {
    log(LogLevel::kInfo, "loading version",
        {{"model", name}, {"version", v.number}, {"complete", v.why}, {"priority", sched_getscheduler(0) == SCHED_IDLE ? "idle" : "normal"},
         {"cpu_share", format_number(config_.cpu_share)}});
    ok = check_memory(v);
    if (!ok) return;
    result = "load";
    auto loaded = loader_(v.dir, v.number, config_.cpu_share);
    if (!loaded) {
      ok = tl::unexpected(loaded.error());
    } else if (auto named = same_name(name, v, **loaded); !named) {
      result = "name";
      ok = named;
    } else if (auto added = hooks_.add_model((*loaded)->spec()); !added) {
      result = "store";  // a model new since start the feature store cannot serve
      ok = added;
    } else {
      names_.insert(name);
      result = "contract";
      auto p = hooks_.models->prepare(std::move(*loaded));
      if (!p) ok = tl::unexpected(p.error());
      else prepared = std::move(*p);
    }
  });
  const double load_seconds = seconds_since(started);
  double warm_seconds = 0;
  if (ok) {
    result = "warmup";
    const auto warm_started = Clock::now();
    ok = warm(prepared);
    warm_seconds = seconds_since(warm_started);
  }
  if (!ok) return refuse(name, v, result, std::move(ok.error()), asked);
  failed_[name].erase(v.number);
  hooks_.models->publish(prepared);
  set_entry(name, v.number, VersionState::kReady);
  hooks_.metrics->count_load(name, "ok");
  hooks_.metrics->observe_load(name, load_seconds, warm_seconds);
  log(LogLevel::kInfo, "version serving",
      {{"model", name}, {"version", v.number}, {"load_seconds", std::to_string(load_seconds)}, {"warmup_seconds", std::to_string(warm_seconds)}});
  return {};
}

Status Manager::warm(const HeldVersion& version) const {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  hooks_.warm(version, [promise](Status s) { promise->set_value(std::move(s)); });
  if (future.wait_for(kWarmupLimit) != std::future_status::ready) {
    return make_error(Error::Code::kUnavailable, "its warm-up did not end within 300 s", "version");
  }
  return future.get();
}

Status Manager::refuse(const std::string& name, const repository::VersionDir& v, const std::string& result, Error e, bool asked) {
  // Which version, in the reply of a load call and the index.
  if (!e.message.starts_with("model " + name + " version ")) e.message = "model " + name + " version " + v.number + ": " + e.message;
  if (e.field.empty()) e.field = "version";
  failed_[name][v.number] = v.fingerprint;
  set_entry(name, v.number, VersionState::kUnavailable, e.message);
  hooks_.metrics->count_load(name, result);
  log(LogLevel::kWarning, "version refused; what served still serves",
      {{"model", name}, {"version", v.number}, {"result", result}, {"reason", e.message}, {"asked", asked ? "true" : "false"}});
  return tl::unexpected(std::move(e));
}

void Manager::retire(const std::string& name, const std::string& version, const char* why) {
  if (auto held = hooks_.models->remove(name, version)) {
    set_entry(name, version, VersionState::kUnloading);
    retiring_.push_back(Retiring{std::move(held), why});
  }
}

void Manager::free_retired(bool wait) {
  const auto deadline = Clock::now() + kFreeLimit;
  for (;;) {
    // What no request holds any more; the index names each once it is freed
    // (from copies: the names live in what is freed).
    struct Freed {
      std::string name, version, why;
      HeldVersion held;  // moved last: a braced list is evaluated in order
    };
    std::vector<Freed> freed;
    std::erase_if(retiring_, [&](Retiring& r) {
      if (r.version.use_count() > 1) return false;
      freed.push_back(Freed{r.version->name, r.version->version, r.why, std::move(r.version)});
      return true;
    });
    if (!freed.empty()) {
      on_load_thread([&freed] {
        for (auto& f : freed) f.held.reset();  // the last references: the weights are freed here
        // glibc keeps freed arenas' pages; the weights were hundreds of MiB.
        malloc_trim(0);
      });
      for (auto& f : freed) {
        log(LogLevel::kInfo, "version unloaded", {{"model", f.name}, {"version", f.version}});
        set_entry(f.name, f.version, VersionState::kUnavailable, std::move(f.why));
      }
    }
    if (!wait || retiring_.empty() || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Manager::apply_labels(const std::string& name, const std::map<std::string, std::string>& labels) {
  for (const auto& why : hooks_.models->set_labels(name, labels)) {
    log(LogLevel::kWarning, "label refused", {{"model", name}, {"reason", why}});
  }
}

}  // namespace numaserve::lifecycle
