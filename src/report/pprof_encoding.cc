// Protobuf wire format and gzip with stored blocks (pprof_encoding.h).

#include "src/report/pprof_encoding.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace memstep::report {

void ProtoWriter::Raw(uint64_t v) {
  while (v >= 0x80) {
    data_ += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  data_ += static_cast<char>(v);
}

void ProtoWriter::Varint(uint32_t field, uint64_t value) {
  Raw(uint64_t{field} << 3);
  Raw(value);
}

void ProtoWriter::Bytes(uint32_t field, const std::string& bytes) {
  Raw(uint64_t{field} << 3 | 2);
  Raw(bytes.size());
  data_ += bytes;
}

void ProtoWriter::Packed(uint32_t field, const std::vector<uint64_t>& values) {
  if (values.empty()) return;
  ProtoWriter inner;
  for (uint64_t v : values) inner.Raw(v);
  Bytes(field, inner.data_);
}

uint32_t Crc32(const std::string& data) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : data) crc = kTable[(crc ^ b) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

namespace {

void Le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

std::string Gzip(std::string data) {
  // In place: the stored blocks are the data with a 5-byte header before
  // each 65535 bytes, so the string grows by the headers and the blocks move
  // back to front into their places (a profile can be hundreds of MB: no
  // second copy of it).
  constexpr size_t kMaxBlock = 65535;
  constexpr size_t kHead = 10;
  const size_t n = data.size();
  const uint32_t crc = Crc32(data);
  const size_t blocks = n == 0 ? 1 : (n + kMaxBlock - 1) / kMaxBlock;
  data.resize(kHead + n + 5 * blocks);
  for (size_t b = blocks; b-- > 0;) {
    const size_t from = b * kMaxBlock;
    const size_t len = std::min(kMaxBlock, n - from);
    char* at = data.data() + kHead + from + 5 * b;
    memmove(at + 5, data.data() + from, len);
    at[0] = static_cast<char>(b + 1 == blocks ? 1 : 0);
    at[1] = static_cast<char>(len & 0xff);
    at[2] = static_cast<char>(len >> 8);
    at[3] = static_cast<char>(~len & 0xff);
    at[4] = static_cast<char>((~len >> 8) & 0xff);
  }
  static const char kGzipHead[kHead] = {'\x1f', '\x8b', '\x08', '\0', '\0',
                                        '\0',   '\0',   '\0',   '\0', '\xff'};
  memcpy(data.data(), kGzipHead, kHead);
  Le32(data, crc);
  Le32(data, static_cast<uint32_t>(n));
  return data;
}

}  // namespace memstep::report
