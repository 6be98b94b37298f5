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

// The next line of a buffer, found and scanned in one pass. `s` holds `avail` bytes read from
// the file, and 128 bytes from `s` are readable whatever `avail` is (LineReader's
// LINE_PAD_AFTER). Takes the line when a '\n' lies within those 128 bytes and inside `avail`,
// and the line before it (white space at either end allowed: the fields are those of the
// trimmed line) has at least 18 fields whose first 18 are each an optional '-' and 1..15 ASCII
// digits, the lines the byte loop reads as "plain" in every numeric field. Then it fills `out`
// and returns the line's length plus one (the '\n'); else it returns 0, `out` unspecified, and
// the caller reads the line the usual way (blank lines, comments, longer and other lines, a line
// cut by the end of the buffer). Call only where swf_scan_vector_enabled().
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
