// The HDF5 RAII layer (see mlprio/io/hdf5.hpp). Every C API call goes through H5_CHECK, which
// turns a negative return into H5Error carrying the call text, file:line and the innermost
// message of HDF5's error stack; HDF5's own printing to stderr is switched off.
#include "mlprio/io/hdf5.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#ifdef MLPRIO_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

static_assert(sizeof(hid_t) == sizeof(mlprio::h5::hid), "hid_t must be 64-bit (HDF5 >= 1.10)");

namespace mlprio::h5 {
namespace {

herr_t innermost(unsigned n, const H5E_error2_t* err, void* data) {
  if (n == 0 && err->desc) *static_cast<std::string*>(data) = err->desc;
  return 0;
}

[[noreturn]] void fail(const char* call, const char* file, int line) {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, innermost, &detail);
  H5Eclear2(H5E_DEFAULT);
  std::string msg =
      std::string("HDF5 call failed: ") + call + " at " + file + ":" + std::to_string(line);
  if (!detail.empty()) msg += " (" + detail + ")";
  throw H5Error(msg);
}

struct QuietErrors {
  QuietErrors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
void quiet() {
  static QuietErrors q;
}

constexpr hsize_t CHUNK_ROWS = 16384;
constexpr int DEFLATE_LEVEL = 4;
constexpr size_t CORE_INCREMENT = size_t{1} << 20;  // the in-memory file grows 1 MiB at a time

}  // namespace

#define H5_CHECK(call)                           \
  ([&]() {                                       \
    auto _r = (call);                            \
    if (_r < 0) fail(#call, __FILE__, __LINE__); \
    return _r;                                   \
  }())

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    Handle tmp(std::move(*this));
    id_ = std::exchange(o.id_, -1);
  }
  return *this;
}

Handle::~Handle() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE:
      H5Fclose(id_);
      break;
    case H5I_GROUP:
      H5Gclose(id_);
      break;
    case H5I_DATASET:
      H5Dclose(id_);
      break;
    case H5I_DATASPACE:
      H5Sclose(id_);
      break;
    case H5I_DATATYPE:
      H5Tclose(id_);
      break;
    case H5I_ATTR:
      H5Aclose(id_);
      break;
    case H5I_GENPROP_LST:
      H5Pclose(id_);
      break;
    default:
      break;
  }
}

