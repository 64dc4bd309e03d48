// The launch planner (launch_plan.h): one wave of threads over the device, each thread with at
// least max(kMinElementsPerThread, one vector) elements; measured choices in
// benchmarks/NOTES.md.
#include "launch_plan.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace jax_argreduce {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// PlanOptions packed in one word: bit 0 pdl, bits 1-2 the merge mode, bits 3-4 the forced
// path, bits 5-12 the team, bits 13-24 the block's threads.
unsigned Pack(const PlanOptions& options) {
  return (options.pdl ? 1u : 0u) | (static_cast<unsigned>(options.merge) << 1) |
         (static_cast<unsigned>(options.path) << 3) |
         (static_cast<unsigned>(options.team) << 5) |
         (static_cast<unsigned>(options.block) << 13);
}
std::atomic<unsigned> g_options{Pack(PlanOptions())};

}  // namespace

PlanOptions CurrentPlanOptions() {
  const unsigned bits = g_options.load(std::memory_order_relaxed);
  PlanOptions options;
  options.pdl = (bits & 1u) != 0;
  options.merge = static_cast<MergeMode>((bits >> 1) & 3u);
  options.path = static_cast<ForcedPath>((bits >> 3) & 3u);
  options.team = static_cast<int>((bits >> 5) & 0xFFu);
  options.block = static_cast<int>((bits >> 13) & 0xFFFu);
  return options;
}

void SetPlanOptions(const PlanOptions& options) {
  g_options.store(Pack(options), std::memory_order_relaxed);
}

const char* MergeModeName(MergeMode mode) {
  switch (mode) {
    case MergeMode::kAuto: return "auto";
    case MergeMode::kKernel: return "kernel";
    case MergeMode::kLastBlock: return "last_block";
  }
  return "?";
}

const char* ForcedPathName(ForcedPath path) {
  switch (path) {
    case ForcedPath::kAuto: return "auto";
    case ForcedPath::kTeam: return "team";
    case ForcedPath::kBlock: return "block";
    case ForcedPath::kSplit: return "split";
  }
  return "?";
}

const char* PathName(Path path) {
  switch (path) {
    case Path::kTeam: return "team";
    case Path::kBlock: return "block";
    case Path::kSplit: return "split";
  }
  return "?";
}

