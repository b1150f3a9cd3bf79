// reprise.data: llm.c's token shards, the shuffled training loader (reading on its own thread) and
// the sequential validation reader (reprise/data.h), with NumPy arrays for tokens and batches.
#include "reprise/data.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "python/src/arrays.h"
#include "python/src/bindings.h"
#include "python/src/errors.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace reprise::python {
namespace {

using data::SequentialTokenReader;
using data::TokenLoader;
using data::TokenLoaderOptions;
using data::TokenShard;

template <typename T>
using Owned = nb::ndarray<nb::numpy, T>;

// One batch as two new [B, T] int32 arrays.
struct Batch {
  std::vector<int32_t> inputs, targets;
  explicit Batch(int64_t tokens)
      : inputs(static_cast<size_t>(tokens)), targets(static_cast<size_t>(tokens)) {}
  std::tuple<Owned<int32_t>, Owned<int32_t>> Release(const TokenLoaderOptions& o) {
    const std::vector<int64_t> shape = {o.batch_size, o.sequence_length};
    return {OwnedArray(std::move(inputs), shape), OwnedArray(std::move(targets), shape)};
  }
};

using Out = nb::ndarray<int32_t, nb::c_contig, nb::device::cpu>;

// `array` (a trainer's input_buffer(), or NumPy) as a span, if it is a writable, C-contiguous
// int32 host array; else a TypeError that says what it is. Its size is checked by the C++ Next,
// which names what it expected.
absl::Span<int32_t> SpanOf(nb::handle array, const char* which) {
  Out out;
  if (!nb::try_cast(array, out, /*convert=*/false)) {
    nb::ndarray<nb::ro> any;
    std::string what = nb::type_name(array.type()).c_str();
    if (nb::try_cast(array, any, false)) {
      what = any.dtype() == nb::dtype<int32_t>()
                 ? "an int32 array that is read-only, strided or not in host memory"
                 : absl::StrCat("an array of ", DTypeText(any.dtype()));
    }
    throw nb::type_error(absl::StrCat("next_into: ", which,
                                      " must be a writable, C-contiguous int32 host array; got ",
                                      what)
                             .c_str());
  }
  return absl::Span<int32_t>(out.data(), out.size());
}

// Writes the reader's next batch into the two arrays. TokenLoader::Next serialises its callers,
// so it runs without the GIL (it may wait for the disk); a SequentialTokenReader is not
// thread-safe, so the GIL serialises the calls into it.
template <typename Reader>
void NextInto(Reader& reader, nb::handle inputs, nb::handle targets) {
  const absl::Span<int32_t> in = SpanOf(inputs, "inputs"), out = SpanOf(targets, "targets");
  absl::Status status;
  if constexpr (std::is_same_v<Reader, TokenLoader>) {
    nb::gil_scoped_release release;
    status = reader.Next(in, out);
  } else {
    status = reader.Next(in, out);
  }
  ThrowIfError(status);
}

// The TokenLoader and its options (for the batches' shape).
struct PyTokenLoader {
  std::unique_ptr<TokenLoader> loader;
  TokenLoaderOptions options;

  std::tuple<Owned<int32_t>, Owned<int32_t>> Next() {
    Batch batch(loader->tokens_per_batch());
    absl::Status status;
    {
      nb::gil_scoped_release release;  // Waits for the reading thread if the disk is behind.
      status = loader->Next(absl::MakeSpan(batch.inputs), absl::MakeSpan(batch.targets));
    }
    ThrowIfError(status);
    return batch.Release(options);
  }
};

// The SequentialTokenReader and its options; Python's iteration ends at the last batch. Its calls
// keep the GIL, which serialises them (the reader is not thread-safe).
struct PySequentialReader {
  std::unique_ptr<SequentialTokenReader> reader;
  TokenLoaderOptions options;

  std::tuple<Owned<int32_t>, Owned<int32_t>> Next(bool stop_iteration) {
    Batch batch(int64_t{options.batch_size} * options.sequence_length);
    const absl::Status status =
        reader->Next(absl::MakeSpan(batch.inputs), absl::MakeSpan(batch.targets));
    if (stop_iteration && absl::IsOutOfRange(status)) throw nb::stop_iteration();
    ThrowIfError(status);
    return batch.Release(options);
  }
};

TokenLoaderOptions Options(std::vector<std::string> shards, int batch_size, int sequence_length,
                           int vocab_size, uint64_t seed, int prefetch, int64_t first_batch,
                           bool check_all_tokens) {
  return {.shards = std::move(shards),
          .batch_size = batch_size,
          .sequence_length = sequence_length,
          .vocab_size = vocab_size,
          .seed = seed,
          .prefetch = prefetch,
          .first_batch = first_batch,
          .check_all_tokens = check_all_tokens};
}

// Copies n token ids of type T, each checked to fit uint16.
template <typename T>
std::vector<uint16_t> CheckedIds(const std::string& path, const void* data, size_t n) {
  const T* values = static_cast<const T*>(data);
  std::vector<uint16_t> ids(n);
  for (size_t i = 0; i < n; ++i) {
    // Widened so that 8-bit ids print as numbers, not characters.
    using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    const Wide v = values[i];
    bool outside = v > 0xffff;
    if constexpr (std::is_signed_v<T>) outside = outside || v < 0;
    if (outside) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("write_token_shard('", path, "'): token ", i, " is ", v,
                       ", outside the uint16 ids [0, 65535] a shard holds")));
    }
    ids[i] = static_cast<uint16_t>(v);
  }
  return ids;
}

