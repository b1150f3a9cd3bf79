// The cuDNN graph of one graph-API convolution (cudnn_conv_graph_internal.h);
// cmake/cudnn_frontend.cmake gives this file the include directory and
// CUDNN_FRONTEND_SKIP_JSON_LIB.
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/runtime/cudnn_conv_graph_internal.h"

namespace reprise::runtime::conv_graph {

// "<context>: cudnn-frontend <step> failed for <what>: <message>". The codes by which the frontend
// says that no engine takes the graph (at this shape, under the numerical-note filters, on this
// device) are Unimplemented, so that callers keep their own kernels; anything else is Internal.
// The support check lists every engine's refusal: the message keeps its first 800 characters.
absl::Status FrontendStatus(fe::error_t error, absl::string_view step, absl::string_view what,
                            absl::string_view context) {
  if (error.is_good()) return absl::OkStatus();
  const fe::error_code_t code = error.get_code();
  const bool unsupported = code == fe::error_code_t::GRAPH_NOT_SUPPORTED ||
                           code == fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED ||
                           code == fe::error_code_t::HEURISTIC_QUERY_FAILED;
  std::string detail = error.get_message();
  if (detail.size() > 800) detail = absl::StrCat(detail.substr(0, 800), " ...");
  std::string message = absl::StrCat(context.empty() ? "" : absl::StrCat(context, ": "),
                                     "cudnn-frontend ", step, " failed for ", what, ": ", detail);
  return unsupported ? absl::UnimplementedError(message) : absl::InternalError(message);
}

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

fe::DataType_t IoType(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return fe::DataType_t::BFLOAT16;
    case DType::kFloat16:
      return fe::DataType_t::HALF;
    default:
      return fe::DataType_t::FLOAT;
  }
}

// A 4-D tensor of logical extents [outer, c, h, w] (n or k first), stored NCHW or NHWC.
TensorPtr Tensor4d(fe::graph::Graph& graph, const char* name, Uid uid, Layout layout, int64_t outer,
                   int64_t c, int64_t h, int64_t w) {
  const std::vector<int64_t> stride = layout == Layout::kNHWC
                                          ? std::vector<int64_t>{h * w * c, 1, w * c, c}
                                          : std::vector<int64_t>{c * h * w, h * w, w, 1};
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({outer, c, h, w})
                          .set_stride(stride));
}

void SetOutput4d(const TensorPtr& t, Uid uid, Layout layout, DType dtype, int64_t outer, int64_t c,
                 int64_t h, int64_t w) {
  const std::vector<int64_t> stride = layout == Layout::kNHWC
                                          ? std::vector<int64_t>{h * w * c, 1, w * c, c}
                                          : std::vector<int64_t>{c * h * w, h * w, w, 1};
  t->set_output(true)
      .set_uid(uid)
      .set_data_type(IoType(dtype))
      .set_dim({outer, c, h, w})
      .set_stride(stride);
}

// A per-channel vector [1, c, 1, 1] of `type`.
TensorPtr Channels(fe::graph::Graph& graph, const char* name, Uid uid, int64_t c,
                   fe::DataType_t type) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({1, c, 1, 1})
                          .set_stride({c, 1, c, c})
                          .set_data_type(type));
}

void SetChannelsOutput(const TensorPtr& t, Uid uid, int64_t c) {
  t->set_output(true)
      .set_uid(uid)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({1, c, 1, 1})
      .set_stride({c, 1, c, c});
}

// relu(x · scale + bias) with scale and bias [C] in x's dtype: the previous batch norm's apply
// and ReLU on the convolution's load of x.
TensorPtr ScaleBiasRelu(fe::graph::Graph& graph, const TensorPtr& x, const ConvShape& s) {
  TensorPtr scale = Channels(graph, "scale", kScale, s.c, IoType(s.dtype));
  TensorPtr bias = Channels(graph, "bias", kBias, s.c, IoType(s.dtype));
  TensorPtr scaled = graph.pointwise(
      x, scale,
      fe::graph::Pointwise_attributes().set_name("scale").set_mode(fe::PointwiseMode_t::MUL));
  TensorPtr shifted = graph.pointwise(
      scaled, bias,
      fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
  return graph.pointwise(shifted, fe::graph::Pointwise_attributes().set_name("relu").set_mode(
                                      fe::PointwiseMode_t::RELU_FWD));
}

}  // namespace

std::string What(const Key& key) {
  return absl::StrCat("conv ", ConvKindName(key.kind),
                      key.fusion.any() ? absl::StrCat(" ", key.fusion.ToString()) : "", " ",
                      key.shape.ToString());
}

