// A small RAII layer over the HDF5 C API: every result file mlprio writes goes through it.
//
// Files are created under a temporary name beside the target and renamed only by commit(), so a
// crash or an exception never leaves a file that looks complete; the root carries the format
// name ("mlprio"), a format version and the kind of run, which open_for_read() checks. Tables are
// compound datasets described once per struct (CompoundType<T>); columns and time series are
// chunked and deflate-compressed. All HDF5 calls go through one check macro that turns a failure
// into H5Error with the call text and file:line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mlprio/util/errors.hpp"

namespace mlprio::h5 {

inline constexpr const char* FORMAT_NAME = "mlprio";
inline constexpr int FORMAT_VERSION = 1;

class H5Error : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

using hid = int64_t;  // hid_t without pulling hdf5.h into every includer

// Owns one HDF5 identifier and closes it with the right H5*close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid id) : id_(id) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)) {}
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();
  hid id() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid id_ = -1;
};

enum class FieldType { INT8, INT32, INT64, FLOAT64, STRING };

// Describes how a struct T is laid out as an HDF5 compound type. Fields are added by member
// pointer; STRING fields are fixed-size char arrays (NUL-padded).
template <class T>
class CompoundType {
 public:
  struct Field {
    std::string name;
    size_t offset;
    FieldType type;
    size_t size;
  };
  template <class M>
  CompoundType& add(std::string name, M T::*member) {
    static_assert(std::is_standard_layout_v<T>, "HDF5 table rows must be standard-layout");
    const T probe{};
    const size_t off = static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*member)) -
                                           reinterpret_cast<const char*>(&probe));
    fields_.push_back({std::move(name), off, type_of<M>(), sizeof(M)});
    return *this;
  }
  const std::vector<Field>& fields() const { return fields_; }

 private:
  template <class M>
  static constexpr FieldType type_of() {
    if constexpr (std::is_same_v<M, double>)
      return FieldType::FLOAT64;
    else if constexpr (std::is_same_v<M, int64_t>)
      return FieldType::INT64;
    else if constexpr (std::is_same_v<M, int32_t>)
      return FieldType::INT32;
    else if constexpr (std::is_same_v<M, int8_t> || std::is_same_v<M, uint8_t> ||
                       std::is_same_v<M, bool>)
      return FieldType::INT8;
    else if constexpr (std::is_array_v<M> && std::is_same_v<std::remove_extent_t<M>, char>)
      return FieldType::STRING;
    else
      static_assert(sizeof(M) == 0, "unsupported HDF5 table field type");
  }
  std::vector<Field> fields_;
};

// Type-erased compound description used by the implementation.
struct CompoundDesc {
  size_t row_size;
  std::vector<std::tuple<std::string, size_t, FieldType, size_t>> fields;
};

template <class T>
CompoundDesc describe(const CompoundType<T>& t) {
  CompoundDesc d{sizeof(T), {}};
  for (const auto& f : t.fields()) d.fields.emplace_back(f.name, f.offset, f.type, f.size);
  return d;
}

// A 1-D chunked, compressed dataset written a block at a time: rows are appended at its end, so a
// table or column of unknown final length is written as it is made (memory: one chunk of rows
// plus what HDF5 holds). Rows are buffered and written a whole chunk at a time; flush() writes the
// rest and must be called before the file is committed (the destructor writes nothing).
class Appender {
 public:
  Appender() = default;
  template <class T>
  void append(std::span<const T> rows) {
    append_raw(rows.data(), rows.size(), sizeof(T));
  }
  void flush();
  uint64_t rows() const { return written_ + pending_rows(); }

 private:
  friend class Group;
  Appender(Handle ds, Handle type, size_t row_size, uint64_t chunk_rows)
      : ds_(std::move(ds)), type_(std::move(type)), row_size_(row_size), chunk_(chunk_rows) {}
  void append_raw(const void* rows, size_t n, size_t row_size);
  void write_rows(const unsigned char* rows, uint64_t n);
  uint64_t pending_rows() const { return row_size_ == 0 ? 0 : pending_.size() / row_size_; }
  Handle ds_, type_;
  size_t row_size_ = 0;
  uint64_t chunk_ = 0, written_ = 0;
  std::vector<unsigned char> pending_;
};

