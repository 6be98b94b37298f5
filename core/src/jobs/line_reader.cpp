// Buffered line splitting over zlib's transparent reader (plain or gzip input).
#include "jobs/line_reader.hpp"

#include <cerrno>
#include <cstring>

#include "mlprio/jobs/trace.hpp"

namespace mlprio::detail {

namespace {
constexpr size_t BUFFER_BYTES = 1 << 20;
}

LineReader::LineReader(const std::string& path) : path_(path), buf_(BUFFER_BYTES) {
  gz_ = gzopen(path.c_str(), "rb");
  if (gz_ == nullptr)
    throw InputError(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "zlib error"));
  gzbuffer(gz_, 1 << 18);
}

LineReader::~LineReader() {
  if (gz_ != nullptr) gzclose(gz_);
}

bool LineReader::fill() {
  if (eof_) return false;
  // Move the unfinished tail to the front, grow when one line exceeds the buffer.
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
  const int n = gzread(gz_, buf_.data() + end_, static_cast<unsigned>(buf_.size() - end_));
  if (n < 0) {
    int err = 0;
    const char* msg = gzerror(gz_, &err);
    throw InputError(path_, std::string("read error after line ") + std::to_string(line_no_) +
                                ": " + (msg ? msg : "unknown zlib error") +
                                " (truncated or corrupt gzip?)");
  }
  if (n == 0) eof_ = true;
  end_ += static_cast<size_t>(n);
  return n > 0;
}

bool LineReader::next(std::string_view& line) {
  for (;;) {
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    if (nl != nullptr) {
      const char* stop = static_cast<const char*>(nl);
      size_t len = static_cast<size_t>(stop - start);
      begin_ += len + 1;
      if (len > 0 && start[len - 1] == '\r') --len;
      line = std::string_view(start, len);
      ++line_no_;
      return true;
    }
    if (!fill()) {
      if (begin_ == end_) return false;
      // Last line without a newline.
      const char* s = buf_.data() + begin_;
      size_t len = end_ - begin_;
      begin_ = end_;
      if (len > 0 && s[len - 1] == '\r') --len;
      line = std::string_view(s, len);
      ++line_no_;
      return true;
    }
  }
}

}  // namespace mlprio::detail
