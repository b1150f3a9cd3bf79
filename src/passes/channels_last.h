// Channels-last: runs an NCHW convolutional network in NHWC inside, invisibly. cuDNN's tensor-core
// convolutions are far faster channels-last (ResNet-50 on an H100: 17.0 ms of convolutions per
// step in NCHW, 6.9 ms in NHWC), while users and PyTorch build networks in NCHW. Like
// torch.compile's layout optimisation, the pass rewrites the forward graph (before autodiff, so
// gradients follow through the transposes' own gradient rule):
//
//   - every NCHW image op (conv2d, channel_bias_add, batch_norm_train, batch_norm_infer,
//     max_pool2d, global_avg_pool) becomes its NHWC form under the same node name, and so does
//     every element-wise pointwise op (relu, add, ...) whose 4-D operands already exist in NHWC;
//   - inputs and parameters keep their names, shapes and layouts, so bindings, GetParameter and
//     SaveWeights/LoadWeights still speak PyTorch's layout: a 4-D input or conv weight is read
//     through one transpose "<name>.to_nhwc" (perm 0,2,3,1 takes both an image [N, C, H, W] and a
//     weight [K, C/groups, R, S] to what the NHWC op reads), made once and shared by its readers;
//   - per-channel tensors (biases, batch-norm gamma, beta and running statistics) are unchanged,
//     and global_avg_pool's [N, C] output is the same in both layouts, so what follows it (flatten,
//     linear, the loss) is untouched;
//   - a 4-D value read by an op the pass does not convert (a flatten of a 4-D tensor, dropout) or
//     kept for the user is transposed back to NCHW, once, as "<name>.to_nchw".
//
// Results are those of the NCHW graph up to floating-point reassociation. A graph with no NCHW
// image op (an MLP, a network built NHWC) comes back unchanged.
#ifndef REPRISE_SRC_PASSES_CHANNELS_LAST_H_
#define REPRISE_SRC_PASSES_CHANNELS_LAST_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/channels_last.h"
#include "reprise/graph.h"

namespace reprise::passes {

// Values of the graph the pass read -> values of the graph it wrote.
struct LayoutValueMap {
  // Old value -> the new value holding the same tensor in the same layout.
  absl::flat_hash_map<Value, Value> values;
  // Old NCHW value -> its NHWC form [N, H, W, C], for every 4-D value that has one.
  absl::flat_hash_map<Value, Value> nhwc;

  // The new value holding `old` in its own layout. NotFound, naming node and output, when it
  // exists only channels-last (keep it: TrainOptions::fetch); InvalidArgument when `old` is not
  // a value of the old graph.
  absl::StatusOr<Value> Map(Value old) const;
};

struct ChannelsLastGraph {
  Graph graph;
  Value loss;               // The loss, in `graph`.
  std::vector<Value> kept;  // The `keep` values, mapped, in order (4-D ones in NCHW).
  LayoutValueMap map;
  int converted_ops = 0;  // Nodes now running in NHWC.
  int transposes = 0;     // Transpose nodes added.
};

// Rewrites `graph` as described above. `keep`: values that must stay readable in their own
// layout after the step (the values the user fetches). InvalidArgument when `loss` or a `keep`
// value is not in `graph`; errors of the rewritten nodes' shape rules otherwise (a bug: NHWC
// forms accept whatever their NCHW forms did).
absl::StatusOr<ChannelsLastGraph> ConvertToChannelsLast(const Graph& graph, Value loss,
                                                        absl::Span<const Value> keep = {});

// Whether the graph has an op that ConvertToChannelsLast converts: an NCHW image op.
bool HasNchwImageOps(const Graph& graph);

// TrainOptions::kernels.channels_last: kOn converts whenever HasNchwImageOps; kAuto only when some
// NCHW conv2d computes in float32 (float64 graphs are CPU reference checks); kOff never.
bool WantsChannelsLast(const Graph& graph, ChannelsLast mode);

// ConvertToChannelsLast when WantsChannelsLast, else `graph` as is, every value mapped to itself.
absl::StatusOr<ChannelsLastGraph> ApplyChannelsLast(const Graph& graph, Value loss,
                                                    absl::Span<const Value> keep,
                                                    ChannelsLast mode);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_CHANNELS_LAST_H_