// A group (the file root is a group too).
class Group {
 public:
  Group() = default;
  explicit Group(Handle h) : h_(std::move(h)) {}
  hid id() const { return h_.id(); }

  Group create_group(const std::string& name) const;
  Group open_group(const std::string& name) const;
  bool exists(const std::string& name) const;
  std::vector<std::string> children() const;

  void set_attr(const std::string& name, std::string_view value) const;
  void set_attr(const std::string& name, int64_t value) const;
  void set_attr(const std::string& name, double value) const;
  bool has_attr(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;

  // A 1-D chunked, compressed dataset (column of a time series or a per-job vector).
  void write_column(const std::string& name, std::span<const double> values) const;
  void write_column(const std::string& name, std::span<const int64_t> values) const;
  std::vector<double> read_column_double(const std::string& name) const;
  std::vector<int64_t> read_column_int(const std::string& name) const;

  // A chunked, compressed table of structs.
  template <class T>
  void write_table(const std::string& name, const CompoundType<T>& type,
                   std::span<const T> rows) const {
    write_table_raw(name, describe(type), rows.data(), rows.size());
  }
  template <class T>
  std::vector<T> read_table(const std::string& name, const CompoundType<T>& type) const {
    std::vector<T> rows(table_rows(name));
    read_table_raw(name, describe(type), rows.data(), rows.size());
    return rows;
  }
  size_t table_rows(const std::string& name) const;

  // The same datasets, created empty and filled by Appender::append (same types and filters; the
  // chunk is always the full chunk size).
  template <class T>
  Appender append_table(const std::string& name, const CompoundType<T>& type) const {
    return append_table_raw(name, describe(type));
  }
  Appender append_column(const std::string& name, FieldType type) const;

 private:
  Appender append_table_raw(const std::string& name, const CompoundDesc& d) const;
  void write_table_raw(const std::string& name, const CompoundDesc& d, const void* data,
                       size_t n) const;
  void read_table_raw(const std::string& name, const CompoundDesc& d, void* data, size_t n) const;
  Handle h_;
};

// Provenance every result file carries at its root.
struct Provenance {
  std::string kind;          // "replay", "sweep", "fsdp", "model-eval", ...
  std::string command_line;  // argv joined
  std::string config;        // configuration as text (JSON or key=value)
  std::string input_sha256;  // checksum of the main input, "" when generated
};

// A file being written. It is built in memory; "<path>.tmp.<pid>" is created at once and
// commit() writes the finished image there, fsyncs it and renames it to <path>. A write that
// fails (disk full, EFBIG) throws H5Error naming <path> and leaves neither name behind;
// destroying an uncommitted WriteFile removes the temporary file. Memory: the file's size, twice
// during commit().
class WriteFile {
 public:
  WriteFile(const std::string& path, const Provenance& prov);
  WriteFile(WriteFile&& o) noexcept;
  WriteFile& operator=(WriteFile&&) = delete;
  ~WriteFile();
  Group& root() { return root_; }
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  void create_in_memory(const Provenance& prov);
  void discard() noexcept;
  std::string path_, tmp_;
  Handle file_;
  Group root_;
  int fd_ = -1;  // the temporary file, open until commit() or discard()
  bool committed_ = false;
};

// Opens a finished file read-only and checks format name, version and (unless empty) kind.
class ReadFile {
 public:
  explicit ReadFile(const std::string& path, std::string_view expected_kind = {});
  Group& root() { return root_; }

 private:
  Handle file_;
  Group root_;
};

// Version of this build (from CMake) and git commit it was built from ("unknown" outside git).
std::string tool_version();
std::string git_commit();

}  // namespace mlprio::h5
