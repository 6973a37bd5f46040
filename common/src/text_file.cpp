#include "numaserve/common/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace numaserve {

Result<std::string> read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return make_error(err == ENOENT ? Error::Code::kNotFound : Error::Code::kIo,
                      "cannot read " + path.string() + ": " + std::strerror(err), path.string());
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    return make_error(Error::Code::kIo, "error while reading " + path.string(), path.string());
  }
  return buffer.str();
}

std::filesystem::path under_root(const std::filesystem::path& root,
                                 const std::filesystem::path& path) {
  if (root.empty() || root == "/") return path;
  return root / path.relative_path();
}

}  // namespace numaserve
