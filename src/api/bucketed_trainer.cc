// BucketedTrainer: one Trainer per bucket, planned apart, laid out in one arena
// (passes::PlaceBuckets) and started on one set of device resources (Trainer::Impl::DeviceShare).
#include "reprise/bucketed_trainer.h"

#include <algorithm>
#include <new>
#include <optional>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/api/bucket_select.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/bucket_plan.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

absl::Status InBucket(int64_t batch, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("bucket batch ", batch, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BucketedTrainer>> BucketedTrainer::Create(
    const BucketBuilder& build, absl::Span<const int64_t> batches, const TrainOptions& options) {
  ASSIGN_OR_RETURN(BucketSelector selector, BucketSelector::Create(batches));
  const std::vector<int64_t> sorted = selector.batches();
  if (!options.fetch.empty()) {
    return absl::InvalidArgumentError(
        "TrainOptions::fetch names values of one graph, and a BucketedTrainer has one graph per "
        "bucket: fetch through Bucket(batch) of a Trainer built alone");
  }
  if (options.parallel.data_parallel.has_value()) {
    // Each bucket's step would join the job as the same rank with its own collectives.
    return absl::UnimplementedError(
        "TrainOptions::parallel.data_parallel with shape buckets is not implemented: a "
        "BucketedTrainer's "
        "buckets would each join the job as the same rank");
  }
  std::vector<std::unique_ptr<Trainer::Impl>> impls;
  std::vector<std::vector<std::pair<std::string, int64_t>>> inputs;  // Per bucket.
  for (int64_t batch : sorted) {
    absl::StatusOr<BucketModel> model = build(batch);
    if (!model.ok()) return InBucket(batch, model.status());
    absl::StatusOr<std::unique_ptr<Trainer::Impl>> impl =
        Trainer::Impl::Prepare(model->graph, model->loss, options);
    if (!impl.ok()) return InBucket(batch, impl.status());
    // Every input of the plan: the model's own and the optimizer's scalars.
    std::vector<std::pair<std::string, int64_t>>& sizes = inputs.emplace_back();
    const Graph& g = (*impl)->plan().graph();
    for (int32_t id : g.NodesOf("input")) {
      sizes.emplace_back(g.node(id).name, g.node(id).outputs[0].NumElements());
    }
    std::sort(sizes.begin(), sizes.end());
    impls.push_back(*std::move(impl));
  }
  // Inputs: the same names in every bucket; a size that changes changes in every bucket.
  for (size_t k = 0; k < sorted.size(); ++k) {
    if (inputs[k].size() != inputs[0].size() ||
        !std::equal(inputs[k].begin(), inputs[k].end(), inputs[0].begin(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      auto names = [](const std::vector<std::pair<std::string, int64_t>>& list) {
        return absl::StrJoin(list, ", ", [](std::string* out, const auto& p) { *out += p.first; });
      };
      return absl::InvalidArgumentError(
          absl::StrCat("buckets must have the same inputs: batch ", sorted[0], " has ",
                       names(inputs[0]), "; batch ", sorted[k], " has ", names(inputs[k])));
    }
  }
  for (size_t i = 0; i < inputs[0].size(); ++i) {
    std::vector<int64_t> elements;
    for (size_t k = 0; k < sorted.size(); ++k) elements.push_back(inputs[k][i].second);
    RETURN_IF_ERROR(selector.AddInput(inputs[0][i].first, std::move(elements)));
  }
  auto trainer = std::unique_ptr<BucketedTrainer>(
      new BucketedTrainer(std::make_unique<BucketSelector>(std::move(selector))));
  // One arena: shared parameters and state, private kept tensors, overlapped transients.
  std::vector<passes::BucketPlan> plans;
  int workspace_lanes = 1;
  size_t workspace_reserve = 0;
  for (size_t k = 0; k < sorted.size(); ++k) {
    plans.push_back({absl::StrCat("bucket batch ", sorted[k]), &impls[k]->plan().graph(),
                     &impls[k]->mutable_memory(), impls[k]->weight_names()});
    workspace_lanes = std::max(workspace_lanes, impls[k]->WorkspaceLanes());
    workspace_reserve = std::max(workspace_reserve, impls[k]->WorkspaceReserve());
  }
  ASSIGN_OR_RETURN(const passes::BucketArena arena, passes::PlaceBuckets(plans));
  trainer->memory_ = {arena.arena_bytes, arena.shared_bytes, arena.private_bytes,
                      arena.overlap_bytes, arena.largest_alone_bytes};
  ASSIGN_OR_RETURN(
      const Trainer::Impl::DeviceShare share,
      impls.back()->NewDeviceShare(arena.arena_bytes, workspace_lanes, workspace_reserve));
  for (size_t k = 0; k < sorted.size(); ++k) {
    // Each bucket writes the same initial parameters and state (the seed and the names fix them).
    if (absl::Status started = impls[k]->Start(&share); !started.ok()) {
      return InBucket(sorted[k], started);
    }
    trainer->buckets_.push_back(std::unique_ptr<Trainer>(new Trainer(std::move(impls[k]))));
  }
  return trainer;
}

BucketedTrainer::BucketedTrainer(std::unique_ptr<BucketSelector> selector)
    : selector_(std::move(selector)) {}
BucketedTrainer::~BucketedTrainer() = default;

const std::vector<int64_t>& BucketedTrainer::batches() const { return selector_->batches(); }
int64_t BucketedTrainer::batch() const { return selector_->batches()[selector_->next()]; }

absl::StatusOr<int64_t> BucketedTrainer::PadToBucket(int64_t rows) const {
  return selector_->PadToBucket(rows);
}

absl::Status BucketedTrainer::SelectBucket(int64_t batch) {
  ASSIGN_OR_RETURN(const int k, selector_->Index(batch));
  selector_->Select(k);
  return absl::OkStatus();
}

template <typename T>
absl::Status BucketedTrainer::SetInputOf(absl::string_view name, absl::Span<const T> data) {
  ASSIGN_OR_RETURN(const int bucket,
                   selector_->BucketOfInput(name, static_cast<int64_t>(data.size())));
  if (bucket < 0) {
    // One size in every bucket (a scalar), or an unknown name (the Trainer's NotFound).
    for (const std::unique_ptr<Trainer>& each : buckets_) {
      RETURN_IF_ERROR(each->SetInput(name, data));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(buckets_[bucket]->SetInput(name, data));
  selector_->Bound(name, bucket);
  return absl::OkStatus();
}

absl::Status BucketedTrainer::SetInput(absl::string_view name, absl::Span<const float> data) {
  return SetInputOf(name, data);
}
absl::Status BucketedTrainer::SetInput(absl::string_view name, absl::Span<const int32_t> data) {
  return SetInputOf(name, data);
}
absl::Status BucketedTrainer::SetLearningRate(float learning_rate) {
  return SetInput(autodiff::kLearningRate, absl::MakeConstSpan(&learning_rate, 1));
}

absl::Status BucketedTrainer::Step() {
  RETURN_IF_ERROR(buckets_[selector_->next()]->Step());
  selector_->Stepped();
  return absl::OkStatus();
}

// The buckets share one stream: waiting for any waits for all.
absl::Status BucketedTrainer::Synchronize() { return buckets_[selector_->next()]->Synchronize(); }

absl::StatusOr<float> BucketedTrainer::Loss() {
  if (selector_->last() < 0) return absl::FailedPreconditionError("no step has run yet");
  return buckets_[selector_->last()]->Loss();
}

std::vector<std::string> BucketedTrainer::ParameterNames() const {
  return buckets_[0]->ParameterNames();
}
absl::StatusOr<std::vector<float>> BucketedTrainer::GetParameter(absl::string_view name) {
  return buckets_[0]->GetParameter(name);
}
absl::Status BucketedTrainer::SetParameter(absl::string_view name, absl::Span<const float> data) {
  return buckets_[0]->SetParameter(name, data);
}
absl::Status BucketedTrainer::SaveWeights(const std::string& path) {
  return buckets_[0]->SaveWeights(path);
}
absl::Status BucketedTrainer::LoadWeights(const std::string& path,
                                          const LoadWeightsOptions& options) {
  return buckets_[0]->LoadWeights(path, options);
}

absl::StatusOr<Trainer*> BucketedTrainer::Bucket(int64_t batch) {
  ASSIGN_OR_RETURN(const int k, selector_->Index(batch));
  return buckets_[k].get();
}

BucketedReport BucketedTrainer::Report() const {
  BucketedReport report;
  report.memory = memory_;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    BucketedReport::Bucket& bucket = report.buckets.emplace_back();
    bucket.batch = batches()[k];
    bucket.report = buckets_[k]->Report();
    for (TrainerReport::CapturedGraph& graph : bucket.report.graphs) {
      graph.name = absl::StrCat(graph.name, "[batch=", bucket.batch, "]");
    }
  }
  return report;
}

namespace {

template <typename T>
absl::StatusOr<std::vector<T>> Pad(absl::Span<const T> data, int64_t rows, int64_t bucket, T fill) {
  if (rows < 1 || data.size() % rows != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(data.size(), " values are no whole number of ", rows, " rows"));
  }
  if (bucket < rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot pad ", rows, " rows to a bucket of ", bucket));
  }
  const int64_t per_row = static_cast<int64_t>(data.size()) / rows;
  const std::optional<int64_t> total = CheckedMul(bucket, per_row);
  std::vector<T> out;
  if (!total.has_value() || static_cast<uint64_t>(*total) > out.max_size()) {
    return absl::InvalidArgumentError(absl::StrCat("padding ", rows, " rows of ", per_row,
                                                   " values to a bucket of ", bucket,
                                                   " rows needs more values than fit in memory"));
  }
  try {
    out.reserve(*total);
  } catch (const std::bad_alloc&) {  // A Status-returning function lets no exception out.
    return absl::ResourceExhaustedError(absl::StrCat("padding ", rows, " rows to a bucket of ",
                                                     bucket, " rows: cannot allocate ", *total,
                                                     " values"));
  } catch (const std::length_error&) {
    return absl::InvalidArgumentError(absl::StrCat("padding ", rows, " rows to a bucket of ",
                                                   bucket, " rows: ", *total,
                                                   " values are more than a vector holds"));
  }
  out.assign(data.begin(), data.end());
  out.resize(*total, fill);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<float>> PadRows(absl::Span<const float> data, int64_t rows,
                                           int64_t bucket, float fill) {
  return Pad(data, rows, bucket, fill);
}
absl::StatusOr<std::vector<int32_t>> PadRows(absl::Span<const int32_t> data, int64_t rows,
                                             int64_t bucket, int32_t fill) {
  return Pad(data, rows, bucket, fill);
}

}  // namespace reprise
