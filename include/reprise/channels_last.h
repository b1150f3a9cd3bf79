// Options of the channels-last pass (src/passes/channels_last.h), which TrainOptions::
// kernels.channels_last sets.
#ifndef REPRISE_INCLUDE_REPRISE_CHANNELS_LAST_H_
#define REPRISE_INCLUDE_REPRISE_CHANNELS_LAST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise {

// Whether an NCHW convolutional network runs channels-last (NHWC) inside, where cuDNN's
// tensor-core convolutions are several times faster. Inputs, parameter names and shapes
// (GetParameter, SaveWeights, LoadWeights) and fetched values stay as the graph declares them;
// results differ from the NCHW run only by floating-point reassociation.
enum class ChannelsLast : uint8_t {
  kAuto,  // On when the graph has an NCHW float32 convolution.
  kOn,    // On whenever the graph has an NCHW image op (convolution, batch norm, pooling).
  kOff,   // Every op runs in the layout the graph gives it.
};
absl::string_view ChannelsLastName(ChannelsLast mode);  // "auto", "on", "off"
// InvalidArgument naming the text and the known names.
absl::StatusOr<ChannelsLast> ParseChannelsLast(absl::string_view name);

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_CHANNELS_LAST_H_
