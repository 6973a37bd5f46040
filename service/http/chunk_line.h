#pragma once
// A chunked body's framing line, checked whole before Beast sees it.
//
// Beast's chunk-header parser is not cut-invariant: it parses a chunk
// extension up to the end of the bytes it was given, not the end of the
// line, so a quoted string reads across the line's CRLF; when those bytes
// run out it answers need_more — after it has already taken the chunk's
// size off the body limit, again at every retry. The same bytes were then a
// 400 when they came together and a 413 when they came in pieces
// (fuzz_http_framing). The transport therefore waits for a whole line (the
// last chunk: its trailers and blank line too), checks it against RFC 9112's
// grammar and only then hands Beast the bytes, which it then parses in one
// call. Pure: no Beast, no socket.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace numaserve::http {

struct ChunkLine {
  enum class State {
    kNeedMore,          // the line (or the last chunk's trailers) is not all here yet
    kReady,             // length bytes frame one chunk header (size > 0) or the end of the body (size 0)
    kMalformed,         // 400: reason says what
    kTrailersTooLarge,  // 431: the last chunk's line and trailers pass the limit
  };
  State state = State::kNeedMore;
  std::uint64_t size = 0;   // the chunk's size (kReady)
  std::size_t length = 0;   // bytes from the start of `bytes` through the line's CRLF, or the trailers' blank line
  std::string reason;       // kMalformed
};

// `bytes` starts where the next chunk-size line is due: after the CRLF that
// ends the previous chunk's data when `after_data`, which is then checked
// too. `max_bytes` caps the line (and the last chunk's trailers): beyond it,
// a line is malformed and trailers are too large, whatever the cuts.
ChunkLine scan_chunk_line(std::string_view bytes, bool after_data, std::size_t max_bytes);

}  // namespace numaserve::http
