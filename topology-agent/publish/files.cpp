#include "publish/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "numaserve/common/text_file.h"
#include "numaserve/common/unique_fd.h"

namespace numaserve::agent::publish {
namespace {

Error os_error(const std::string& what, const std::filesystem::path& path) {
  return Error{Error::Code::kIo, what + " " + path.string() + ": " + std::strerror(errno), path.string()};
}


}  // namespace

Result<bool> write_if_changed(const std::filesystem::path& dir, const std::string& name,
                              const std::string& content) {
  const auto target = dir / name;
  if (auto current = read_text_file(target); current && *current == content) return false;

  std::string tmp_name = (dir / ("." + name + ".XXXXXX")).string();
  UniqueFd tmp{::mkstemp(tmp_name.data())};
  if (tmp.fd < 0) return tl::unexpected(os_error("cannot create a file in", dir));
  auto fail = [&](const std::string& what) {
    Error e = os_error(what, tmp_name);
    ::unlink(tmp_name.c_str());
    return tl::unexpected(e);
  };
  for (std::size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(tmp.fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("cannot write");
    done += static_cast<std::size_t>(n);
  }
  // Readers of the hints (humans, config tools) expect rw-r--r--, not mkstemp's 0600.
  if (::fchmod(tmp.fd, 0644) != 0) return fail("cannot chmod");
  if (::fsync(tmp.fd) != 0) return fail("cannot fsync");
  if (::rename(tmp_name.c_str(), target.c_str()) != 0) return fail("cannot rename to " + target.string() + ":");
  // The rename itself is durable only once the directory is synced.
  UniqueFd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY)};
  if (d.fd >= 0) ::fsync(d.fd);
  return true;
}

Result<std::vector<std::string>> write_hints(const std::filesystem::path& dir,
                                             const std::vector<HintFile>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return make_error(Error::Code::kIo, "cannot create hints directory " + dir.string() + ": " + ec.message(),
                      dir.string());
  }
  std::vector<std::string> changed;
  for (const auto& file : files) {
    auto written = write_if_changed(dir, file.name, file.content);
    if (!written) return tl::unexpected(written.error());
    if (*written) changed.push_back(file.name);
  }
  return changed;
}

Result<std::vector<std::string>> remove_hints(const std::filesystem::path& dir, const std::vector<std::string>& names) {
  std::vector<std::string> removed;
  for (const auto& name : names) {
    const auto path = dir / name;
    if (::unlink(path.c_str()) == 0) {
      removed.push_back(name);
    } else if (errno != ENOENT) {
      return tl::unexpected(os_error("cannot remove", path));
    }
  }
  if (!removed.empty()) {
    UniqueFd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY)};
    if (d.fd >= 0) ::fsync(d.fd);
  }
  return removed;
}

}  // namespace numaserve::agent::publish