std::shared_ptr<fe::graph::Graph> DescribeGraph(const Key& key) {
  const ConvShape& s = key.shape;
  const int64_t cg = s.c / s.groups;
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(IoType(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> pad = {s.pad_h, s.pad_w}, stride = {s.stride_h, s.stride_w},
                             dilation = {s.dilation_h, s.dilation_w};
  switch (key.kind) {
    case ConvKind::kForward: {
      TensorPtr x = Tensor4d(*graph, "x", kA, s.layout, s.n, s.c, s.h, s.w);
      TensorPtr w = Tensor4d(*graph, "w", kB, s.layout, s.k, cg, s.r, s.s);
      if (key.fusion.scale_bias_relu_input) x = ScaleBiasRelu(*graph, x, s);
      TensorPtr y = graph->conv_fprop(x, w,
                                      fe::graph::Conv_fprop_attributes()
                                          .set_name("fprop")
                                          .set_padding(pad)
                                          .set_stride(stride)
                                          .set_dilation(dilation));
      SetOutput4d(y, kOut, s.layout, s.dtype, s.n, s.k, s.p, s.q);
      if (key.fusion.output_stats) {
        auto [sum, sq_sum] =
            graph->genstats(y, fe::graph::Genstats_attributes().set_name("genstats"));
        SetChannelsOutput(sum, kSum, s.k);
        SetChannelsOutput(sq_sum, kSqSum, s.k);
      }
      return graph;
    }
    case ConvKind::kBackwardData: {
      TensorPtr dy = Tensor4d(*graph, "dy", kA, s.layout, s.n, s.k, s.p, s.q);
      TensorPtr w = Tensor4d(*graph, "w", kB, s.layout, s.k, cg, s.r, s.s);
      TensorPtr dx = graph->conv_dgrad(dy, w,
                                       fe::graph::Conv_dgrad_attributes()
                                           .set_name("dgrad")
                                           .set_padding(pad)
                                           .set_stride(stride)
                                           .set_dilation(dilation));
      if (key.fusion.add_to_output) {
        // The float sum dgrad + acc, rounded once into out (which may alias acc).
        TensorPtr acc = Tensor4d(*graph, "acc", kAcc, s.layout, s.n, s.c, s.h, s.w);
        dx->set_dim({s.n, s.c, s.h, s.w});
        dx = graph->pointwise(dx, acc,
                              fe::graph::Pointwise_attributes()
                                  .set_name("accumulate")
                                  .set_mode(fe::PointwiseMode_t::ADD));
      }
      SetOutput4d(dx, kOut, s.layout, s.dtype, s.n, s.c, s.h, s.w);
      return graph;
    }
    case ConvKind::kBackwardFilter: {
      TensorPtr x = Tensor4d(*graph, "x", kA, s.layout, s.n, s.c, s.h, s.w);
      TensorPtr dy = Tensor4d(*graph, "dy", kB, s.layout, s.n, s.k, s.p, s.q);
      if (key.fusion.scale_bias_relu_input) x = ScaleBiasRelu(*graph, x, s);
      TensorPtr dw = graph->conv_wgrad(dy, x,
                                       fe::graph::Conv_wgrad_attributes()
                                           .set_name("wgrad")
                                           .set_padding(pad)
                                           .set_stride(stride)
                                           .set_dilation(dilation));
      SetOutput4d(dw, kOut, s.layout, s.dtype, s.k, cg, s.r, s.s);
      return graph;
    }
  }
  return graph;
}

// Engines whose numerical notes the options rule out. Down-converting inputs (float32 data run in
// float16) and reduced-precision reductions (16-bit partial sums) are never wanted in training.
// Strict float32 (no TF32) also rules out tensor cores, and FFT and Winograd engines, whose
// transformed-domain rounding scales with the tensor's largest values (as CudnnConv does).
std::vector<fe::NumericalNote_t> BarredNotes(const Key& key) {
  std::vector<fe::NumericalNote_t> notes = {fe::NumericalNote_t::DOWN_CONVERT_INPUTS,
                                            fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION};
  if (key.deterministic) notes.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
  if (key.shape.dtype == DType::kFloat32 && !key.allow_tf32) {
    for (fe::NumericalNote_t note :
         {fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::FFT, fe::NumericalNote_t::WINOGRAD,
          fe::NumericalNote_t::WINOGRAD_TILE_4x4, fe::NumericalNote_t::WINOGRAD_TILE_6x6,
          fe::NumericalNote_t::WINOGRAD_TILE_13x13}) {
      notes.push_back(note);
    }
  }
  return notes;
}

}  // namespace reprise::runtime::conv_graph
