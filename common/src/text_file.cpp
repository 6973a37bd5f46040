#include "numaserve/common/text_file.h"

#include <algorithm>
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

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::filesystem::path under_root(const std::filesystem::path& root,
                                 const std::filesystem::path& path) {
  if (root.empty() || root == "/") return path;
  return root / path.relative_path();
}

}  // namespace numaserve
