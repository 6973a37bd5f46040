#pragma once
// The model repository's manager (--model-repository): which versions of
// each model serve, and the loads and unloads that get there, as the
// repository (poll mode: inotify and rescans) and the admin routes
// (explicit and poll mode) ask.
//
// Life: load_initial() on start-up's bound main thread (the weights land on
// the replica's node, as --model-dir's do) -> the Service is built on what
// it returns -> attach() -> start() from that same thread once the workers
// serve: the manager's thread inherits its CPUs and memory policy, so every
// later version's weights are local too.
//
// A change, on the manager's thread, one model at a time (reconcile): the
// model's directory is read (repository::scan_model), repository::plan
// decides what to load and retire (every rule is there, pure), and this
// acts:
//   availability (default): load the new version -> check (signature,
//   tables, a synthetic forward) -> the memory it needs fits the cgroup ->
//   warm it on every worker (Service::warm: one forward per worker turn) ->
//   publish (new requests resolve it) -> retire the versions the policy
//   no longer wants: unpublished at once, freed (and malloc_trim'd) once
//   the last request holding them has answered.
//   resource: retire first, wait until freed, then load; if the new one
//   fails, the old one is loaded again.
// A failure leaves what serves untouched, shows UNAVAILABLE with the reason
// in the index, is logged and counted, and is not retried until the
// version's files change (or a load call asks).
//
// The manager's thread is a normal one: it sees a change, answers the
// index and decides at once however busy the CPUs are. A load's CPU work
// (and a version's freeing) runs on a thread of its own, SCHED_IDLE under
// --reload-priority idle (the default): it runs on the CPU time the workers
// leave, and a worker woken by a request preempts it at once. The workers'
// own share of a reload is the warm-up, one forward per turn.

#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/model.h"
#include "lifecycle/control.h"
#include "lifecycle/config.h"
#include "lifecycle/plan.h"

namespace numaserve::lifecycle {

class Watcher;

// Loads DIR/model.pt and DIR/model.yaml as `version` (empty: model.yaml's)
// and checks it runs, reading model.pt at up to `cpu_share` of one CPU
// (PacedFile; start-up's loads 1): the calling thread's binding decides
// where the weights land (start-up's runtime.load).
using Loader = std::function<Result<std::unique_ptr<api::Model>>(const std::filesystem::path& dir, const std::string& version,
                                                                 double cpu_share)>;

class Manager final : public RepositoryControl {
 public:
  // `prepare_thread`: the model runtime's setup of a loading thread
  // (one intra-op thread: a load must not fan out over the workers' CPUs).
  Manager(ReloadConfig config, Loader loader, std::function<void()> prepare_thread = {});
  ~Manager() override;
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // Every model of the repository at the versions its policy wants. A
  // model none of whose versions loads fails start-up, naming it and why.
  Result<std::vector<std::unique_ptr<api::Model>>> load_initial();
  // The service built on load_initial()'s models: labels set, then the
  // manager's thread started (poll mode: the watcher with it).
  Status start(ServiceHooks hooks);
  void stop();

  std::vector<RepositoryEntry> index() const override;
  void load(const std::string& name, std::function<void(Status)> done) override;
  void unload(const std::string& name, std::function<void(Status)> done) override;

 private:
  struct Request {
    enum class Kind { kLoad, kUnload } kind;
    std::string name;
    std::function<void(Status)> done;
  };

  void run();
  void reconcile_all();
  Status reconcile(repository::ModelDir& model, bool asked);  // `model` as just read
  Status load_version(const repository::ModelDir& model, const repository::VersionDir& v, bool asked);
  Status check_memory(const repository::VersionDir& v) const;
  // Warms a prepared version on every worker, within kWarmupLimit.
  Status warm(const HeldVersion& version) const;
  // A version that did not load: recorded (not retried until its files
  // change), shown, counted and logged; returns the error naming it.
  Status refuse(const std::string& name, const repository::VersionDir& v, const std::string& result, Error e, bool asked);
  void retire(const std::string& name, const std::string& version, const char* why);
  void free_retired(bool wait);
  // Runs `work` on a new thread (it inherits this one's CPUs and memory
  // policy), SCHED_IDLE under --reload-priority idle, and waits for it. A
  // thread per load because one cannot leave SCHED_IDLE without
  // CAP_SYS_NICE, so the manager's own could not be switched back.
  void on_load_thread(const std::function<void()>& work) const;
  void set_entry(const std::string& name, const std::string& version, VersionState state, std::string reason = {});
  void apply_labels(const std::string& name, const std::map<std::string, std::string>& labels);
  // A load or unload call, queued for the manager's thread (checked here first).
  void ask(Request::Kind kind, const std::string& name, std::function<void(Status)> done);
  void serve_request(Request& r);
  void notify();  // the manager's thread looks at its requests

  const ReloadConfig config_;
  const Loader loader_;
  const std::function<void()> prepare_thread_;
  ServiceHooks hooks_;
  std::set<std::string> names_;  // the models the service knows (start-up's, then each added: Service::add_model)
  std::map<std::string, std::map<std::string, std::string>> labels_at_start_;  // set once the service exists

  mutable std::mutex mutex_;
  std::deque<Request> requests_;
  bool stopping_ = false;
  // What the index shows, name -> version -> entry (the manager's thread writes).
  std::map<std::string, std::map<std::string, RepositoryEntry>> entries_;

  // The manager's thread alone from here.
  std::map<std::string, std::map<std::string, std::string>> failed_;  // name -> version -> the fingerprint that failed
  std::set<std::string> unloaded_;             // by an unload call, until a load call
  std::set<std::filesystem::path> renamed_;    // version directories the watcher saw moved into place
  struct Retiring {
    HeldVersion version;  // unpublished, freed when no request holds it
    const char* why;           // the index's reason once freed
  };
  std::vector<Retiring> retiring_;
  int event_fd_ = -1;
  std::thread thread_;
  std::unique_ptr<Watcher> watcher_;
};

}  // namespace numaserve::lifecycle
