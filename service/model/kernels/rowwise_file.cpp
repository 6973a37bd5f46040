// Rowwise tables shipped in a model directory: the file's header, its rows'
// checks, reading and writing (rowwise_file.h).
#include "kernels/rowwise_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "kernels/kernels.h"

namespace numaserve::kernels {
namespace {

constexpr std::string_view kMagic = "NUMAROWS";
constexpr std::uint32_t kVersion = 1;
// Wider rows than any embedding; bounds the header's product before the size check.
constexpr std::uint64_t kMaxDim = 1u << 20;

std::uint64_t little(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

void put_little(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

tl::unexpected<Error> os_error(const std::string& path, const std::string& what) {
  return make_error(Error::Code::kIo, path + ": " + what + ": " + std::strerror(errno));
}

// Reads exactly `bytes` at `offset`, through short reads and EINTR.
Status read_at(int fd, std::uint8_t* out, std::size_t bytes, std::uint64_t offset, const std::string& path) {
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, out, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return os_error(path, "read");
    if (got == 0) return make_error(Error::Code::kInvalidArgument, path + ": ends early (the file changed while read?)", path);
    out += got;
    bytes -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return {};
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::int64_t RowwiseFile::row_bytes() const { return rowwise_row_bytes(dim, bits); }

Result<RowwiseFile> parse_rowwise_header(const std::uint8_t* header, std::size_t size, std::uint64_t file_bytes,
                                         const std::string& path) {
  auto bad = [&path](const std::string& why) { return make_error(Error::Code::kInvalidArgument, path + ": " + why, path); };
  if (size < kRowwiseFileHeader || file_bytes < kRowwiseFileHeader) {
    return bad("shorter than the 32-byte header of a rowwise table file");
  }
  if (std::string_view(reinterpret_cast<const char*>(header), kMagic.size()) != kMagic) {
    return bad("not a rowwise table file (it does not start with NUMAROWS)");
  }
  const std::uint64_t version = little(header + 8, 4), bits = little(header + 12, 4);
  const std::uint64_t rows = little(header + 16, 8), dim = little(header + 24, 8);
  if (version != kVersion) return bad("format version " + std::to_string(version) + ", this build reads version 1");
  if (bits != 8 && bits != 4) return bad(std::to_string(bits) + "-bit codes, want 8 or 4");
  if (rows == 0 || dim == 0 || dim > kMaxDim) {
    return bad(std::to_string(rows) + " rows of dim " + std::to_string(dim) + ", want rows >= 1 and 1 <= dim <= " +
               std::to_string(kMaxDim));
  }
  if (bits == 4 && dim % 2 != 0) return bad("int4 rows of odd dim " + std::to_string(dim) + " (int4 packs two codes a byte)");
  RowwiseFile file{static_cast<int>(bits), 0, static_cast<std::int64_t>(dim)};
  const auto row_bytes = static_cast<std::uint64_t>(file.row_bytes());
  const std::uint64_t body = file_bytes - kRowwiseFileHeader;
  if (rows > body / row_bytes || body != rows * row_bytes) {
    return bad(std::to_string(file_bytes) + " bytes, want the header and " + std::to_string(rows) + " rows of " +
               std::to_string(row_bytes) + " bytes (" + std::to_string(bits) + "-bit codes of dim " + std::to_string(dim) +
               ", then the fp16 scale and bias)");
  }
  file.rows = static_cast<std::int64_t>(rows);
  return file;
}

std::int64_t first_bad_rowwise_row(const std::uint8_t* rows, const RowwiseFile& file) {
  const std::int64_t row_bytes = file.row_bytes(), tail = row_bytes - kRowwiseTail;
  for (std::int64_t r = 0; r < file.rows; ++r) {
    const std::uint8_t* t = rows + r * row_bytes + tail;
    const auto scale = static_cast<std::uint16_t>(t[0] | t[1] << 8), bias = static_cast<std::uint16_t>(t[2] | t[3] << 8);
    // An exponent of all ones is an infinity or a NaN.
    if ((scale & 0x7C00u) == 0x7C00u || (bias & 0x7C00u) == 0x7C00u || (scale & 0x8000u) != 0) return r;
  }
  return -1;
}

Result<RowwiseFile> open_rowwise_file(const std::string& path) {
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) {
    if (errno == ENOENT) return make_error(Error::Code::kNotFound, path + ": no such file", path);
    return os_error(path, "open");
  }
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) return os_error(path, "stat");
  if (!S_ISREG(st.st_mode)) return make_error(Error::Code::kInvalidArgument, path + ": not a regular file", path);
  std::array<std::uint8_t, kRowwiseFileHeader> header{};
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size >= header.size()) {
    if (auto s = read_at(in.fd, header.data(), header.size(), 0, path); !s) return tl::unexpected(s.error());
  }
  return parse_rowwise_header(header.data(), size >= header.size() ? header.size() : 0, size, path);
}

Status read_rowwise_rows(const std::string& path, const RowwiseFile& file, std::uint8_t* out) {
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return os_error(path, "open");
  // A large table in slices: the kernel's readahead, and no read past 2 GiB at once.
  constexpr std::size_t kSlice = std::size_t{64} << 20;
  const auto total = static_cast<std::uint64_t>(file.rows) * static_cast<std::uint64_t>(file.row_bytes());
  for (std::uint64_t done = 0; done < total;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kSlice, total - done));
    if (auto s = read_at(in.fd, out + done, n, kRowwiseFileHeader + done, path); !s) return s;
    done += n;
  }
  if (const std::int64_t bad = first_bad_rowwise_row(out, file); bad >= 0) {
    return make_error(Error::Code::kInvalidArgument,
                      path + ": row " + std::to_string(bad) + "'s scale or bias is not a finite fp16, or its scale is negative",
                      path);
  }
  return {};
}

Status write_rowwise_file(const std::string& path, const RowwiseFile& file, const std::uint8_t* rows) {
  std::array<std::uint8_t, kRowwiseFileHeader> header{};
  std::memcpy(header.data(), kMagic.data(), kMagic.size());
  put_little(header.data() + 8, kVersion, 4);
  put_little(header.data() + 12, static_cast<std::uint64_t>(file.bits), 4);
  put_little(header.data() + 16, static_cast<std::uint64_t>(file.rows), 8);
  put_little(header.data() + 24, static_cast<std::uint64_t>(file.dim), 8);
  const std::string part = path + ".part";
  Fd out{::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (out.fd < 0) return os_error(part, "create");
  auto write_all = [&](const std::uint8_t* p, std::uint64_t bytes) -> Status {
    while (bytes > 0) {
      const ssize_t put = ::write(out.fd, p, static_cast<std::size_t>(std::min<std::uint64_t>(bytes, std::uint64_t{1} << 30)));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) return os_error(part, "write");
      p += put;
      bytes -= static_cast<std::uint64_t>(put);
    }
    return {};
  };
  if (auto s = write_all(header.data(), header.size()); !s) return s;
  if (auto s = write_all(rows, static_cast<std::uint64_t>(file.rows) * static_cast<std::uint64_t>(file.row_bytes())); !s) return s;
  if (::fsync(out.fd) != 0) return os_error(part, "fsync");
  if (::rename(part.c_str(), path.c_str()) != 0) return os_error(path, "rename");
  return {};
}

}  // namespace numaserve::kernels
