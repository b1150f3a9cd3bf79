// libFuzzer target: the safetensors and checkpoint readers on arbitrary bytes. Either refuses
// with a Status or gives a file whose tensors, written again, read back the same; never a crash,
// a hang, an exception or undefined behaviour (run under ASan and UBSan).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/api/checkpoint_format.h"
#include "src/util/safetensors.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)reprise::ParseCheckpoint(bytes, "fuzz.safetensors");
  absl::StatusOr<reprise::util::SafetensorsFile> file =
      reprise::util::ParseSafetensors(bytes, "fuzz.safetensors");
  if (!file.ok()) return 0;
  // A file the reader accepts is one the writer can write again, to the same entries.
  std::vector<reprise::util::TensorView> views;
  for (const reprise::util::SafetensorsEntry& e : file->entries) {
    views.push_back({e.name, e.dtype, e.shape, file->Data(e)});
  }
  absl::StatusOr<std::string> again = reprise::util::SerializeSafetensors(views, file->metadata);
  Check(again.ok());
  absl::StatusOr<reprise::util::SafetensorsFile> reread =
      reprise::util::ParseSafetensors(*again, "again.safetensors");
  Check(reread.ok());
  Check(reread->entries.size() == file->entries.size());
  for (size_t i = 0; i < file->entries.size(); ++i) {
    const reprise::util::SafetensorsEntry& a = file->entries[i];
    const reprise::util::SafetensorsEntry& b = reread->entries[i];
    Check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape);
    Check(file->Data(a) == reread->Data(b));
  }
  Check(reread->metadata == file->metadata);
  return 0;
}
