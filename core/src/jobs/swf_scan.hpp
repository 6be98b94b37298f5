// The SWF reader's vector path: one line's fields found and its first 18 numeric fields read
// with AVX-512 (swf_scan_avx512.cpp), for lines it can take whole; the reader's byte loop
// (swf_reader.cpp) reads every other line, and on CPUs without AVX-512 all of them. Both give
// the same fields and values for every line the vector path takes (test_readers "[swf][scan]").
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlprio::detail {

struct SwfLineScan {
  // Fields 0..17 as the byte loop reads a plain field: exactly, -0 included (18..23: scratch).
  int64_t iv[24];
  double v[24];
  uint8_t start[64];  // field k: bytes [start[k], end[k]) of the line, k < min(fields, 32)
  uint8_t end[64];
  int fields;     // white-space-separated fields on the line
  bool in_range;  // every one of fields 0..17 within its SwfBounds
};

// The reader's range checks as bounds [lo[k], hi[k]] of fields 0..17 (18..23: unused), for the
// 18/19-column layout ([0]) and the 21-column one ([1]).
struct SwfBounds {
  int64_t lo[24], hi[24];
};

// Scans a line (no line terminator, no leading or trailing white space) shorter than 128 bytes
// with at least 18 fields whose first 18 are each an optional '-' and 1..15 ASCII digits: the
// lines the byte loop reads as "plain" in every numeric field. Returns false, with `out`
// unspecified, for any other line. Reads 128 bytes from `s` whatever `len` is: the line must lie
// in a buffer with that much room (LineReader's LINE_PAD_AFTER). Call only where
// swf_scan_vector_enabled().
bool swf_scan_avx512(const char* s, size_t len, const SwfBounds (&bounds)[2], SwfLineScan& out);

// The next line of a buffer, found and scanned in one pass: `s` holds `avail` bytes read from
// the file (and 128 readable bytes, as above). When a '\n' lies within its first 128 bytes and
// the line before it (white space at either end allowed: the fields are the same as trimmed)
// is one swf_scan_avx512 takes, scans it and returns its length plus one (the '\n'); else
// returns 0, `out` unspecified, and the caller reads the line the usual way (blank lines,
// comments, longer and other lines).
size_t swf_scan_avx512_next(const char* s, size_t avail, const SwfBounds (&bounds)[2],
                            SwfLineScan& out);

// Whether this build has the vector path (x86-64 with a compiler that knows AVX-512).
bool swf_scan_avx512_built();

// Which scan the SWF reader uses: 0 = automatic (the vector path when built and the CPU has
// AVX-512 F/BW/DQ/VBMI/VBMI2, BMI, BMI2 and POPCNT), 1 = the byte loop, 2 = the vector path where
// usable. Internal switch for tests and benchmarks; the environment variable
// MLPRIO_SWF_SCAN=scalar|avx512 sets the starting value. Returns whether the vector path is
// usable on this machine.
bool set_swf_scan_mode(int mode);
bool swf_scan_vector_enabled();

}  // namespace mlprio::detail
