#pragma once
// Work done at a bounded share of one CPU: what a model reload runs under,
// so that a load beside serving workers takes a bounded part of their CPU
// (and of the caches and memory they share) however big the model.
//
// CpuPacer::pace() sleeps for the calling thread's CPU time since its last
// pause times (1/share - 1): a thread that spent 1 ms of CPU at share 0.25
// sleeps 3 ms. The CPU counted is the thread's own (CLOCK_THREAD_CPUTIME_ID),
// page faults included, so time lost to other threads does not count.
// PacedFile reads a file as a std::streambuf a MiB at a time (pread, so
// seeks cost nothing) and paces after each MiB: what the file's reader does
// between reads (torch::jit::load parsing the model) is paced with it.

#include <array>
#include <filesystem>
#include <memory>
#include <streambuf>

#include "numaserve/common/result.h"
#include "numaserve/common/unique_fd.h"

namespace numaserve {

class CpuPacer {
 public:
  explicit CpuPacer(double share);  // share in (0, 1]; 1 never sleeps
  void pace();

 private:
  const double share_;
  double mark_;  // the thread's CPU seconds at the last pause
};

class PacedFile final : public std::streambuf {
 public:
  // `pacer` outlives the file, and is the reading thread's.
  static Result<std::unique_ptr<PacedFile>> open(const std::filesystem::path& path, CpuPacer& pacer);

 protected:
  std::streamsize xsgetn(char* out, std::streamsize n) override;
  int_type underflow() override;
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) override;
  pos_type seekpos(pos_type to, std::ios_base::openmode which) override;

 private:
  PacedFile(UniqueFd fd, CpuPacer& pacer) : fd_(std::move(fd)), pacer_(pacer) {}

  UniqueFd fd_;
  CpuPacer& pacer_;
  off_t pos_ = 0;  // the file offset the next read starts at
  std::array<char, 1 << 16> small_{};  // for reads of a few bytes (the zip's headers)
};

}  // namespace numaserve