LaunchPlan PlanRowReduce(const DeviceCaps& caps, int64_t rows, int64_t cols, int elem_bytes,
                         int key_bytes, const PlanOptions& options, bool compute_bound,
                         bool graph_captured, int vector_bytes) {
  LaunchPlan plan;
  plan.vector_elements = vector_bytes / elem_bytes;
  const int64_t load_elements = 16 / elem_bytes;  // a load in flight is 16 bytes
  plan.pdl = options.pdl && caps.cc_major >= 9;
  const int64_t sms = std::max(caps.sms, 1);
  const int64_t team_capacity = sms * std::max(caps.team_blocks_per_sm, 1);
  const int64_t per_thread = std::max(kMinElementsPerThread, plan.vector_elements);
  const int64_t useful = CeilDiv(cols, per_thread);  // threads one row can feed
  const int64_t fair = std::max<int64_t>(1, team_capacity * kBlockThreads / rows);
  const int64_t threads_per_row = std::min(useful, fair);

  const int64_t block_round = int64_t{kBlockThreads} * kBlockInFlight * load_elements;
  const bool fills_block_round = !compute_bound && cols >= block_round;  // one round's loads
  const bool team_path =
      options.path == ForcedPath::kAuto
          ? threads_per_row < (fills_block_round ? kLongRowBlockMinThreads : kBlockPathMinThreads)
          : options.path == ForcedPath::kTeam;
  if (team_path) {
    int team = 1;
    while (team * 2 <= std::min<int64_t>(threads_per_row, kWarpSize)) team *= 2;
    const int64_t row_bytes = cols * elem_bytes;
    if (!compute_bound && threads_per_row >= kWideTeamMinThreads &&
        row_bytes >= kWideTeamMinRowBytes &&
        (row_bytes >= 2 * kWideTeamMinRowBytes ||
         threads_per_row >= kWideTeamShortRowMinThreads)) {
      team = 2 * kWarpSize;
    }
    if (options.team > 0) {  // forced (benchmarks); wider than a warp for order keys only
      team = std::min(options.team, compute_bound ? kWarpSize : kMaxTeam);
    }
    plan.path = Path::kTeam;
    plan.team = team;
    // One wave of resident blocks at most; warps loop over the remaining rows.
    plan.grid = std::max<int64_t>(1, std::min(CeilDiv(rows * team, kBlockThreads), team_capacity));
    plan.row_step = static_cast<int64_t>(team) * kInFlight * load_elements;
    return plan;
  }

  // Few wide rows (up to one per SM): several blocks per row (the split path; it beat thread
  // block clusters in-chain, NOTES.md try 16). With more rows one block per row already fills
  // the device, and with its deeper unroll (kBlockInFlight) it measured faster (try 5); so
  // does it from half the SMs' count of rows of up to kBlockPerRowMaxRounds rounds (order
  // keys; launch_plan.h).
  const bool block_per_row =
      !compute_bound && 2 * rows >= sms && cols <= kBlockPerRowMaxRounds * block_round;
  if (options.path == ForcedPath::kSplit ||
      (options.path == ForcedPath::kAuto && rows <= sms && !block_per_row)) {
    // Split path: enough blocks that one load round covers the row, no more than one wave of
    // the split kernel holds, and within the workspace.
    const int64_t per_block_round =
        static_cast<int64_t>(kBlockThreads) *
        (compute_bound ? plan.vector_elements : kInFlight * load_elements);
    const int64_t split_capacity = sms * std::max(caps.split_blocks_per_sm, 1);
    const int64_t parts = std::min({CeilDiv(cols, per_block_round),
                                    std::max<int64_t>(1, split_capacity / rows),
                                    std::max<int64_t>(1, kMaxSplitPartials / rows)});
    if (parts >= 2) {
      plan.path = Path::kSplit;
      plan.parts = static_cast<int>(parts);
      plan.grid = rows * parts;
      plan.last_block_merges =
          options.merge == MergeMode::kLastBlock ||
          (options.merge == MergeMode::kAuto && !graph_captured && rows <= kLastBlockMergeMaxRows);
      plan.merge_grid =
          plan.last_block_merges ? 0 : CeilDiv(rows, kBlockThreads / kWarpSize);
      plan.row_step = parts * per_block_round;
      plan.workspace_bytes = static_cast<size_t>(rows * parts) * (key_bytes == 8 ? 16 : 8);
      return plan;
    }
  }

  plan.path = Path::kBlock;
  plan.grid = std::min(rows, sms * std::max(caps.block_blocks_per_sm, 1));
  if (!compute_bound && rows <= sms) {
    // At most one row per SM: rows longer than one round take wider blocks (fewer rounds).
    const bool wide = cols > block_round;
    plan.block = options.block > 0 ? options.block : wide ? kWideBlockThreads : kBlockThreads;
  }
  plan.row_step =
      static_cast<int64_t>(plan.block) * BlockLoadsInFlight(compute_bound) * load_elements;
  return plan;
}

SelectPlan PlanTopK(int64_t rows, int64_t cols, int64_t k, int elem_bytes) {
  SelectPlan plan;
  const int vec = 16 / elem_bytes;  // elements of a 16-byte load
  int per_thread = kSelectMaxElementsPerThread;
  while (per_thread > kSelectMinElementsPerThread &&
         rows * CeilDiv(cols, int64_t{kSelectThreads} * per_thread) < kSelectTargetBlocks) {
    per_thread /= 2;
  }
  per_thread = std::max(per_thread, vec);  // a thread loads whole vectors
  plan.elements_per_thread = per_thread;
  SelectLevel level;
  level.items = cols;
  level.chunk = int64_t{kSelectThreads} * per_thread;
  level.chunks = CeilDiv(cols, level.chunk);
  for (;;) {
    plan.level[plan.levels++] = level;
    if (level.chunks == 1 || plan.levels == kSelectMaxLevels) break;
    SelectLevel next;
    next.items = level.chunks * k;
    next.chunk = kCandidateChunk;
    next.chunks = CeilDiv(next.items, kCandidateChunk);
    level = next;
  }
  // Candidates alternate between two buffers of the workspace, buffer 0 first and then buffer
  // 1 (16-byte aligned): level i writes buffer i % 2, which level i + 1 reads.
  size_t buffer_bytes[2] = {0, 0};
  for (int i = 0; i + 1 < plan.levels; ++i) {
    const size_t bytes = static_cast<size_t>(rows * plan.level[i].chunks * k) * sizeof(uint64_t);
    buffer_bytes[i % 2] = std::max(buffer_bytes[i % 2], bytes);
  }
  const size_t second = (buffer_bytes[0] + 15) / 16 * 16;
  for (int i = 0; i < plan.levels; ++i) {
    plan.level[i].out_offset = i + 1 < plan.levels && i % 2 == 1 ? second : 0;
    plan.level[i].in_offset = i > 0 && (i - 1) % 2 == 1 ? second : 0;
  }
  plan.workspace_bytes = second + buffer_bytes[1];
  return plan;
}