// Token ids from any 1-D integer host array, each checked to fit uint16 (NumPy's casts would wrap
// -1 to 65535 without a word).
std::vector<uint16_t> TokenIds(const std::string& path, nb::object tokens) {
  nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> array;
  if (!nb::try_cast(tokens, array) || array.ndim() != 1) {
    throw nb::type_error(absl::StrCat("write_token_shard('", path,
                                      "'): expected a 1-D NumPy array of token ids, got ",
                                      nb::type_name(tokens.type()).c_str())
                             .c_str());
  }
  const nb::dlpack::dtype dtype = array.dtype();
  const bool is_int = dtype.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
  const bool is_uint = dtype.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt);
  const void* data = array.data();
  const size_t n = array.size();
  if ((is_int || is_uint) && dtype.lanes == 1) {
    switch (dtype.bits) {
      case 8:
        return is_int ? CheckedIds<int8_t>(path, data, n) : CheckedIds<uint8_t>(path, data, n);
      case 16:
        return is_int ? CheckedIds<int16_t>(path, data, n) : CheckedIds<uint16_t>(path, data, n);
      case 32:
        return is_int ? CheckedIds<int32_t>(path, data, n) : CheckedIds<uint32_t>(path, data, n);
      case 64:
        return is_int ? CheckedIds<int64_t>(path, data, n) : CheckedIds<uint64_t>(path, data, n);
    }
  }
  ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
      "write_token_shard('", path, "'): token ids must be integers, got ", DTypeText(dtype))));
  return {};
}

void BindShards(nb::module_& d) {
  d.attr("TOKEN_SHARD_MAGIC") = data::kTokenShardMagic;
  d.attr("TOKEN_SHARD_VERSION") = data::kTokenShardVersion;
  d.attr("TOKEN_SHARD_HEADER_BYTES") = data::kTokenShardHeaderBytes;
  nb::class_<TokenShard>(d, "TokenShard",
                         "One open, checked llm.c token shard; reads go to the file.")
      .def_static(
          "open",
          [](const std::string& path, int vocab_size) {
            return ValueOrThrow(TokenShard::Open(path, vocab_size));
          },
          "path"_a, "vocab_size"_a,
          "Opens and checks a shard: a regular file, magic, version, and a size that matches its "
          "header. Token ids must be below vocab_size (1 to 65536).")
      .def_prop_ro("path", &TokenShard::path)
      .def_prop_ro("num_tokens", &TokenShard::num_tokens)
      .def_prop_ro("vocab_size", &TokenShard::vocab_size)
      .def("__len__", &TokenShard::num_tokens)
      .def(
          "read",
          [](const TokenShard& shard, int64_t first, int64_t count) {
            if (count < 0) {
              ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
                  "token shard '", shard.path(), "': cannot read ", count, " tokens")));
            }
            // Checked before the buffer is sized: a huge count is refused, not allocated.
            if (first < 0 || count > shard.num_tokens() || first > shard.num_tokens() - count) {
              ThrowIfError(absl::OutOfRangeError(absl::StrCat(
                  "token shard '", shard.path(), "': tokens [", first, ", ", first + count,
                  ") are outside its ", shard.num_tokens(), " tokens")));
            }
            std::vector<uint16_t> tokens(static_cast<size_t>(count));
            absl::Status status;
            {
              nb::gil_scoped_release release;
              status = shard.Read(first, absl::MakeSpan(tokens));
            }
            ThrowIfError(status);
            return OwnedArray(std::move(tokens), {count});
          },
          "first"_a, "count"_a,
          "Tokens [first, first + count) as a uint16 array, each checked against the vocabulary.")
      .def(
          "check_all_tokens",
          [](const TokenShard& shard) {
            absl::Status status;
            {
              nb::gil_scoped_release release;
              status = shard.CheckAllTokens();
            }
            ThrowIfError(status);
          },
          "Reads the whole shard and checks every token id.");
  d.def(
      "write_token_shard",
      [](const std::string& path, nb::object tokens) {
        const std::vector<uint16_t> ids = TokenIds(path, std::move(tokens));
        ThrowIfError(data::WriteTokenShard(path, ids));
      },
      "path"_a, "tokens"_a,
      "Writes a 1-D integer array of token ids (each in [0, 65535]) as a token shard, through a "
      "temporary file renamed into place.");
}

