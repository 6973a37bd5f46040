#include "lifecycle/watcher.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "repository/repository.h"

namespace numaserve::lifecycle {

namespace fs = std::filesystem;

namespace {
// What a copy, a rename, a marker and a symlink swap each send.
constexpr std::uint32_t kEvents = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB |
                                  IN_DELETE_SELF | IN_MOVE_SELF;
}  // namespace

Result<std::unique_ptr<Watcher>> Watcher::open(const fs::path& root) {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return make_error(Error::Code::kUnavailable, std::string("inotify_init1: ") + std::strerror(errno), "model_repository");
  std::unique_ptr<Watcher> w(new Watcher(fd, root));
  w->rewatch();
  return w;
}

Watcher::~Watcher() { ::close(fd_); }

void Watcher::watch(const fs::path& dir) {
  const int wd = inotify_add_watch(fd_, dir.c_str(), kEvents);
  if (wd >= 0) dirs_[wd] = dir;  // the same directory again returns the same wd
}

void Watcher::rewatch() {
  std::error_code ec;
  if (fs::is_symlink(root_, ec)) watch(root_.parent_path().empty() ? fs::path(".") : root_.parent_path());
  watch(root_);
  for (auto m = fs::directory_iterator(root_, ec); !ec && m != fs::directory_iterator(); m.increment(ec)) {
    if (!m->is_directory(ec)) continue;
    watch(m->path());
    std::error_code vec;
    for (auto v = fs::directory_iterator(m->path(), vec); !vec && v != fs::directory_iterator(); v.increment(vec)) {
      if (repository::is_version_number(v->path().filename().string()) && v->is_directory(vec)) watch(v->path());
    }
  }
}

bool Watcher::read(std::set<fs::path>& renamed) {
  alignas(inotify_event) char buffer[16 * (sizeof(inotify_event) + NAME_MAX + 1)];
  bool any = false;
  for (;;) {
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n <= 0) return any;  // EAGAIN: drained
    any = true;
    for (char* p = buffer; p < buffer + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(p);
      p += sizeof(inotify_event) + e->len;
      if (e->mask & IN_IGNORED) {
        dirs_.erase(e->wd);
        continue;
      }
      const auto dir = dirs_.find(e->wd);
      if (dir == dirs_.end() || e->len == 0) continue;
      const std::string name = e->name;
      if (!(e->mask & IN_MOVED_TO) || !(e->mask & IN_ISDIR)) continue;
      // A version directory moved into a model's directory (root/<model>/<n>).
      if (repository::is_version_number(name) && dir->second.parent_path() == root_) renamed.insert(dir->second / name);
      // A model directory moved into the repository: its versions were
      // written before the move, so each is complete.
      if (dir->second == root_ && repository::check_model_name(name)) {
        std::error_code ec;
        for (auto v = fs::directory_iterator(root_ / name, ec); !ec && v != fs::directory_iterator(); v.increment(ec)) {
          if (repository::is_version_number(v->path().filename().string())) renamed.insert(v->path());
        }
      }
    }
  }
}

}  // namespace numaserve::lifecycle