namespace {

Handle string_type() {
  Handle t(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(t.id(), H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(t.id(), H5T_CSET_UTF8));
  return t;
}

Handle compound_type(const CompoundDesc& d) {
  Handle t(H5_CHECK(H5Tcreate(H5T_COMPOUND, d.row_size)));
  for (const auto& field : d.fields) {
    // Plain references, not structured bindings: H5_CHECK's lambda captures them, which clang
    // before 16 refuses for bindings.
    const std::string& name = std::get<0>(field);
    const size_t offset = std::get<1>(field);
    const FieldType type = std::get<2>(field);
    const size_t size = std::get<3>(field);
    Handle owned;
    hid_t ft = -1;
    switch (type) {
      case FieldType::INT8:
        ft = H5T_NATIVE_INT8;
        break;
      case FieldType::INT32:
        ft = H5T_NATIVE_INT32;
        break;
      case FieldType::INT64:
        ft = H5T_NATIVE_INT64;
        break;
      case FieldType::FLOAT64:
        ft = H5T_NATIVE_DOUBLE;
        break;
      case FieldType::STRING:
        owned = Handle(H5_CHECK(H5Tcopy(H5T_C_S1)));
        H5_CHECK(H5Tset_size(owned.id(), size));
        H5_CHECK(H5Tset_strpad(owned.id(), H5T_STR_NULLTERM));
        ft = owned.id();
        break;
    }
    H5_CHECK(H5Tinsert(t.id(), name.c_str(), offset, ft));
  }
  return t;
}

// A chunked, shuffled, deflated 1-D dataset creation property list.
Handle chunked_plist(hsize_t n) {
  Handle p(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  const hsize_t chunk = n == 0 ? 1 : std::min<hsize_t>(n, CHUNK_ROWS);
  H5_CHECK(H5Pset_chunk(p.id(), 1, &chunk));
  H5_CHECK(H5Pset_shuffle(p.id()));
  H5_CHECK(H5Pset_deflate(p.id(), DEFLATE_LEVEL));
  return p;
}

// A 1-D dataset of `n` rows that can grow, chunked by chunked_plist(chunk_for).
Handle create_1d(hid_t loc, const std::string& name, hid_t type, hsize_t n, hsize_t chunk_for) {
  const hsize_t dims = n, maxdims = H5S_UNLIMITED;
  Handle space(H5_CHECK(H5Screate_simple(1, &dims, &maxdims)));
  Handle plist = chunked_plist(chunk_for);
  return Handle(H5_CHECK(
      H5Dcreate2(loc, name.c_str(), type, space.id(), H5P_DEFAULT, plist.id(), H5P_DEFAULT)));
}

#ifdef MLPRIO_HAVE_LIBDEFLATE
// What the shuffle and deflate filters of chunked_plist do to a whole chunk, done here: the shuffle
// (byte k of every row together, as HDF5's filter with the row size as its element size), then a
// zlib stream from libdeflate, about twice as fast as zlib at the same level. HDF5 reads it back
// through its own filters as any other chunk.
struct ChunkCompressor {
  ChunkCompressor() : c(libdeflate_alloc_compressor(DEFLATE_LEVEL)) {}
  ~ChunkCompressor() { libdeflate_free_compressor(c); }
  ChunkCompressor(const ChunkCompressor&) = delete;
  ChunkCompressor& operator=(const ChunkCompressor&) = delete;
  libdeflate_compressor* c;
  std::vector<unsigned char> shuffled, packed;
};

void shuffle_rows(const unsigned char* rows, size_t n, size_t row_size, unsigned char* out) {
  for (size_t k = 0; k < row_size; ++k) {
    const unsigned char* src = rows + k;
    unsigned char* dst = out + k * n;
    for (size_t i = 0; i < n; ++i) dst[i] = src[i * row_size];
  }
}
#endif

// Writes rows [start, start + n) of a 1-D dataset made by create_1d with `chunk`-row chunks (its
// extent already covers them). Whole chunks starting on a chunk boundary are filtered here and
// stored with H5Dwrite_chunk where libdeflate was built in; the rest goes through H5Dwrite and
// HDF5's filters.
void write_range(hid_t ds, hid_t type, size_t row_size, hsize_t chunk, hsize_t start,
                 const unsigned char* rows, hsize_t n) {
  hsize_t done = 0;
#ifndef MLPRIO_HAVE_LIBDEFLATE
  (void)chunk;
#else
  thread_local ChunkCompressor cc;
  if (cc.c != nullptr && chunk > 0 && start % chunk == 0 && n >= chunk) {
    const size_t bytes = static_cast<size_t>(chunk) * row_size;
    cc.shuffled.resize(bytes);
    cc.packed.resize(libdeflate_zlib_compress_bound(cc.c, bytes));
    for (; n - done >= chunk; done += chunk) {
      shuffle_rows(rows + done * row_size, static_cast<size_t>(chunk), row_size,
                   cc.shuffled.data());
      const size_t size = libdeflate_zlib_compress(cc.c, cc.shuffled.data(), bytes,
                                                   cc.packed.data(), cc.packed.size());
      if (size == 0) break;  // cannot happen within the bound; HDF5's filters take the rest
      const hsize_t offset = start + done;
      H5_CHECK(H5Dwrite_chunk(ds, H5P_DEFAULT, 0, &offset, size, cc.packed.data()));
    }
  }
#endif
  if (done == n) return;
  const hsize_t first = start + done, count = n - done;
  Handle file_space(H5_CHECK(H5Dget_space(ds)));
  H5_CHECK(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, &first, nullptr, &count, nullptr));
  Handle mem_space(H5_CHECK(H5Screate_simple(1, &count, nullptr)));
  H5_CHECK(
      H5Dwrite(ds, type, mem_space.id(), file_space.id(), H5P_DEFAULT, rows + done * row_size));
}

void write_1d(hid_t loc, const std::string& name, hid_t type, const void* data, size_t n) {
  Handle ds = create_1d(loc, name, type, n, n);
  if (n == 0) return;
  const hsize_t chunk = std::min<hsize_t>(n, CHUNK_ROWS);  // as chunked_plist(n)
  const size_t row_size = H5Tget_size(type);
  if (row_size == 0) fail("H5Tget_size(type)", __FILE__, __LINE__);
  write_range(ds.id(), type, row_size, chunk, 0, static_cast<const unsigned char*>(data), n);
}

// An owned copy of a native numeric type, for an Appender to keep.
Handle native_type(FieldType type) {
  switch (type) {
    case FieldType::INT8:
      return Handle(H5_CHECK(H5Tcopy(H5T_NATIVE_INT8)));
    case FieldType::INT32:
      return Handle(H5_CHECK(H5Tcopy(H5T_NATIVE_INT32)));
    case FieldType::INT64:
      return Handle(H5_CHECK(H5Tcopy(H5T_NATIVE_INT64)));
    case FieldType::FLOAT64:
      return Handle(H5_CHECK(H5Tcopy(H5T_NATIVE_DOUBLE)));
    case FieldType::STRING:
      break;
  }
  throw H5Error("append_column: a column of strings is not supported");
}

size_t rows_of(hid_t loc, const std::string& name) {
  Handle ds(H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)));
  Handle space(H5_CHECK(H5Dget_space(ds.id())));
  if (H5_CHECK(H5Sget_simple_extent_ndims(space.id())) != 1)
    throw H5Error("dataset '" + name + "' is not one-dimensional");
  hsize_t dims = 0;
  H5_CHECK(H5Sget_simple_extent_dims(space.id(), &dims, nullptr));
  return static_cast<size_t>(dims);
}

