// BucketedTrainer: one model trained at a declared set of batch sizes (shape buckets), with one
// captured step per bucket. The buckets share one arena: one set of parameters, optimizer state,
// batch-norm statistics and step counter, which every bucket's step reads and updates, so steps of
// any buckets in any order continue one training run; and one region for inputs and activations,
// as large as the largest bucket needs, which the buckets reuse in turn (their steps run one
// after another on one stream). Three buckets take little more memory than the largest alone.
//
//   auto build = [](int64_t batch) -> absl::StatusOr<reprise::BucketModel> {
//     ... build the model for `batch`, its loss nn::MaskedSoftmaxCrossEntropy(g, logits, labels)
//     return reprise::BucketModel{std::move(graph), loss};
//   };
//   ASSIGN_OR_RETURN(auto trainer, reprise::BucketedTrainer::Create(build, {32, 64, 128}, {}));
//   ASSIGN_OR_RETURN(int64_t bucket, trainer->PadToBucket(rows));  // 50 rows -> 64
//   ASSIGN_OR_RETURN(auto x, reprise::PadRows(features, rows, bucket));
//   ASSIGN_OR_RETURN(auto y, reprise::PadRows(labels, rows, bucket, reprise::nn::kPaddingLabel));
//   RETURN_IF_ERROR(trainer->SetInput("features", x));  // 64 rows: bucket 64's step.
//   RETURN_IF_ERROR(trainer->SetInput("labels", y));
//   RETURN_IF_ERROR(trainer->Step());
#ifndef REPRISE_INCLUDE_REPRISE_BUCKETED_TRAINER_H_
#define REPRISE_INCLUDE_REPRISE_BUCKETED_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"

namespace reprise {

class BucketSelector;

// One bucket's model: the graph at that batch size and its loss.
struct BucketModel {
  Graph graph;
  Value loss;
};
// Builds the model for one batch size. Every bucket's graph must have the same parameters and
// state with the same shapes; inputs may differ in size.
using BucketBuilder = std::function<absl::StatusOr<BucketModel>(int64_t batch)>;

// How the shared arena is laid out (src/passes/bucket_plan.h), in bytes.
struct BucketMemory {
  int64_t arena_bytes = 0;          // The one arena of all buckets.
  int64_t shared_bytes = 0;         // Parameters and state, shared by every bucket.
  int64_t private_bytes = 0;        // Each bucket's own constants and kept values, summed.
  int64_t overlap_bytes = 0;        // Inputs and activations: the largest bucket's.
  int64_t largest_alone_bytes = 0;  // The arena the largest bucket would need alone.
};

// Every bucket's report (its captured graph, replays, captures and instantiations) and the arena.
struct BucketedReport {
  struct Bucket {
    int64_t batch = 0;
    TrainerReport report;  // Its graph is named "step[batch=N]".
  };
  std::vector<Bucket> buckets;  // By ascending batch.
  BucketMemory memory;
  std::string ToText() const;
  std::string ToJson() const;
};

class BucketedTrainer {
 public:
  // Builds one training step per batch size in `batches` (distinct, positive; any order) from
  // `build`, with `options` for all (TrainOptions::fetch must be empty: its values belong to one
  // graph), and lays them out in one arena. InvalidArgument for bad batches, for buckets whose
  // parameters or state differ in name or shape (both named, with the buckets), for inputs that
  // differ in name between buckets, or for an input whose size changes between some buckets but
  // not others; the builder's and Trainer::Create's errors, prefixed with the bucket.
  static absl::StatusOr<std::unique_ptr<BucketedTrainer>> Create(const BucketBuilder& build,
                                                                 absl::Span<const int64_t> batches,
                                                                 const TrainOptions& options);
  ~BucketedTrainer();
  BucketedTrainer(const BucketedTrainer&) = delete;
  BucketedTrainer& operator=(const BucketedTrainer&) = delete;

  const std::vector<int64_t>& batches() const;  // Ascending.
  // The bucket the next Step() runs: the last one bound or selected (first: the smallest).
  int64_t batch() const;

  // The smallest bucket that holds `rows` rows. OutOfRange, listing the buckets, when `rows` is
  // more than the largest; InvalidArgument when it is not positive.
  absl::StatusOr<int64_t> PadToBucket(int64_t rows) const;
  // Makes `batch`'s bucket the one the next Step() runs. InvalidArgument, listing the buckets,
  // for a batch size that is no bucket.
  absl::Status SelectBucket(int64_t batch);

  // Binds the next step's value of an input. An input whose size differs between buckets (a
  // batch) selects the bucket whose size `data` has; InvalidArgument, listing every bucket's size,
  // when none has it (pad with PadToBucket and PadRows), or when another input was bound for
  // another bucket since the last Step(). An input of the same size in every bucket (a scalar such
  // as the learning rate) is bound for every bucket. Otherwise as Trainer::SetInput.
  absl::Status SetInput(absl::string_view name, absl::Span<const float> data);
  absl::Status SetInput(absl::string_view name, absl::Span<const int32_t> data);
  absl::Status SetLearningRate(float learning_rate);  // For every bucket.

  // One step of the selected bucket: a replay of its captured graph. Asynchronous.
  absl::Status Step();
  absl::Status Synchronize();
  absl::StatusOr<float> Loss();  // Of the last step, whichever bucket ran it.

  // The parameters are shared: these read and write every bucket's.
  std::vector<std::string> ParameterNames() const;
  absl::StatusOr<std::vector<float>> GetParameter(absl::string_view name);
  absl::Status SetParameter(absl::string_view name, absl::Span<const float> data);
  absl::Status SaveWeights(const std::string& path);
  absl::Status LoadWeights(const std::string& path, const LoadWeightsOptions& options = {});

  // One bucket's own Trainer, for what this class does not forward (Read, Verify, TimeSteps,
  // ProfileLaunches, stats): its steps are steps of the same training run and use the same
  // arena. InvalidArgument, listing the buckets, for a batch size that is no bucket.
  absl::StatusOr<Trainer*> Bucket(int64_t batch);

  BucketMemory memory() const { return memory_; }
  BucketedReport Report() const;

 private:
  explicit BucketedTrainer(std::unique_ptr<BucketSelector> selector);
  template <typename T>
  absl::Status SetInputOf(absl::string_view name, absl::Span<const T> data);

  std::unique_ptr<BucketSelector> selector_;  // Which bucket runs next (src/api/bucket_select.h).
  std::vector<std::unique_ptr<Trainer>> buckets_;  // In ascending batch order.
  BucketMemory memory_;
};

// `data` holds `rows` rows (data.size() / rows values each); returns them followed by
// bucket - rows rows of `fill`. InvalidArgument when data.size() is no multiple of `rows` or
// `bucket` < `rows`. Pad the labels with nn::kPaddingLabel and end the model in
// nn::MaskedSoftmaxCrossEntropy: the padded rows then change neither the loss nor a gradient, and
// the padded batch trains as the batch alone. (nn::SoftmaxCrossEntropy averages over every row.)
absl::StatusOr<std::vector<float>> PadRows(absl::Span<const float> data, int64_t rows,
                                           int64_t bucket, float fill = 0);
absl::StatusOr<std::vector<int32_t>> PadRows(absl::Span<const int32_t> data, int64_t rows,
                                             int64_t bucket, int32_t fill = 0);

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_BUCKETED_TRAINER_H_
