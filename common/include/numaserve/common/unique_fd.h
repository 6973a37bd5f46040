#pragma once
// A file descriptor closed when its holder goes: -1 holds nothing.

#include <unistd.h>

#include <utility>

namespace numaserve {

struct UniqueFd {
  int fd = -1;

  explicit UniqueFd(int descriptor) : fd(descriptor) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  // Movable, so an owner of descriptors can be returned in a Result.
  UniqueFd(UniqueFd&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      if (fd >= 0) ::close(fd);
      fd = std::exchange(other.fd, -1);
    }
    return *this;
  }
  ~UniqueFd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace numaserve
