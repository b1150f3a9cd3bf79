#include "src/api/model_fingerprint.h"

#include <cstring>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/sha256.h"

namespace reprise {
namespace {

// Attribute values with their type, so 1 (an int) and 1.0 (a double) differ.
std::string AttrText(const AttrValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return absl::StrCat("i", *i);
  if (const auto* d = std::get_if<double>(&value)) {
    uint64_t bits;
    std::memcpy(&bits, d, sizeof(bits));  // Exact, unlike a decimal rendering.
    return absl::StrCat("d", bits);
  }
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "btrue" : "bfalse";
  return absl::StrCat("s", std::get<std::string>(value).size(), ":", std::get<std::string>(value));
}

// A string with its length, so that names holding separators cannot collide.
std::string Field(absl::string_view text) { return absl::StrCat(text.size(), ":", text, ";"); }

}  // namespace

std::string ModelFingerprint(const Graph& graph, Value loss, const OptimizerOptions& optimizer) {
  runtime::Sha256Hasher hasher;
  hasher.Update("reprise model v1\n");
  for (const Node& node : graph.nodes()) {
    std::string line = absl::StrCat(node.id, " ", Field(node.op_name()), Field(node.name));
    for (const Value& in : node.inputs) absl::StrAppend(&line, "in ", in.node, ".", in.output, ";");
    for (int32_t c : node.control_inputs) absl::StrAppend(&line, "after ", c, ";");
    for (const TensorSpec& out : node.outputs) absl::StrAppend(&line, "out ", out.ToString(), ";");
    for (const auto& [key, value] : node.attrs) {
      absl::StrAppend(&line, "attr ", Field(key), Field(AttrText(value)));
    }
    hasher.Update(absl::StrCat(line, "\n"));
  }
  hasher.Update(absl::StrCat("loss ", loss.node, ".", loss.output, "\n"));
  hasher.Update(absl::StrCat("optimizer ", static_cast<int>(optimizer.kind), " nesterov ",
                             optimizer.nesterov ? 1 : 0, "\n"));
  return runtime::ToHex(hasher.Finish());
}

}  // namespace reprise