template <class T>
std::vector<T> read_1d(hid_t loc, const std::string& name, hid_t type) {
  std::vector<T> out(rows_of(loc, name));
  Handle ds(H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)));
  if (!out.empty()) H5_CHECK(H5Dread(ds.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()));
  return out;
}

Handle open_or_replace_attr(hid_t loc, const std::string& name, hid_t type) {
  if (H5_CHECK(H5Aexists(loc, name.c_str())) > 0) H5_CHECK(H5Adelete(loc, name.c_str()));
  Handle space(H5_CHECK(H5Screate(H5S_SCALAR)));
  return Handle(
      H5_CHECK(H5Acreate2(loc, name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT)));
}

}  // namespace

Group Group::create_group(const std::string& name) const {
  quiet();
  return Group(
      Handle(H5_CHECK(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT))));
}

Group Group::open_group(const std::string& name) const {
  quiet();
  if (!exists(name)) throw H5Error("no group '" + name + "' in this HDF5 file");
  return Group(Handle(H5_CHECK(H5Gopen2(id(), name.c_str(), H5P_DEFAULT))));
}

bool Group::exists(const std::string& name) const {
  return H5_CHECK(H5Lexists(id(), name.c_str(), H5P_DEFAULT)) > 0;
}

std::vector<std::string> Group::children() const {
  H5G_info_t info;
  H5_CHECK(H5Gget_info(id(), &info));
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5_CHECK(
        H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(static_cast<size_t>(len), '\0');
    H5_CHECK(H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(),
                                name.size() + 1, H5P_DEFAULT));
    out.push_back(std::move(name));
  }
  return out;
}

void Group::set_attr(const std::string& name, std::string_view value) const {
  Handle t = string_type();
  Handle a = open_or_replace_attr(id(), name, t.id());
  const std::string v(value);
  const char* p = v.c_str();
  H5_CHECK(H5Awrite(a.id(), t.id(), &p));
}

void Group::set_attr(const std::string& name, int64_t value) const {
  Handle a = open_or_replace_attr(id(), name, H5T_NATIVE_INT64);
  H5_CHECK(H5Awrite(a.id(), H5T_NATIVE_INT64, &value));
}

void Group::set_attr(const std::string& name, double value) const {
  Handle a = open_or_replace_attr(id(), name, H5T_NATIVE_DOUBLE);
  H5_CHECK(H5Awrite(a.id(), H5T_NATIVE_DOUBLE, &value));
}

bool Group::has_attr(const std::string& name) const {
  return H5_CHECK(H5Aexists(id(), name.c_str())) > 0;
}

std::string Group::attr_string(const std::string& name) const {
  if (!has_attr(name)) throw H5Error("no attribute '" + name + "'");
  Handle a(H5_CHECK(H5Aopen(id(), name.c_str(), H5P_DEFAULT)));
  Handle ft(H5_CHECK(H5Aget_type(a.id())));
  if (H5Tget_class(ft.id()) != H5T_STRING)
    throw H5Error("attribute '" + name + "' is not a string");
  if (H5_CHECK(H5Tis_variable_str(ft.id())) > 0) {
    Handle t = string_type();
    char* p = nullptr;
    H5_CHECK(H5Aread(a.id(), t.id(), &p));
    std::string s = p ? p : "";
    Handle space(H5_CHECK(H5Aget_space(a.id())));
    H5Dvlen_reclaim(t.id(), space.id(), H5P_DEFAULT, &p);
    return s;
  }
  const size_t size = H5Tget_size(ft.id());
  std::string s(size, '\0');
  Handle mt(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(mt.id(), size));
  H5_CHECK(H5Aread(a.id(), mt.id(), s.data()));
  s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
  return s;
}

