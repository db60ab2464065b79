// Protobuf wire format and gzip with stored blocks (pprof_encoding.h).

#include "src/report/pprof_encoding.h"

#include <algorithm>
#include <array>

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

std::string Gzip(const std::string& data) {
  constexpr size_t kMaxBlock = 65535;
  std::string out = {'\x1f', '\x8b', '\x08', '\0', '\0', '\0', '\0', '\0', '\0', '\xff'};
  out.reserve(data.size() + data.size() / kMaxBlock * 5 + 32);
  size_t pos = 0;
  do {
    const size_t len = std::min(kMaxBlock, data.size() - pos);
    const bool last = pos + len == data.size();
    out += static_cast<char>(last ? 1 : 0);
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>(len >> 8);
    out += static_cast<char>(~len & 0xff);
    out += static_cast<char>((~len >> 8) & 0xff);
    out.append(data, pos, len);
    pos += len;
  } while (pos < data.size());
  Le32(out, Crc32(data));
  Le32(out, static_cast<uint32_t>(data.size()));
  return out;
}

}  // namespace memstep::report
