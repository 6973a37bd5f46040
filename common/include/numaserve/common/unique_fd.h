#pragma once
// A file descriptor closed when its holder goes: -1 holds nothing.

#include <unistd.h>

namespace numaserve {

struct UniqueFd {
  int fd = -1;

  explicit UniqueFd(int descriptor) : fd(descriptor) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace numaserve
