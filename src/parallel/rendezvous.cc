#include "src/parallel/rendezvous.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise::parallel {
namespace {

// What each rank tells the others; fixed size so one all-gather carries it.
struct RankCard {
  char host[256];
  int32_t devices;
  char error[512];  // Empty when the rank can take part.
};

// Copies `text` into `out`, cut to fit with a terminating zero.
template <size_t N>
void Put(absl::string_view text, char (&out)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// What rank 0 tells the others: the id, or why there is none.
struct IdCard {
  char ok;
  char id[sizeof(DataParallelId::bytes)];
  char error[512];
};

}  // namespace

absl::StatusOr<MpiRank> Rendezvous(RendezvousTransport& transport,
                                   const RendezvousOptions& options) {
  const int rank = transport.rank(), size = transport.size();
  // Every rank meets the others whatever its own state, so that none waits for a rank that left.
  RankCard mine = {};
  Put(options.host_name, mine.host);
  mine.devices = options.visible_devices;
  if (!options.local_error.ok()) Put(options.local_error.ToString(), mine.error);
  std::vector<RankCard> cards(size);
  RETURN_IF_ERROR(transport.AllGather(&mine, sizeof(mine), cards.data()));
  for (int r = 0; r < size; ++r) {
    if (cards[r].error[0] != '\0') {
      return absl::FailedPreconditionError(absl::StrCat("data parallel: rank ", r, " on host '",
                                                        cards[r].host,
                                                        "' cannot take part: ", cards[r].error));
    }
  }

  // Every rank checks every host, so that all fail alike rather than some waiting in NCCL.
  std::map<std::string, std::pair<int, int>> hosts;  // Host -> (ranks, fewest devices seen).
  int local_rank = 0;
  for (int r = 0; r < size; ++r) {
    const std::string host(cards[r].host);
    auto [it, added] = hosts.try_emplace(host, 0, cards[r].devices);
    if (r < rank && host == mine.host) ++local_rank;
    ++it->second.first;
    it->second.second = std::min(it->second.second, static_cast<int>(cards[r].devices));
  }
  for (const auto& [host, counts] : hosts) {
    if (counts.first > counts.second) {
      return absl::FailedPreconditionError(
          absl::StrCat("data parallel: host '", host, "' runs ", counts.first, " ranks but has ",
                       counts.second, " GPU", counts.second == 1 ? "" : "s",
                       counts.second == 0 ? " (CUDA sees no device there)" : "",
                       ": start at most one rank per GPU"));
    }
  }

  IdCard card = {};
  if (rank == 0) {
    absl::StatusOr<DataParallelId> id =
        options.new_id ? options.new_id()
                       : absl::InvalidArgumentError("RendezvousOptions::new_id is not set");
    card.ok = id.ok();
    if (id.ok()) {
      std::memcpy(card.id, id->bytes.data(), sizeof(card.id));
    } else {
      Put(id.status().ToString(), card.error);
    }
  }
  RETURN_IF_ERROR(transport.BroadcastFromRoot(&card, sizeof(card)));
  if (!card.ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("data parallel: rank 0 could not make the job's id: ", card.error));
  }
  MpiRank out;
  out.data_parallel.rank = rank;
  out.data_parallel.world_size = size;
  out.data_parallel.bucket_bytes = options.bucket_bytes;
  std::memcpy(out.data_parallel.id.bytes.data(), card.id, sizeof(card.id));
  out.device = local_rank;
  return out;
}

}  // namespace reprise::parallel
