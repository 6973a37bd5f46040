#include "http/chunk_line.h"

#include <algorithm>

namespace numaserve::http {
namespace {

// RFC 9110 §5.6.2 tchar.
bool is_token_char(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// RFC 9110 §5.6.4: qdtext, and what may follow a backslash.
bool is_qdtext(unsigned char c) {
  return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e) || c >= 0x80;
}
bool is_quotable(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

ChunkLine malformed(std::string reason) {
  ChunkLine out;
  out.state = ChunkLine::State::kMalformed;
  out.reason = std::move(reason);
  return out;
}

// RFC 9112 §7.1.1, the line without its CRLF:
//   chunk-size [ chunk-ext ], chunk-size = 1*HEXDIG,
//   chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ),
//   chunk-ext-val = token / quoted-string.
// Empty on success, else what is wrong.
std::string check_line(std::string_view line, std::uint64_t& size) {
  std::size_t i = 0;
  size = 0;
  for (; i < line.size() && hex_value(static_cast<unsigned char>(line[i])) >= 0; ++i) {
    if (size >> 60) return "chunk size over 64 bits";
    size = size << 4 | static_cast<std::uint64_t>(hex_value(static_cast<unsigned char>(line[i])));
  }
  if (i == 0) return "chunk size is not hexadecimal";
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(line[k]); };
  auto skip_whitespace = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  };
  auto token = [&] {
    const std::size_t from = i;
    while (i < line.size() && is_token_char(at(i))) ++i;
    return i > from;
  };
  while (true) {
    skip_whitespace();
    if (i == line.size()) return {};
    if (line[i] != ';') return "unexpected byte in the chunk-size line";
    ++i;
    skip_whitespace();
    if (!token()) return "chunk extension without a name";
    skip_whitespace();
    if (i == line.size() || line[i] != '=') continue;
    ++i;
    skip_whitespace();
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i == line.size()) return "unterminated quoted chunk extension";
        if (line[i] == '"') break;
        if (line[i] == '\\') {
          if (++i == line.size() || !is_quotable(at(i))) return "bad escape in a chunk extension";
        } else if (!is_qdtext(at(i))) {
          return "control byte in a chunk extension";
        }
      }
      ++i;
    } else if (!token()) {
      return "chunk extension without a value";
    }
  }
}

}  // namespace

ChunkLine scan_chunk_line(std::string_view bytes, bool after_data, std::size_t max_bytes) {
  std::size_t start = 0;
  if (after_data) {
    if (bytes.size() < 2) return {};
    if (bytes.substr(0, 2) != "\r\n") return malformed("chunk data longer than its size (no CRLF after it)");
    start = 2;
  }
  // The CRLF must end within max_bytes of the line's start, so whether a
  // line is too long does not depend on how much of it has arrived.
  const std::string_view window = bytes.substr(start, max_bytes);
  const std::size_t eol = window.find("\r\n");
  if (eol == std::string_view::npos) {
    if (window.size() < max_bytes) return {};
    return malformed("chunk-size line longer than " + std::to_string(max_bytes) + " bytes");
  }
  ChunkLine out;
  if (auto wrong = check_line(window.substr(0, eol), out.size); !wrong.empty()) return malformed(wrong);
  if (out.size > 0) {
    out.state = ChunkLine::State::kReady;
    out.length = start + eol + 2;
    return out;
  }
  // The last chunk: trailer fields, then a blank line — "\r\n\r\n" counted
  // from the line's own CRLF, within the same cap.
  const std::size_t end = window.find("\r\n\r\n", eol);
  if (end == std::string_view::npos) {
    if (window.size() < max_bytes) return {};
    out.state = ChunkLine::State::kTrailersTooLarge;
    return out;
  }
  out.state = ChunkLine::State::kReady;
  out.length = start + end + 4;
  return out;
}

}  // namespace numaserve::http
