// Streams the lines of a plain or gzip file (zlib detects which from the bytes) with one large
// buffer and no per-line allocation: each line is a string_view valid until the next call.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlprio::detail {

class LineReader {
 public:
  explicit LineReader(const std::string& path);  // throws InputError when it cannot open
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Next line without its terminator ("\n" or "\r\n"); false at end of input.
  bool next(std::string_view& line);
  int64_t line_number() const { return line_no_; }
  const std::string& path() const { return path_; }

 private:
  bool fill();
  std::string path_;
  gzFile gz_ = nullptr;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_no_ = 0;
};

}  // namespace mlprio::detail
