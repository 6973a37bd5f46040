#include "numaserve/common/paced_file.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace numaserve {
namespace {

constexpr std::streamsize kChunk = 1 << 20;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

CpuPacer::CpuPacer(double share) : share_(share), mark_(thread_cpu_seconds()) {}

void CpuPacer::pace() {
  if (share_ >= 1.0) return;
  const double used = thread_cpu_seconds() - mark_;
  std::this_thread::sleep_for(std::chrono::duration<double>(used * (1.0 / share_ - 1.0)));
  mark_ = thread_cpu_seconds();
}

Result<std::unique_ptr<PacedFile>> PacedFile::open(const std::filesystem::path& path, CpuPacer& pacer) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return make_error(Error::Code::kNotFound, path.string() + ": " + std::strerror(errno));
  return std::unique_ptr<PacedFile>(new PacedFile(std::move(fd), pacer));
}

std::streamsize PacedFile::xsgetn(char* out, std::streamsize n) {
  std::streamsize done = 0;
  while (done < n) {
    if (gptr() < egptr()) {
      const auto take = std::min<std::streamsize>(n - done, egptr() - gptr());
      std::memcpy(out + done, gptr(), static_cast<std::size_t>(take));
      gbump(static_cast<int>(take));
      done += take;
      continue;
    }
    // Straight into the caller's buffer: a tensor's record is read once.
    const auto want = std::min(n - done, kChunk);
    const ssize_t got = ::pread(fd_.fd, out + done, static_cast<std::size_t>(want), pos_);
    if (got <= 0) break;
    pos_ += got;
    done += got;
    pacer_.pace();
  }
  return done;
}

PacedFile::int_type PacedFile::underflow() {
  const ssize_t got = ::pread(fd_.fd, small_.data(), small_.size(), pos_);
  if (got <= 0) return traits_type::eof();
  pos_ += got;
  setg(small_.data(), small_.data(), small_.data() + got);
  return traits_type::to_int_type(small_[0]);
}

PacedFile::pos_type PacedFile::seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) {
  off_type base = pos_ - (egptr() - gptr());  // where the reader is, its buffer counted
  if (dir == std::ios_base::beg) base = 0;
  if (dir == std::ios_base::end) base = ::lseek(fd_.fd, 0, SEEK_END);
  const off_type to = base + off;
  if (base < 0 || to < 0) return pos_type(off_type(-1));
  if (to != base || dir != std::ios_base::cur) {
    setg(nullptr, nullptr, nullptr);
    pos_ = static_cast<off_t>(to);
  }
  return pos_type(to);
}

PacedFile::pos_type PacedFile::seekpos(pos_type to, std::ios_base::openmode which) {
  return seekoff(off_type(to), std::ios_base::beg, which);
}

}  // namespace numaserve