void BindLoaders(nb::module_& d) {
  nb::class_<PyTokenLoader>(d, "TokenLoader",
                            "Shuffled training batches from token shards, read ahead on a "
                            "background thread; deterministic from the seed. Iterating never "
                            "ends: epochs follow each other.")
      .def(
          "__init__",
          [](PyTokenLoader* self, std::vector<std::string> shards, int batch_size,
             int sequence_length, int vocab_size, uint64_t seed, int prefetch, int64_t first_batch,
             bool check_all_tokens) {
            TokenLoaderOptions options =
                Options(std::move(shards), batch_size, sequence_length, vocab_size, seed, prefetch,
                        first_batch, check_all_tokens);
            absl::StatusOr<std::unique_ptr<TokenLoader>> loader;
            {
              nb::gil_scoped_release release;  // Opens (and maybe scans) every shard.
              loader = TokenLoader::Create(options);
            }
            new (self) PyTokenLoader{ValueOrThrow(std::move(loader)), std::move(options)};
          },
          "shards"_a, "batch_size"_a, "sequence_length"_a, "vocab_size"_a, "seed"_a = 0,
          "prefetch"_a = 2, "first_batch"_a = 0, "check_all_tokens"_a = false)
      .def("next", &PyTokenLoader::Next,
           "The next batch: (inputs, targets), each int32 [batch_size, sequence_length].")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &PyTokenLoader::Next)
      .def(
          "next_into",
          [](PyTokenLoader& l, nb::handle inputs, nb::handle targets) {
            NextInto(*l.loader, inputs, targets);
          },
          "inputs"_a, "targets"_a,
          "Writes the next batch into two writable, C-contiguous int32 host arrays of "
          "batch_size * sequence_length values each, e.g. a trainer's input_buffer('tokens') "
          "and input_buffer('targets'): no copy beyond the loader's own.")
      .def_prop_ro("windows_per_epoch",
                   [](const PyTokenLoader& l) { return l.loader->windows_per_epoch(); })
      .def_prop_ro(
          "next_batch", [](const PyTokenLoader& l) { return l.loader->next_batch(); },
          "The index (over all epochs) of the batch the next call returns.")
      .def_prop_ro("epoch", [](const PyTokenLoader& l) { return l.loader->epoch(); })
      .def_prop_ro("tokens_per_batch",
                   [](const PyTokenLoader& l) { return l.loader->tokens_per_batch(); });
  nb::class_<PySequentialReader>(d, "SequentialTokenReader",
                                 "Validation batches: every shard's windows in file order, "
                                 "unshuffled. Iterating runs to the last whole batch; rewind() "
                                 "starts again.")
      .def(
          "__init__",
          [](PySequentialReader* self, std::vector<std::string> shards, int batch_size,
             int sequence_length, int vocab_size, bool check_all_tokens) {
            TokenLoaderOptions options = Options(std::move(shards), batch_size, sequence_length,
                                                 vocab_size, 0, 1, 0, check_all_tokens);
            absl::StatusOr<std::unique_ptr<SequentialTokenReader>> reader;
            {
              nb::gil_scoped_release release;
              reader = SequentialTokenReader::Create(options);
            }
            new (self) PySequentialReader{ValueOrThrow(std::move(reader)), std::move(options)};
          },
          "shards"_a, "batch_size"_a, "sequence_length"_a, "vocab_size"_a,
          "check_all_tokens"_a = false)
      .def_prop_ro("num_batches",
                   [](const PySequentialReader& r) { return r.reader->num_batches(); })
      .def(
          "next", [](PySequentialReader& r) { return r.Next(/*stop_iteration=*/false); },
          "The next batch (inputs, targets); ValueError after the last one (until rewind()).")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", [](PySequentialReader& r) { return r.Next(/*stop_iteration=*/true); })
      .def(
          "next_into",
          [](PySequentialReader& r, nb::handle inputs, nb::handle targets) {
            NextInto(*r.reader, inputs, targets);
          },
          "inputs"_a, "targets"_a,
          "Writes the next batch into two writable int32 host arrays, as TokenLoader.next_into.")
      .def("rewind", [](PySequentialReader& r) { r.reader->Rewind(); });
}

}  // namespace

void BindData(nb::module_& m) {
  nb::module_ d = m.def_submodule(
      "data", "llm.c token shards and the loaders that cut them into language-model batches.");
  BindShards(d);
  BindLoaders(d);
}

}  // namespace reprise::python
