#include "src/ops/gpu_element_type.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/codegen/element_type.h"

namespace reprise::ops {

absl::StatusOr<DType> GpuElementType(const Node& node, absl::Span<const TensorSpec> inputs) {
  std::vector<const TensorSpec*> specs;
  for (const TensorSpec& spec : inputs) specs.push_back(&spec);
  for (const TensorSpec& spec : node.outputs) specs.push_back(&spec);
  if (specs.empty()) return DType::kFloat32;
  const DType dtype = specs[0]->dtype;
  bool uniform = true;
  for (const TensorSpec* spec : specs) uniform = uniform && spec->dtype == dtype;
  if (uniform && codegen::IsKernelElementType(dtype)) return dtype;
  std::vector<std::string> names;
  for (const TensorSpec* spec : specs) names.push_back(spec->ToString());
  return absl::UnimplementedError(absl::StrCat(
      "node '", node.name, "': ", node.op_name(),
      " runs on the GPU in float32, bfloat16 or float16, all its tensors of one type; got ",
      absl::StrJoin(names, ", ")));
}

absl::Status RequireFloat32(const Node& node, absl::Span<const TensorSpec> specs) {
  for (const TensorSpec& spec : specs) {
    if (spec.dtype != DType::kFloat32) {
      return absl::UnimplementedError(absl::StrCat("node '", node.name, "' (", node.op_name(),
                                                   "): the GPU kernel takes float32, got ",
                                                   spec.ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace reprise::ops
