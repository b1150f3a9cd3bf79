#include "src/ir/reference_executor.h"

#include "absl/strings/str_cat.h"
#include "src/ir/initializer.h"
#include "src/ir/low_precision.h"
#include "src/ir/op_def.h"
#include "src/util/status_macros.h"

namespace reprise::ir {

namespace {

// Runs `n`'s reference with every 16-bit float tensor widened to float32, then rounds the results
// (and the inputs it writes in place) back: what a kernel computing in float32 and storing 16 bits
// does.
absl::Status RunInFloat32(const Node& n, std::vector<HostTensor*>& in,
                          std::vector<HostTensor*>& out) {
  bool any = false;
  for (HostTensor* t : in) any = any || IsLowPrecision(t->dtype());
  for (HostTensor* t : out) any = any || IsLowPrecision(t->dtype());
  if (!any) return n.op->cpu(n, in, out);
  auto widen = [](HostTensor* t, std::vector<HostTensor>& wide) -> absl::StatusOr<HostTensor*> {
    if (!IsLowPrecision(t->dtype())) return t;
    wide.emplace_back(TensorSpec{t->spec().shape, DType::kFloat32});
    RETURN_IF_ERROR(ConvertFloats(*t, wide.back()));
    return &wide.back();
  };
  std::vector<HostTensor> wide_in, wide_out;
  wide_in.reserve(in.size());
  wide_out.reserve(out.size());
  std::vector<HostTensor*> in32, out32;
  for (HostTensor* t : in) {
    ASSIGN_OR_RETURN(HostTensor * w, widen(t, wide_in));
    in32.push_back(w);
  }
  for (HostTensor* t : out) {
    ASSIGN_OR_RETURN(HostTensor * w, widen(t, wide_out));
    out32.push_back(w);
  }
  RETURN_IF_ERROR(n.op->cpu(n, in32, out32));
  for (size_t i = 0; i < out.size(); ++i) {
    if (out32[i] != out[i]) RETURN_IF_ERROR(ConvertFloats(*out32[i], *out[i]));
  }
  for (int m : MutatedInputs(n)) {
    if (in32[m] != in[m]) RETURN_IF_ERROR(ConvertFloats(*in32[m], *in[m]));
  }
  return absl::OkStatus();
}

}  // namespace

ReferenceExecutor::ReferenceExecutor(const Graph& graph, bool float64, uint64_t seed)
    : graph_(graph), values_(graph.num_nodes()) {
  for (const Node& n : graph.nodes()) {
    for (TensorSpec spec : n.outputs) {
      if (float64 && spec.dtype == DType::kFloat32) spec.dtype = DType::kFloat64;
      values_[n.id].emplace_back(spec);
    }
    if (IsLeaf(n)) FillInitial(n.init, seed, n.name, values_[n.id][0]);
  }
}

absl::StatusOr<HostTensor*> ReferenceExecutor::Tensor(Value v) {
  if (v.node < 0 || v.node >= graph_.num_nodes() ||
      v.output >= static_cast<int>(values_[v.node].size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("value ", v.node, ":", v.output, " is not in the graph"));
  }
  return &values_[v.node][v.output];
}

absl::StatusOr<HostTensor*> ReferenceExecutor::Leaf(absl::string_view name) {
  ASSIGN_OR_RETURN(int32_t id, graph_.FindNode(name));
  if (!IsLeaf(graph_.node(id))) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is an op, not a leaf"));
  }
  return &values_[id][0];
}

absl::Status ReferenceExecutor::SetLeaf(absl::string_view name, absl::Span<const double> data) {
  ASSIGN_OR_RETURN(HostTensor * t, Leaf(name));
  if (static_cast<int64_t>(data.size()) != t->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' holds ", t->size(), " elements, got ", data.size()));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    switch (t->dtype()) {
      case DType::kFloat32:
        t->data<float>()[i] = static_cast<float>(data[i]);
        break;
      case DType::kFloat64:
        t->data<double>()[i] = data[i];
        break;
      case DType::kInt32:
        t->data<int32_t>()[i] = static_cast<int32_t>(data[i]);
        break;
      case DType::kBFloat16:
      case DType::kFloat16:
        SetFloatElement(*t, i, data[i]);
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status ReferenceExecutor::SetLeaf(absl::string_view name, absl::Span<const int32_t> data) {
  ASSIGN_OR_RETURN(HostTensor * t, Leaf(name));
  if (t->dtype() != DType::kInt32 || static_cast<int64_t>(data.size()) != t->size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is ", t->spec().ToString(),
                                                   ", got ", data.size(), " int32 values"));
  }
  std::copy(data.begin(), data.end(), t->data<int32_t>().begin());
  return absl::OkStatus();
}

absl::Status ReferenceExecutor::Run() {
  for (const Node& n : graph_.nodes()) {
    if (IsLeaf(n)) continue;
    std::vector<HostTensor*> in, out;
    for (const Value& v : n.inputs) in.push_back(&values_[v.node][v.output]);
    for (HostTensor& t : values_[n.id]) out.push_back(&t);
    absl::Status s = n.op->low_precision ? n.op->cpu(n, in, out) : RunInFloat32(n, in, out);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("op '", n.op_name(), "' node '", n.name,
                                                 "' (CPU reference): ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace reprise::ir
