#pragma once
// poll mode's ears: inotify on the repository's directory, each model's and
// each version's (a marker arriving), and the parent of a repository that is
// a symlink (a kubelet volume's `..data` swap replaces it there). Events are
// only a hint to rescan: the manager reads the repository again (and a
// periodic rescan covers what inotify misses: an overflowed queue, a
// filesystem that sends nothing).

#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "numaserve/common/result.h"

namespace numaserve::lifecycle {

class Watcher {
 public:
  static Result<std::unique_ptr<Watcher>> open(const std::filesystem::path& root);
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  int fd() const { return fd_; }
  // Watches what the repository holds now; after every change, so new model
  // and version directories are heard too.
  void rewatch();
  // Drains the pending events; whether any came. Version directories moved
  // into a model's directory, and the versions of a model directory moved
  // into the repository, are added to `renamed` (the rename rule).
  bool read(std::set<std::filesystem::path>& renamed);

 private:
  Watcher(int fd, std::filesystem::path root) : fd_(fd), root_(std::move(root)) {}
  void watch(const std::filesystem::path& dir);

  const int fd_;
  const std::filesystem::path root_;
  std::map<int, std::filesystem::path> dirs_;  // watch descriptor -> the directory as named under root
};

}  // namespace numaserve::lifecycle
