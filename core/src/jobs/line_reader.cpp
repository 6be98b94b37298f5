// Buffered line splitting over a plain file or zlib's inflate (gzip members, checked to the
// trailer). See line_reader.hpp.
#include "jobs/line_reader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#ifdef MLPRIO_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "mlprio/jobs/trace.hpp"

namespace mlprio::detail {

namespace {
constexpr size_t INPUT_BYTES = 1 << 18;
// Bytes read (or inflated) per fill: small enough that they are still in the L2 cache when the
// lines are parsed.
constexpr size_t READ_BYTES = 1 << 17;
std::atomic<bool> g_whole_gzip{true};
std::atomic<int64_t> g_whole_decodes{0};
}  // namespace

int64_t gzip_whole_decodes() {
  return g_whole_decodes.load();
}

bool set_gzip_whole_decode(bool on) {
  g_whole_gzip.store(on);
#ifdef MLPRIO_HAVE_LIBDEFLATE
  return true;
#else
  return false;
#endif
}

#ifdef MLPRIO_HAVE_LIBDEFLATE
namespace {
// An anonymous mapping for a decoded file: no zeroing pass, and large pages where the kernel
// gives them (one fault per 2 MiB instead of per 4 KiB).
struct Mapping {
  explicit Mapping(size_t n) : size(n) {
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    p = static_cast<char*>(m);
    ::madvise(p, n, MADV_HUGEPAGE);  // advice only: ignored where unsupported
  }
  ~Mapping() {
    if (p != nullptr) ::munmap(p, size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* p = nullptr;
  size_t size;
};
}  // namespace

LineReader::Whole::~Whole() {
  if (data != nullptr) ::munmap(data, size);
}
#else
LineReader::Whole::~Whole() = default;
#endif

// Reads the whole file with pread (the stream's offset stays where zlib left it, so zlib carries
// on when this declines) and decodes it in one call. False, with nothing changed, for anything but
// a plain file holding exactly one well-formed member of at most WHOLE_GZIP_MAX_BYTES.
bool LineReader::decode_whole() {
#ifdef MLPRIO_HAVE_LIBDEFLATE
  if (!g_whole_gzip.load()) return false;
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 18) return false;
  const auto size = static_cast<size_t>(st.st_size);
  // The trailer's ISIZE: the member's length mod 2^32, a bound the decoder checks again. Deflate
  // expands at most ~1032x: a larger claim is not this file's length, and a file larger than the
  // bound cannot be one member that decodes within it.
  unsigned char t[4];
  if (::pread(fd_, t, 4, st.st_size - 4) != 4) return false;
  const size_t out_bytes =
      size_t{t[0]} | size_t{t[1]} << 8 | size_t{t[2]} << 16 | size_t{t[3]} << 24;
  if (out_bytes == 0 || out_bytes > WHOLE_GZIP_MAX_BYTES || out_bytes / 1032 > size ||
      size > WHOLE_GZIP_MAX_BYTES + (WHOLE_GZIP_MAX_BYTES >> 6))
    return false;
  // Read, not mapped: a file cut short while it is read is then a short read (zlib reports it),
  // never a SIGBUS.
  Mapping in(size);
  if (in.p == nullptr) return false;
  for (size_t got = 0; got < size;) {
    const ssize_t n = ::pread(fd_, in.p + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  Mapping out(out_bytes);
  libdeflate_decompressor* d = out.p != nullptr ? libdeflate_alloc_decompressor() : nullptr;
  if (d == nullptr) return false;
  size_t in_used = 0, out_used = 0;
  const libdeflate_result rc =
      libdeflate_gzip_decompress_ex(d, in.p, size, out.p, out_bytes, &in_used, &out_used);
  libdeflate_free_decompressor(d);
  // Exactly one member, filling the buffer (CRC-32 and ISIZE checked by the decoder).
  if (rc != LIBDEFLATE_SUCCESS || in_used != size || out_used != out_bytes) return false;
  whole_.data = std::exchange(out.p, nullptr);
  whole_.size = out_bytes;
  compressed_read_ = size;
  g_whole_decodes.fetch_add(1);
  return true;
#else
  return false;
#endif
}

LineReader::LineReader(const std::string& path)
    : path_(path), buf_(LINE_PAD_BEFORE + MAX_LINE_BYTES + LINE_PAD_AFTER) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(path, std::string("cannot open: ") + std::strerror(errno));
  in_.resize(INPUT_BYTES);
  // Gzip or plain, from the first two bytes. They stay in in_ for whichever path reads on.
  zs_.next_in = in_.data();
  zs_.avail_in = 0;
  while (zs_.avail_in < 2) {
    const size_t n = read_raw(in_.data() + zs_.avail_in, 2 - zs_.avail_in);
    if (n == 0) break;
    zs_.avail_in += static_cast<uInt>(n);
  }
  gzip_ = zs_.avail_in == 2 && in_[0] == 0x1f && in_[1] == 0x8b;
  if (gzip_) {
    if (inflateInit2(&zs_, 15 + 16) != Z_OK) {  // 15 + 16: a gzip wrapper, CRC checked
      ::close(fd_);
      throw InputError(path, "zlib could not be initialised (out of memory?)");
    }
    zs_init_ = true;
    member_done_ = false;
  }
}

LineReader::~LineReader() {
  if (zs_init_) inflateEnd(&zs_);
  if (fd_ >= 0) ::close(fd_);
}

size_t LineReader::read_raw(unsigned char* out, size_t n) {
  if (raw_eof_) return 0;
  for (;;) {
    const ssize_t got = ::read(fd_, out, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw InputError(path_, std::string("read error after line ") + std::to_string(line_no_) +
                                  ": " + std::strerror(errno));
    if (got == 0) raw_eof_ = true;
    compressed_read_ += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }
}

void LineReader::gzip_error(const std::string& what) const {
  throw InputError(path_, "truncated or corrupt gzip: " + what + " (after line " +
                              std::to_string(line_no_) + ", " + std::to_string(compressed_read_) +
                              " compressed bytes read); the file is incomplete, nothing of it "
                              "is used (re-download it or check it with gzip -t)");
}

size_t LineReader::inflate_some(char* out, size_t n) {
  zs_.next_out = reinterpret_cast<Bytef*>(out);
  zs_.avail_out = static_cast<uInt>(n);
  while (zs_.avail_out == n) {
    if (zs_.avail_in == 0) {
      zs_.next_in = in_.data();
      zs_.avail_in = static_cast<uInt>(read_raw(in_.data(), in_.size()));
    }
    if (member_done_) {
      // Between members: the file may end here, or another member begins.
      if (zs_.avail_in == 0) return 0;
      if (zs_.avail_in < 2) {  // the next magic may straddle reads
        in_[0] = *zs_.next_in;
        zs_.next_in = in_.data();
        zs_.avail_in = static_cast<uInt>(1 + read_raw(in_.data() + 1, 1));
      }
      if (zs_.avail_in < 2 || zs_.next_in[0] != 0x1f || zs_.next_in[1] != 0x8b)
        gzip_error(std::to_string(zs_.avail_in) +
                   "+ bytes after the end of a gzip member are not another gzip member");
      if (inflateReset(&zs_) != Z_OK) gzip_error("zlib could not start the next member");
      member_done_ = false;
    }
    if (zs_.avail_in == 0) gzip_error("the file ends inside a compressed member");
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {  // the trailer's CRC-32 and length matched
      member_done_ = true;
    } else if (rc == Z_DATA_ERROR) {
      gzip_error(zs_.msg != nullptr ? zs_.msg : "invalid compressed data");
    } else if (rc == Z_MEM_ERROR) {
      throw InputError(path_, "out of memory while decompressing");
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      gzip_error("zlib error " + std::to_string(rc));
    }
  }
  return n - zs_.avail_out;
}

bool LineReader::fill() {
  if (eof_) return false;
  // Move the unfinished tail to the front, grow when one line exceeds the buffer.
  if (begin_ > 0) {
    std::memmove(lines(), lines() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  // No newline in the whole buffer: the line is longer than any trace's (binary data, or a
  // 9 MB gzip of zeros that would grow to gigabytes in memory).
  if (end_ == MAX_LINE_BYTES)
    throw InputError(LineError{path_, line_no_ + 1, "line",
                               "longer than " + std::to_string(MAX_LINE_BYTES) +
                                   " bytes (1 MiB) without a newline; is this a text trace?"});
  char* out = lines() + end_;
  const size_t room = std::min(MAX_LINE_BYTES - end_, READ_BYTES);
  size_t n = 0;
  // A gzip file is decoded whole at its second fill, when still in its first member: a reader
  // that only looks at the first lines (format and header detection) never pays for it. The
  // bytes zlib already gave are skipped.
  if (gzip_ && whole_.data == nullptr && fills_ == 1 && !member_done_ && decode_whole()) {
    whole_.at = zs_.total_out;
    inflateEnd(&zs_);
    zs_init_ = false;
  }
  ++fills_;
  if (whole_.data != nullptr) {
    n = std::min(room, whole_.size - whole_.at);
    std::memcpy(out, whole_.data + whole_.at, n);
    whole_.at += n;
  } else if (gzip_) {
    n = inflate_some(out, room);
  } else if (zs_.avail_in > 0) {  // the first bytes, read to tell the format
    n = std::min<size_t>(zs_.avail_in, room);
    std::memcpy(out, zs_.next_in, n);
    zs_.next_in += n;
    zs_.avail_in -= static_cast<uInt>(n);
  } else {
    n = read_raw(reinterpret_cast<unsigned char*>(out), room);
  }
  if (n == 0) eof_ = true;
  end_ += n;
  return n > 0;
}

bool LineReader::next(std::string_view& line) {
  for (;;) {
    const char* start = lines() + begin_;
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
      const char* s = lines() + begin_;
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
