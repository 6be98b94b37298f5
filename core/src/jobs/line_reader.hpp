// Streams the lines of a plain or gzip file with one fixed 1 MiB buffer and no per-line
// allocation: each line is a string_view valid until the next call. Gzip is told from the bytes
// (the magic 1f 8b), not the name; its members are inflated with zlib and each must end properly
// (end of deflate stream, CRC-32 and length trailer checked), so a truncated or corrupt file is an
// InputError, never a silently shorter trace. Concatenated members (`cat a.gz b.gz`) read as one.
// Where libdeflate was built in, a one-member gzip file of at most WHOLE_GZIP_MAX_BYTES
// (decompressed, from its trailer) is decoded whole by it once the first block of lines has been
// read, about twice zlib's speed; any file it does not take (several members, a bad trailer,
// corrupt data) is read on by zlib as above, which also gives the error.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlprio::detail {

// The longest line accepted, terminator included (the read buffer's size). A longer one is an
// InputError naming file and line, in strict mode or not: the buffer never grows.
inline constexpr size_t MAX_LINE_BYTES = size_t{1} << 20;

// Readable bytes after every line next() returns, for readers that load whole vectors (the SWF
// reader's AVX-512 scan reads 128 bytes from a line's start): at least LINE_PAD_AFTER bytes
// past its last one lie inside the buffer. What they hold is unspecified (the next lines, stale
// data, zeros), so such a reader must still stop at the line's end.
inline constexpr size_t LINE_PAD_AFTER = 128;
// Readable bytes before every line next() returns (the SWF reader's AVX2 scan reads the 8-byte
// words that end at a line's fields, the first of which may start before the line): they hold
// an earlier line's bytes or zeros, so such a reader must mask them off.
inline constexpr size_t LINE_PAD_BEFORE = 16;

// The largest gzip file (decompressed) decoded whole; larger ones stream through zlib, so memory
// stays bounded by this much beside the queue.
inline constexpr size_t WHOLE_GZIP_MAX_BYTES = size_t{128} << 20;

// For tests: false makes every gzip file stream through zlib. Returns whether the whole-file
// decoder was built in.
bool set_gzip_whole_decode(bool on);
int64_t gzip_whole_decodes();  // files decoded whole so far, by every reader (for tests)

class LineReader {
 public:
  explicit LineReader(const std::string& path);  // throws InputError when it cannot open
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Next line without its terminator ("\n" or "\r\n"); false at end of input. Throws InputError
  // on a read error, a truncated or corrupt gzip stream, or a line over MAX_LINE_BYTES.
  bool next(std::string_view& line);
  int64_t line_number() const { return line_no_; }
  // For readers that split lines themselves (the SWF reader's vector path): the bytes read but
  // not yet returned (LINE_PAD_AFTER readable bytes follow them), and taking the next `n` of
  // them, the line's terminating '\n' included, as one line.
  std::string_view unread() const { return {lines() + begin_, end_ - begin_}; }
  void take_line(size_t n) {
    begin_ += n;
    ++line_no_;
  }
  const std::string& path() const { return path_; }

 private:
  bool fill();
  size_t read_raw(unsigned char* out, size_t n);  // from the file; 0 at its end
  size_t inflate_some(char* out, size_t n);       // gzip: decompressed bytes; 0 at the end
  [[noreturn]] void gzip_error(const std::string& what) const;
  bool decode_whole();  // gzip: the whole file into whole_, when libdeflate takes it

  std::string path_;
  int fd_ = -1;
  bool gzip_ = false;
  z_stream zs_{};
  bool zs_init_ = false;
  bool member_done_ = true;  // between gzip members (or before the first)
  bool raw_eof_ = false;
  std::vector<unsigned char> in_;  // compressed input (gzip), or the first bytes of a plain file
  uint64_t compressed_read_ = 0;
  struct Whole {  // a gzip file decoded whole (then no zlib stream), served from `at`
    ~Whole();
    char* data = nullptr;  // an anonymous mapping of `size` bytes
    size_t size = 0, at = 0;
  } whole_;
  int64_t fills_ = 0;
  // LINE_PAD_BEFORE bytes never filled, MAX_LINE_BYTES of lines, LINE_PAD_AFTER never filled.
  std::vector<char> buf_;
  char* lines() { return buf_.data() + LINE_PAD_BEFORE; }
  const char* lines() const { return buf_.data() + LINE_PAD_BEFORE; }
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_no_ = 0;
};

}  // namespace mlprio::detail