SampleTopKLayout PlanSampleTopK(int64_t rows, int64_t cols, int64_t k_bound, int elem_bytes) {
  SampleTopKLayout layout;
  layout.k = std::min(k_bound, cols);
  layout.select = PlanTopK(rows, cols, layout.k, elem_bytes);
  const auto align = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
  const size_t candidates = static_cast<size_t>(rows * layout.k);
  layout.values_offset = align(layout.select.workspace_bytes);
  layout.columns_offset = layout.values_offset + align(candidates * elem_bytes);
  layout.bytes = layout.columns_offset + candidates * sizeof(int32_t);
  return layout;
}

FilterSpreadLayout PlanFilterSpread(int64_t rows, int64_t cols) {
  FilterSpreadLayout layout;
  const int64_t most = std::max<int64_t>(1, cols / kFilterSpreadMinChunk);
  const int64_t want = (kFilterSpreadTargetBlocks + rows - 1) / rows;
  layout.chunks = std::max<int64_t>(1, std::min(want, most));
  layout.chunk = (cols + layout.chunks - 1) / layout.chunks;
  layout.chunks = (cols + layout.chunk - 1) / layout.chunk;  // no empty chunk
  const auto align = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
  const size_t pairs = static_cast<size_t>(rows * layout.chunks) * 8;
  layout.top_offset = 0;
  layout.draw_offset = align(pairs);
  layout.state_offset = layout.draw_offset + align(pairs);
  layout.hist_offset = layout.state_offset + static_cast<size_t>(rows) * 64;
  layout.counts_offset =
      layout.hist_offset + static_cast<size_t>(rows) * 3 * kFilterSpreadBins * sizeof(uint64_t);
  layout.bytes = layout.counts_offset + static_cast<size_t>(rows * layout.chunks) *
                                            kFilterSpreadLastBins * sizeof(uint32_t);
  return layout;
}

size_t WorkspaceBytes(const char* op, int64_t rows, int64_t cols, int64_t k, int elem_bytes) {
  if (std::strcmp(op, "top_k") == 0) {
    if (rows < 1 || k < 1 || k > kSelectMaxK || k > cols) return 0;  // no kernel launch
    // The launcher aligns the workspace by hand (+16).
    return PlanTopK(rows, cols, k, elem_bytes).workspace_bytes + 16;
  }
  if (std::strcmp(op, "sample_top_k") == 0) {
    if (rows < 1 || cols < 1 || k < 1 || k > kSelectMaxK) return 0;  // no kernel launch
    return PlanSampleTopK(rows, cols, k, elem_bytes).bytes + 16;
  }
  if (std::strcmp(op, "filtered_categorical") == 0 && UsesSampleTopK(cols, k, elem_bytes)) {
    return WorkspaceBytes("sample_top_k", rows, cols, k, elem_bytes);
  }
  if (std::strcmp(op, "filtered_categorical") == 0 && UsesFilterSpread(rows, k, elem_bytes) &&
      cols >= 1 && cols <= INT32_MAX) {
    return PlanFilterSpread(rows, cols).bytes + 16;
  }
  return kWorkspaceBytes;
}

}  // namespace jax_argreduce
