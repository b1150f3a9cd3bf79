// libFuzzer target: the measured-choice records' decoders (cuDNN conv plans, cuBLASLt matmul
// configurations and GELU products' raced libraries, src/runtime/plan_record.h) on arbitrary bytes:
// a record comes from the shared cache folder, which may hold anything. Either a Status, or a
// record whose encoding decodes to the same record (the text form may differ: "08" candidates,
// digits past a double's precision) and is refused by the other form's decoder.
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/runtime/plan_record.h"

namespace {

using reprise::runtime::PlanRecord;

template <typename Decode, typename Encode, typename DecodeOther>
void Check(const std::string& text, Decode decode, Encode encode, DecodeOther decode_other) {
  absl::StatusOr<PlanRecord> record = decode(text);
  if (!record.ok()) return;
  const std::string again = encode(*record);
  absl::StatusOr<PlanRecord> back = decode(again);
  if (!back.ok() || !(*back == *record)) __builtin_trap();
  if (decode_other(again).ok()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace rt = reprise::runtime;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Check(text, rt::DecodeConvPlanRecord, rt::EncodeConvPlanRecord, rt::DecodeMatmulPlanRecord);
  Check(text, rt::DecodeMatmulPlanRecord, rt::EncodeMatmulPlanRecord, rt::DecodeConvPlanRecord);
  Check(text, rt::DecodeGeluProductRecord, rt::EncodeGeluProductRecord, rt::DecodeMatmulPlanRecord);
  return 0;
}
