// The SWF reader's vector paths: one line's fields found and its first 18 numeric fields read
// with AVX-512 (swf_scan_avx512.cpp) or, on CPUs without that subset, with AVX2
// (swf_scan_avx2.cpp), for lines they can take whole; the reader's byte loop (swf_reader.cpp)
// reads every other line, and on CPUs with neither all of them. All give the same fields and
// values for every line a vector path takes (test_swf_scan "[swf][scan]").
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlprio::detail {

struct SwfLineScan {
  // Fields 0..17 as integers, as the byte loop reads a plain field (18..23: scratch). A "-0"
  // reads 0 here; the reader forms the doubles it needs, -0.0 included, from iv and the text.
  int64_t iv[24];
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
// cut by the end of the buffer). Call only where swf_scan_vector() picks it.
size_t swf_scan_avx512_next(const char* s, size_t avail, const SwfBounds (&bounds)[2],
                            SwfLineScan& out);

// The same contract with AVX2, BMI, BMI2 and POPCNT (the same lines taken, the same `out`), and
// 16 bytes before `s` readable too (LineReader's LINE_PAD_BEFORE).
size_t swf_scan_avx2_next(const char* s, size_t avail, const SwfBounds (&bounds)[2],
                          SwfLineScan& out);

// Whether this build has each vector path (x86-64 with a compiler that knows the instructions).
bool swf_scan_avx512_built();
bool swf_scan_avx2_built();

// Which scan the SWF reader uses: 0 = automatic (the AVX-512 path when built and the CPU has
// AVX-512 F/BW/DQ/VBMI/VBMI2, BMI, BMI2 and POPCNT, else the AVX2 path when built and the CPU has
// AVX2, BMI, BMI2 and POPCNT, else the byte loop), 1 = the byte loop, 2 = the AVX-512 path where
// usable, 3 = the AVX2 path where usable (the byte loop where the chosen path is not). Internal
// switch for tests and benchmarks; the environment variable MLPRIO_SWF_SCAN=scalar|avx512|avx2
// sets the starting value. Returns whether the chosen mode reads lines with a vector path on
// this machine.
bool set_swf_scan_mode(int mode);
using SwfScanFn = size_t (*)(const char*, size_t, const SwfBounds (&)[2], SwfLineScan&);
SwfScanFn swf_scan_vector();  // the vector path the mode picks here, or nullptr: the byte loop

}  // namespace mlprio::detail