int64_t Group::attr_int(const std::string& name) const {
  if (!has_attr(name)) throw H5Error("no attribute '" + name + "'");
  Handle a(H5_CHECK(H5Aopen(id(), name.c_str(), H5P_DEFAULT)));
  int64_t v = 0;
  H5_CHECK(H5Aread(a.id(), H5T_NATIVE_INT64, &v));
  return v;
}

double Group::attr_double(const std::string& name) const {
  if (!has_attr(name)) throw H5Error("no attribute '" + name + "'");
  Handle a(H5_CHECK(H5Aopen(id(), name.c_str(), H5P_DEFAULT)));
  double v = 0;
  H5_CHECK(H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v));
  return v;
}

void Group::write_column(const std::string& name, std::span<const double> values) const {
  write_1d(id(), name, H5T_NATIVE_DOUBLE, values.data(), values.size());
}
void Group::write_column(const std::string& name, std::span<const int64_t> values) const {
  write_1d(id(), name, H5T_NATIVE_INT64, values.data(), values.size());
}
std::vector<double> Group::read_column_double(const std::string& name) const {
  return read_1d<double>(id(), name, H5T_NATIVE_DOUBLE);
}
std::vector<int64_t> Group::read_column_int(const std::string& name) const {
  return read_1d<int64_t>(id(), name, H5T_NATIVE_INT64);
}

size_t Group::table_rows(const std::string& name) const {
  return rows_of(id(), name);
}

void Group::write_table_raw(const std::string& name, const CompoundDesc& d, const void* data,
                            size_t n) const {
  Handle t = compound_type(d);
  write_1d(id(), name, t.id(), data, n);
}

Appender Group::append_table_raw(const std::string& name, const CompoundDesc& d) const {
  quiet();
  Handle t = compound_type(d);
  Handle ds = create_1d(id(), name, t.id(), 0, CHUNK_ROWS);
  return Appender(std::move(ds), std::move(t), d.row_size, CHUNK_ROWS);
}

Appender Group::append_column(const std::string& name, FieldType type) const {
  quiet();
  Handle t = native_type(type);
  Handle ds = create_1d(id(), name, t.id(), 0, CHUNK_ROWS);
  const size_t row_size = H5Tget_size(t.id());
  return Appender(std::move(ds), std::move(t), row_size, CHUNK_ROWS);
}

void Appender::append_raw(const void* rows, size_t n, size_t row_size) {
  if (!ds_.valid()) throw H5Error("Appender: no dataset to append to");
  if (row_size != row_size_)
    throw H5Error("Appender: rows of " + std::to_string(row_size) +
                  " bytes appended to a dataset of " + std::to_string(row_size_) + "-byte rows");
  const auto* p = static_cast<const unsigned char*>(rows);
  // Whole chunks go straight to the file when nothing is pending; the rest waits for a full chunk,
  // so every chunk is compressed once.
  if (pending_.empty() && n >= chunk_) {
    const uint64_t whole = n / chunk_ * chunk_;
    write_rows(p, whole);
    p += whole * row_size_;
    n -= whole;
  }
  pending_.insert(pending_.end(), p, p + n * row_size_);
  const uint64_t have = pending_rows();
  if (have >= chunk_) {
    const uint64_t whole = have / chunk_ * chunk_;
    write_rows(pending_.data(), whole);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(whole * row_size_));
  }
}

void Appender::flush() {
  if (!ds_.valid() || pending_.empty()) return;
  write_rows(pending_.data(), pending_rows());
  pending_.clear();
}

void Appender::write_rows(const unsigned char* rows, uint64_t n) {
  if (n == 0) return;
  const hsize_t total = written_ + n;
  H5_CHECK(H5Dset_extent(ds_.id(), &total));
  write_range(ds_.id(), type_.id(), row_size_, chunk_, written_, rows, n);
  written_ = total;
}

