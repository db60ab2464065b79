// Prints the start of every record row of docs/format.md's table, from the
// one definition of the records (src/format/records.h): tag, name and field
// list. format_records_doc_test checks that the document has each row.

#include <cstdio>

#include "src/format/records.h"

int main() {
  namespace fmt = memstep::format;
  for (int tag = 0; tag < 256; ++tag) {
    const char* name = fmt::RecordName(static_cast<uint8_t>(tag));
    if (name == nullptr) continue;
    std::printf("| 0x%02X | %s | `%s`\n", tag, name,
                fmt::FieldSignature(static_cast<uint8_t>(tag)));
  }
  return 0;
}
