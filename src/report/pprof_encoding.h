// The two encodings a pprof file needs, written by hand (no protobuf or zlib
// dependency): protobuf's wire format and a gzip member holding stored
// (uncompressed) deflate blocks.
//
// Protobuf wire format (developers.google.com/protocol-buffers/docs/encoding):
// a field is a key varint (field number << 3 | wire type) and its value:
// wire type 0 a varint (7 bits per byte, low first, high bit = more), type 2
// a varint length then that many bytes (strings, embedded messages, packed
// repeated varints). Example: field 1 = 150 -> 08 96 01; field 2 = "hi" ->
// 12 02 68 69; packed field 1 = {1, 300} -> 0a 03 01 ac 02.
//
// Gzip (RFC 1952) around deflate (RFC 1951) stored blocks: header
// 1f 8b 08 00 00000000 00 ff; per block of at most 65535 bytes one byte
// BFINAL|BTYPE=00 (01 for the last block, else 00), LEN and ~LEN as
// little-endian u16, the bytes; then CRC-32 (IEEE 802.3, reflected
// polynomial 0xEDB88320) of the data and its length mod 2^32, both
// little-endian u32. Example: Gzip("") = 1f 8b 08 00 00 00 00 00 00 ff
// 01 00 00 ff ff 00 00 00 00 00 00 00 00.
//
// Contract: pure functions, no I/O; ProtoWriter only appends to its buffer.

#ifndef MEMSTEP_SRC_REPORT_PPROF_ENCODING_H_
#define MEMSTEP_SRC_REPORT_PPROF_ENCODING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memstep::report {

class ProtoWriter {
 public:
  // Wire type 0. int64 fields take their two's complement (negative values
  // are 10 bytes, as protobuf writes them).
  void Varint(uint32_t field, uint64_t value);
  void Int64(uint32_t field, int64_t value) { Varint(field, static_cast<uint64_t>(value)); }
  // Wire type 2: bytes, strings, embedded messages.
  void Bytes(uint32_t field, const std::string& bytes);
  void Message(uint32_t field, const ProtoWriter& message) { Bytes(field, message.data_); }
  // Wire type 2: packed repeated varints (nothing written when empty).
  void Packed(uint32_t field, const std::vector<uint64_t>& values);

  // Appends another message's fields as they are (no field header).
  void Append(const ProtoWriter& other) { data_ += other.data_; }
  void AppendRaw(const std::string& wire) { data_ += wire; }

  const std::string& data() const { return data_; }
  std::string Take() && { return std::move(data_); }

 private:
  void Raw(uint64_t v);
  std::string data_;
};

// CRC-32 as gzip, zip and PNG use it: Crc32("123456789") == 0xCBF43926.
uint32_t Crc32(const std::string& data);

// A gzip member with `data` in stored deflate blocks (decompresses with any
// gzip reader; no compression).
std::string Gzip(std::string data);

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_PPROF_ENCODING_H_