void Group::read_table_raw(const std::string& name, const CompoundDesc& d, void* data,
                           size_t n) const {
  if (n == 0) return;
  Handle t = compound_type(d);
  Handle ds(H5_CHECK(H5Dopen2(id(), name.c_str(), H5P_DEFAULT)));
  H5_CHECK(H5Dread(ds.id(), t.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

WriteFile::WriteFile(const std::string& path, const Provenance& prov)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  quiet();
  // The temporary name is taken now (so an unwritable folder fails before any work), but the
  // HDF5 file lives in memory (core driver, no backing store) until commit() writes its image.
  // HDF5 must never write to the disk itself: when its flush fails (disk full), H5Fclose fails
  // half-way and leaves a dangling file ID that HDF5's exit handler then dereferences (a
  // segfault at exit, HDF5 1.10). Our own write() fails cleanly instead.
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw H5Error("cannot create HDF5 file '" + tmp_ + "' (is the folder of '" + path +
                  "' there and writable?): " + std::strerror(errno));
  try {
    create_in_memory(prov);
  } catch (...) {
    discard();
    throw;
  }
}

void WriteFile::create_in_memory(const Provenance& prov) {
  Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  H5_CHECK(H5Pset_fapl_core(fapl.id(), CORE_INCREMENT, 0));
  const hid_t f = H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (f < 0) {
    H5Eclear2(H5E_DEFAULT);
    throw H5Error("cannot create HDF5 file '" + path_ + "' in memory");
  }
  file_ = Handle(f);
  root_ = Group(Handle(H5_CHECK(H5Gopen2(f, "/", H5P_DEFAULT))));
  root_.set_attr("format", std::string_view(FORMAT_NAME));
  root_.set_attr("format_version", int64_t{FORMAT_VERSION});
  root_.set_attr("kind", std::string_view(prov.kind));
  root_.set_attr("tool_version", std::string_view(tool_version()));
  root_.set_attr("git_commit", std::string_view(git_commit()));
  root_.set_attr("command_line", std::string_view(prov.command_line));
  root_.set_attr("config", std::string_view(prov.config));
  root_.set_attr("input_sha256", std::string_view(prov.input_sha256));
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  root_.set_attr("created_utc", std::string_view(when));
}

WriteFile::WriteFile(WriteFile&& o) noexcept
    : path_(std::move(o.path_)),
      tmp_(std::move(o.tmp_)),
      file_(std::move(o.file_)),
      root_(std::move(o.root_)),
      fd_(std::exchange(o.fd_, -1)),
      committed_(std::exchange(o.committed_, true)) {}

WriteFile::~WriteFile() {
  if (!committed_) discard();
}

void WriteFile::discard() noexcept {
  root_ = Group();
  file_ = Handle();  // an in-memory file: closing it cannot fail on the disk
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
  }
}

void WriteFile::commit() {
  if (committed_) return;
  // Fails with what the write failed with; nothing is left under either name.
  auto write_failed = [this](const std::string& what, int err) {
    discard();
    return H5Error("cannot write HDF5 file '" + path_ + "': " + what + ": " + std::strerror(err) +
                   (err == ENOSPC || err == EFBIG || err == EDQUOT
                        ? " (disk full or file size limit); nothing written"
                        : "; nothing written"));
  };
  H5_CHECK(H5Fflush(file_.id(), H5F_SCOPE_GLOBAL));
  const ssize_t size = H5_CHECK(H5Fget_file_image(file_.id(), nullptr, 0));
  std::vector<char> image(static_cast<size_t>(size));
  H5_CHECK(H5Fget_file_image(file_.id(), image.data(), image.size()));
  root_ = Group();
  file_ = Handle();
  size_t put = 0;
  while (put < image.size()) {
    const ssize_t n = ::write(fd_, image.data() + put, image.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw write_failed("write", n < 0 ? errno : EIO);
    put += static_cast<size_t>(n);
  }
  if (::fsync(fd_) != 0) throw write_failed("fsync", errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw write_failed("close", err);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw H5Error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(err));
  }
  committed_ = true;
}

ReadFile::ReadFile(const std::string& path, std::string_view expected_kind) {
  quiet();
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    H5Eclear2(H5E_DEFAULT);
    throw H5Error("cannot open '" + path + "' as HDF5 (missing, unreadable, or not an HDF5 file)");
  }
  file_ = Handle(f);
  root_ = Group(Handle(H5_CHECK(H5Gopen2(f, "/", H5P_DEFAULT))));
  if (!root_.has_attr("format") || root_.attr_string("format") != FORMAT_NAME)
    throw H5Error("'" + path +
                  "' is HDF5 but not an mlprio result file (no format=\"mlprio\" attribute)");
  const int64_t v = root_.attr_int("format_version");
  if (v > FORMAT_VERSION)
    throw H5Error("'" + path + "' has format version " + std::to_string(v) +
                  "; this build reads up to " + std::to_string(FORMAT_VERSION) +
                  " (upgrade mlprio)");
  if (!expected_kind.empty() && root_.attr_string("kind") != expected_kind)
    throw H5Error("'" + path + "' holds a '" + root_.attr_string("kind") + "' run, expected '" +
                  std::string(expected_kind) + "'");
}

}  // namespace mlprio::h5
