// One grammar for sizes, rates and percentages, shared by the injected
// library's MEMSTEP_* variables, the CLI's options and `--fail-on` gates
// (docs/cli.md "Sizes, rates and percentages"):
//
//   quantity := number [space] [unit] [space] [per]
//   number   := digits [ "." digits ]
//   unit     := "B"
//             | "K" | "M" | "G" | "T"              (1024-based)
//             | "KiB" | "MiB" | "GiB" | "TiB"      (1024-based, IEC)
//             | "kB" | "KB" | "MB" | "GB" | "TB"   (1000-based, SI)
//             | "%"                                (a percentage)
//   per      := "/step" | "/s"
//
// Units are case-insensitive but for the distinction above ("kb" and "KB"
// are SI, "kib" is IEC). Each use says what it accepts (a size, a size per
// step, a percentage) and gets an error that shows the accepted forms.
//
// Freestanding: no allocation, no exceptions, no libc beyond <stddef.h> and
// <stdint.h>, so that libmemstep.so parses its environment with it before
// the program's allocator is known.
#ifndef MEMSTEP_SRC_FORMAT_QUANTITY_H_
#define MEMSTEP_SRC_FORMAT_QUANTITY_H_

#include <stddef.h>
#include <stdint.h>

namespace memstep::format {

enum QuantityUnit : uint8_t {
  kQuantityNone = 0,     // a bare number
  kQuantityBytes = 1,    // a byte unit was given
  kQuantityPercent = 2,  // "%"
};

enum QuantityPer : uint8_t { kPerNone = 0, kPerStep = 1, kPerSecond = 2 };

struct Quantity {
  double value = 0;    // bytes (bare numbers: as written), or percent
  uint64_t bytes = 0;  // value rounded down, when it fits (exact for integers)
  bool fits = false;   // value is finite and below 2^64
  QuantityUnit unit = kQuantityNone;
  QuantityPer per = kPerNone;
};

// What a use accepts; ParseQuantity fails on anything else.
enum QuantityAccept : uint32_t {
  kAcceptSize = 1u << 0,     // bare number or byte unit
  kAcceptPercent = 1u << 1,  // "N%"; without kAcceptSize a bare number is one too
  kAcceptPerStep = 1u << 2,  // a trailing "/step"
  kAcceptPerSecond = 1u << 3,
  kAcceptFraction = 1u << 4,  // "1.5" (else digits only)
};

namespace quantity_internal {

inline char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
inline bool IsSpace(char c) { return c == ' ' || c == '\t'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Case-insensitive equality of s[0, n) and the NUL-terminated `want`.
inline bool Eq(const char* s, size_t n, const char* want) {
  size_t i = 0;
  for (; i < n && want[i] != '\0'; ++i) {
    if (Lower(s[i]) != want[i]) return false;
  }
  return i == n && want[i] == '\0';
}

// The multiplier of a byte unit, 0 if `s[0, n)` is none.
inline double UnitScale(const char* s, size_t n) {
  if (n == 0) return 1;
  if (Eq(s, n, "b")) return 1;
  static const char kLetters[] = "kmgt";
  double binary = 1, decimal = 1;
  for (int k = 0; k < 4; ++k) {
    binary *= 1024;
    decimal *= 1000;
    const char l = kLetters[k];
    if (n == 1 && Lower(s[0]) == l) return binary;                         // K
    if (n == 3 && Lower(s[0]) == l && Eq(s + 1, 2, "ib")) return binary;   // KiB
    if (n == 2 && Lower(s[0]) == l && Lower(s[1]) == 'b') return decimal;  // kB, KB
  }
  return 0;
}

}  // namespace quantity_internal

// Parses s[0, n) as one quantity that `accept` allows. Returns nullptr on
// success, else a short reason ("unknown unit", "expected a number", ...);
// callers add the accepted forms (QuantityForms).
inline const char* ParseQuantity(const char* s, size_t n, uint32_t accept, Quantity* out) {
  using namespace quantity_internal;  // NOLINT
  *out = Quantity{};
  size_t i = 0;
  while (i < n && IsSpace(s[i])) ++i;
  if (i == n || !IsDigit(s[i])) return "expected a number";
  double v = 0;
  for (; i < n && IsDigit(s[i]); ++i) v = v * 10 + (s[i] - '0');
  if (i < n && s[i] == '.') {
    if (!(accept & kAcceptFraction)) return "expected a whole number";
    ++i;
    if (i == n || !IsDigit(s[i])) return "expected digits after '.'";
    double f = 0.1;
    for (; i < n && IsDigit(s[i]); ++i, f /= 10) v += (s[i] - '0') * f;
  }
  while (i < n && IsSpace(s[i])) ++i;
  size_t u = i;
  if (i < n && s[i] == '%') {
    ++i;
  } else {
    while (i < n && IsAlpha(s[i])) ++i;
  }
  const size_t ulen = i - u;
  if (ulen == 1 && s[u] == '%') {
    if (!(accept & kAcceptPercent)) return "a percentage is not accepted here";
    out->unit = kQuantityPercent;
  } else if (ulen > 0) {
    const double scale = UnitScale(s + u, ulen);
    if (scale == 0) return "unknown unit";
    if (!(accept & kAcceptSize)) return "a size is not accepted here";
    v *= scale;
    out->unit = kQuantityBytes;
  } else if (!(accept & kAcceptSize)) {
    if (!(accept & kAcceptPercent)) return "expected a unit";
    out->unit = kQuantityPercent;  // "10" where only a percentage is accepted
  }
  while (i < n && IsSpace(s[i])) ++i;
  if (i < n && s[i] == '/') {
    ++i;
    while (i < n && IsSpace(s[i])) ++i;
    size_t w = i;
    while (i < n && IsAlpha(s[i])) ++i;
    if (Eq(s + w, i - w, "step")) {
      if (!(accept & kAcceptPerStep)) return "'/step' is not accepted here";
      out->per = kPerStep;
    } else if (Eq(s + w, i - w, "s")) {
      if (!(accept & kAcceptPerSecond)) return "'/s' is not accepted here";
      out->per = kPerSecond;
    } else {
      return "expected '/step' or '/s'";
    }
  }
  while (i < n && IsSpace(s[i])) ++i;
  if (i != n) return "unexpected characters after the quantity";
  if (!(v <= 1e300)) return "a number too large";
  if (out->unit == kQuantityPercent && !(v <= 100)) return "a percentage above 100";
  out->value = v;
  out->fits = v < 18446744073709551616.0;
  out->bytes = out->fits ? static_cast<uint64_t>(v) : UINT64_MAX;
  return nullptr;
}

inline const char* ParseQuantity(const char* s, uint32_t accept, Quantity* out) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return ParseQuantity(s, n, accept, out);
}

// The accepted forms, for error messages.
inline const char* QuantityForms(uint32_t accept) {
  if (accept & kAcceptPerStep) {
    return "a size, optionally per step: 4096, 512K, 1.5MiB, 2GB, 1MB/step (K, M, G, T, KiB, "
           "MiB, GiB, TiB are 1024-based; kB, MB, GB, TB are 1000-based)";
  }
  if (accept & kAcceptPercent) return "a percentage: 10, 10%, 2.5%";
  return "a size: 4096, 512K, 512KiB, 1.5MiB, 2GB (K, M, G, T, KiB, MiB, GiB, TiB are "
         "1024-based; kB, MB, GB, TB are 1000-based)";
}

}  // namespace memstep::format

#endif  // MEMSTEP_SRC_FORMAT_QUANTITY_H_
