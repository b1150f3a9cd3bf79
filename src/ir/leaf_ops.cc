// The four leaf ops and the attribute accessors shared by every op.
#include <variant>

#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"

namespace reprise::ir {

const OpDef& InputOp() {
  static const OpDef op{.name = "input", .kind = OpKind::kLeaf};
  return op;
}
const OpDef& ParameterOp() {
  static const OpDef op{.name = "parameter", .kind = OpKind::kLeaf};
  return op;
}
const OpDef& StateOp() {
  static const OpDef op{.name = "state", .kind = OpKind::kLeaf};
  return op;
}
const OpDef& ConstantOp() {
  static const OpDef op{.name = "constant", .kind = OpKind::kLeaf};
  return op;
}
bool IsLeaf(const Node& node) { return node.op->kind == OpKind::kLeaf; }

std::vector<int> MutatedInputs(const OpDef& op, const Attrs& attrs, int num_inputs) {
  if (op.mutated_inputs_of != nullptr) return op.mutated_inputs_of(attrs, num_inputs);
  return op.mutated_inputs;
}

absl::StatusOr<double> FloatAttr(const Attrs& attrs, absl::string_view key) {
  auto it = attrs.find(std::string(key));
  if (it == attrs.end())
    return absl::InvalidArgumentError(absl::StrCat("missing attribute '", key, "'"));
  if (const double* v = std::get_if<double>(&it->second)) return *v;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return absl::InvalidArgumentError(absl::StrCat("attribute '", key, "' is not a number"));
}

absl::StatusOr<int64_t> IntAttr(const Attrs& attrs, absl::string_view key) {
  auto it = attrs.find(std::string(key));
  if (it == attrs.end())
    return absl::InvalidArgumentError(absl::StrCat("missing attribute '", key, "'"));
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
  return absl::InvalidArgumentError(absl::StrCat("attribute '", key, "' is not an integer"));
}

bool BoolAttrOr(const Attrs& attrs, absl::string_view key, bool fallback) {
  auto it = attrs.find(std::string(key));
  if (it == attrs.end()) return fallback;
  if (const bool* v = std::get_if<bool>(&it->second)) return *v;
  return fallback;
}

}  // namespace reprise::ir
