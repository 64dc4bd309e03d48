// Launch planning for the CUDA row reduction: a pure function of (shape, element width, device
// capabilities, options) -> path + geometry. No CUDA calls, so it compiles into the CPU module
// too and is tested on the CPU with made-up devices (tests/test_launch_plan.py).
//
// Paths, for a row-major [rows, cols] input:
//   kTeam:    `team` consecutive lanes of a warp (1..32) own one row and merge with shuffles;
//             warps loop over rows. Narrow and medium rows, many rows. Teams of 64 lanes (2
//             warps of a block, merged through shared memory) for order-key policies (not the
//             compute-bound sampler): medium rows too few to fill the device with 32-lane
//             teams.
//   kBlock:   one block of kBlockThreads per row (kWideBlockThreads where one wave holds every
//             row and rows are longer than one round); blocks loop over rows. Many wide rows,
//             and (order-key policies) from half the SMs' count of rows of up to 256 KB.
//   kSplit:   few wide rows: `parts` blocks per row, one load round each over the whole GPU,
//             each block's best pair stored in the workspace, then merged, one warp per row,
//             by a second kernel or by the scan's last block (`last_block_merges`: a
//             self-resetting per-call-site counter, one kernel). With `pdl` the kernels use
//             programmatic dependent launch (sm_90+): the scan overlaps its producer's tail
//             and the merge kernel is resident before the scan ends.
//             Which merge (MergeMode::kAuto): inside a CUDA graph (XLA command buffers, where
//             a jitted program's kernels run back to back) the merge kernel, which measured
//             faster in-chain; launched one by one from the host (a program of one op, eager
//             calls) the last block, which saves the host's launch gap between two kernels
//             (NOTES.md tries 22-23), up to kLastBlockMergeMaxRows rows (the last block
//             merges its rows a few per warp).
#ifndef JAX_ARGREDUCE_FFI_LAUNCH_PLAN_H_
#define JAX_ARGREDUCE_FFI_LAUNCH_PLAN_H_

#include <cstddef>
#include <cstdint>

namespace jax_argreduce {

inline constexpr int kWarpSize = 32;
// The widest team (lanes per row of the team path: two warps).
inline constexpr int kMaxTeam = 64;
// Threads per block of the team, block, split-scan and merge kernels.
inline constexpr int kBlockThreads = 256;
// 16-byte loads in flight per thread in one pass of the scan: team and split kernels
// (many threads per row or many rows per SM) and the block kernel (one block per long row: few
// threads per SM, so more loads in flight each; NOTES.md try 10). Compute-bound key policies
// (the sampler) keep kInFlight in the block kernel too (NOTES.md try 24).
inline constexpr int kInFlight = 4;
inline constexpr int kBlockInFlight = 8;
// The block kernel's loads in flight per thread: the planner's row step and the kernel's
// unroll (row_reduce.cuh, PolicyTraits) both read it here, so they cannot disagree.
constexpr int BlockLoadsInFlight(bool compute_bound) {
  return compute_bound ? kInFlight : kBlockInFlight;
}
// At least this many elements per thread before more threads are given to a row.
inline constexpr int kMinElementsPerThread = 4;
// Rows that could use at least this many threads leave the team path.
inline constexpr int kBlockPathMinThreads = 256;
// ... and from this many, rows that fill one round of the block kernel's loads
// (kBlockThreads x kBlockInFlight 16-byte vectors, 32 KB; argreduce policies, not the
// compute-bound sampler): 32 lanes per row would leave most of the device idle (e.g. 1024
// rows: 8 warps per SM), a block per row keeps it full; rows of 16 KB or less measured slower
// on blocks (too little to read per thread for a 256-thread barrier; NOTES.md try 63).
inline constexpr int kLongRowBlockMinThreads = 64;
// Teams of two warps (order-key policies) on the team path where a row could use at least
// kWideTeamMinThreads threads (32-lane teams fill at most half the device) and is at least
// kWideTeamMinRowBytes; rows shorter than twice that only where 32-lane teams would fill at
// most a third of the device (kWideTeamShortRowMinThreads): in-chain, 4 KB rows, and 8 KB rows
// of 2048 rows, measured slower on two warps (NOTES.md try 64).
inline constexpr int kWideTeamMinThreads = 64;
inline constexpr int kWideTeamShortRowMinThreads = 96;
inline constexpr int64_t kWideTeamMinRowBytes = 8 << 10;
// Rows of at least half the SMs' count (and at most one per SM) of at most this many rounds
// of the block kernel's loads (8 x 32 KB) take a block each instead of the split path (order-
// key policies): no partials and no merge kernel, which cost more than the idle SMs; with
// fewer rows, blocks leave too many SMs idle (NOTES.md try 65).
inline constexpr int kBlockPerRowMaxRounds = 8;
// Where a block per row runs one wave of at most one row per SM (order-key policies), rows
// longer than one round of its loads (32 KB) get blocks of kWideBlockThreads: half the
// dependent load rounds per row; 1024 threads measured no better and lost at 32-64 KB rows
// (NOTES.md try 68).
inline constexpr int kWideBlockThreads = 512;

// Partials the split path may store: bounds the workspace.
inline constexpr int64_t kMaxSplitPartials = 16384;
// Workspace bytes that suffice for any shape on any device: one partial (int64 key + index,
// 16 bytes) per block of kMaxSplitPartials, +16 to align by hand. A constant, so the lowering
// needs no GPU and an exported program runs on any GPU.
inline constexpr size_t kWorkspaceBytes = kMaxSplitPartials * 16 + 16;
// Split-path counters per device (a static device array, zero at module load, zero again
// after every launch): one per call site that may run concurrently with another.
inline constexpr uint32_t kCallSiteSlots = 4096;
inline constexpr int64_t kLastBlockMergeMaxRows = 16;

enum class Path : int { kTeam = 0, kBlock = 1, kSplit = 2 };
const char* PathName(Path path);

// What the planner needs to know of the device and of the kernels' occupancy there.
struct DeviceCaps {
  int sms = 0;
  int cc_major = 0;                 // compute capability (PDL needs 9)
  int team_blocks_per_sm = 1;       // resident blocks of kBlockThreads, per kernel
  int block_blocks_per_sm = 1;
  int split_blocks_per_sm = 1;
};

// Choices the benchmarks and tests flip (process-wide, module.cc's debug entry); the defaults
// are the measured winners (benchmarks/NOTES.md).
// How the split path merges its partials (see kSplit above).
enum class MergeMode : int { kAuto = 0, kKernel = 1, kLastBlock = 2 };
const char* MergeModeName(MergeMode mode);

// Which path every shape takes (benchmarks): the planner's, or one forced (kSplit where a row
// gets at least two parts within the workspace and one wave, else kBlock).
enum class ForcedPath : int { kAuto = 0, kTeam = 1, kBlock = 2, kSplit = 3 };
const char* ForcedPathName(ForcedPath path);

struct PlanOptions {
  bool pdl = true;                   // programmatic dependent launch on sm_90+
  MergeMode merge = MergeMode::kAuto;
  int team = 0;  // kTeam: this many lanes per row (0: the planner's; > 32: order-key policies)
  ForcedPath path = ForcedPath::kAuto;
  // kBlock: this many threads per block (kBlockThreads or kWideBlockThreads) where the planner
  // may widen it (at most one row per SM, order keys); 0: the planner's.
  int block = 0;
};

// Process-wide options every launch uses: the defaults above unless the module's debug entry
// (benchmarks, tests) changed them. Read once per call, lock-free.
PlanOptions CurrentPlanOptions();
void SetPlanOptions(const PlanOptions& options);

struct LaunchPlan {
  Path path = Path::kTeam;
  int team = 0;                // lanes per row (kTeam)
  int parts = 1;               // blocks per row (kSplit)
  int64_t grid = 0;            // blocks of the (scan) kernel
  int block = kBlockThreads;   // threads per block
  int64_t merge_grid = 0;      // blocks of the merge kernel (kSplit, not last_block_merges)
  bool last_block_merges = false;  // kSplit: the last block merges (one kernel)
  bool pdl = false;
  int vector_elements = 0;     // elements per vector (vector_bytes / elem_bytes)
  int64_t row_step = 0;        // elements one pass of the scan loop covers in a row
  size_t workspace_bytes = 0;  // workspace the launch uses
};

// Plan for `rows` x `cols` (1 <= cols <= INT32_MAX, rows >= 1) elements of `elem_bytes` bytes
// whose keys are `key_bytes` wide (4 or 8). `compute_bound`: the key policy costs far more than
// its loads (the sampler's noise): the split path then gives each thread one vector, i.e.
// kInFlight * 16 / vector_bytes times more blocks per row, within one wave. `graph_captured`:
// the launch is being captured into a CUDA graph (MergeMode::kAuto). `vector_bytes`: the bytes
// a thread visits as one vector (16, or 32 for the sampler's float32 scan: one block of its
// generator); the loads in flight per thread stay kInFlight (kBlockInFlight) 16-byte loads
// either way.
LaunchPlan PlanRowReduce(const DeviceCaps& caps, int64_t rows, int64_t cols, int elem_bytes,
                         int key_bytes, const PlanOptions& options, bool compute_bound = false,
                         bool graph_captured = false, int vector_bytes = 16);

// ---------------------------------------------------------------------------------------------
// Row select (row_select.cuh): the k first elements of each row (top_k), in levels.
//
//   level 0   a block of kSelectThreads per chunk of `chunk` = kSelectThreads x E consecutive
//             elements of a row (E elements per thread, held in registers): the chunk's k
//             first elements (a radix select over the chunk, ties by column) as candidates,
//             k per chunk, into the workspace; or, for rows of one chunk, the row's answer.
//   level i   a block of kCandidateThreads per kCandidateChunk candidates of a row: the same
//             select over (radix key, column) pairs, k per chunk, until one chunk holds them
//             all: that block sorts its k and writes the values and indices.
// The plan is a pure function of (rows, cols, k, element width): no device property enters
// it, so the workspace it sizes is known at lowering time (XLA owns it: an extra result of the
// custom call) and an exported program runs on any GPU. Level 0 takes the largest E whose
// chunks still give kSelectTargetBlocks blocks (few rows are spread over the whole GPU, many
// rows read long chunks).
inline constexpr int kSelectThreads = 256;
inline constexpr int kCandidateThreads = 512;
inline constexpr int kCandidateItems = 16;  // candidates per thread (registers)
inline constexpr int64_t kCandidateChunk = int64_t{kCandidateThreads} * kCandidateItems;
inline constexpr int kSelectMinElementsPerThread = 8;
inline constexpr int kSelectMaxElementsPerThread = 32;
inline constexpr int64_t kSelectTargetBlocks = 256;
// The largest k the kernels take (a block's winners are sorted in shared memory).
inline constexpr int64_t kSelectMaxK = 1024;
inline constexpr int kSelectMaxLevels = 12;  // enough for 2^31 columns at kSelectMaxK

struct SelectLevel {
  int64_t items = 0;          // items of a row this level reads (cols at level 0)
  int64_t chunk = 0;          // items per block
  int64_t chunks = 0;         // blocks per row
  size_t in_offset = 0;       // bytes into the workspace of the candidates read (levels > 0)
  size_t out_offset = 0;      // ... of the candidates written (all levels but the last)
};

struct SelectPlan {
  int elements_per_thread = 0;  // E of level 0
  int levels = 0;
  SelectLevel level[kSelectMaxLevels];
  size_t workspace_bytes = 0;   // candidates: 8 bytes each, two buffers used in turn
};

// Plan of top_k over `rows` x `cols` elements of `elem_bytes` bytes, 1 <= k <= min(cols,
// kSelectMaxK), cols <= INT32_MAX.
SelectPlan PlanTopK(int64_t rows, int64_t cols, int64_t k, int elem_bytes);

// The filtered sampler's top-k path (sample_topk_kernels.h): the select of the k = min(k_bound,
// cols) first tokens of each row in z's order (PlanTopK's plan: the key width changes no level
// and no buffer, candidates are 8 bytes whatever the key), written as k values (the logits'
// bits) and k int32 columns per row into the workspace, which the finish kernel reads. Offsets
// are 16-byte aligned, from the (hand-aligned) workspace's start.
struct SampleTopKLayout {
  SelectPlan select;        // PlanTopK(rows, cols, k, elem_bytes)
  int64_t k = 0;            // candidates per row: min(k_bound, cols)
  size_t values_offset = 0;   // [rows, k] logit bits
  size_t columns_offset = 0;  // [rows, k] int32
  size_t bytes = 0;           // the whole, without the +16 of the hand alignment
};
// 1 <= k_bound <= kSelectMaxK, rows >= 1, 1 <= cols <= INT32_MAX.
SampleTopKLayout PlanSampleTopK(int64_t rows, int64_t cols, int64_t k_bound, int elem_bytes);

// Whether a filtered_categorical call takes the top-k path (a select of k_bound candidates per
// row, then the filters and the draw on them) rather than the generic one: k_bound > 0 promises
// every row's top_k in [1, k_bound]; the select takes 16- and 32-bit formats and k <= its
// maximum, and k_bound >= cols leaves nothing to select.
inline bool UsesSampleTopK(int64_t cols, int64_t k_bound, int elem_bytes) {
  return k_bound >= 1 && k_bound <= kSelectMaxK && k_bound < cols && elem_bytes <= 4;
}

// The filtered sampler's spread path (sample_kernels.cu): calls with no top-k at all (k_bound
// < 0, a static promise) on 16- and 32-bit formats, up to kFilterSpreadMaxRows rows: each row
// split into `chunks` chunks of `chunk` columns, one block each, in every pass (the top, three
// levels of top-p's mass histograms, the draw), so that few rows still fill the GPU. Offsets
// are 16-byte aligned, from the (hand-aligned) workspace's start; nothing in it outlives the
// call (the first pass zeroes what later passes add to).
inline constexpr int64_t kFilterSpreadMaxRows = 512;
// 2 blocks of 512 threads on each of 132 SMs: the draw's occupancy (its launch bound), so each
// pass is one wave (NOTES try 84: fewer, longer chunks beat 528 by 15-60%).
inline constexpr int64_t kFilterSpreadTargetBlocks = 264;
inline constexpr int64_t kFilterSpreadMinChunk = 1024;
inline constexpr int kFilterSpreadBins = 2048;       // a level's digits (11 bits; the last 10)
inline constexpr int kFilterSpreadLastBins = 1024;   // the last level's digits
struct FilterSpreadLayout {
  int64_t chunks = 0;         // blocks per row
  int64_t chunk = 0;          // columns per block (the last block of a row may have fewer)
  size_t top_offset = 0;      // [rows, chunks] pairs (8 bytes): each chunk's top token
  size_t draw_offset = 0;     // [rows, chunks] pairs: each chunk's best kept noisy key
  size_t state_offset = 0;    // [rows] 64-byte row states (top-p's levels, the done count)
  size_t hist_offset = 0;     // [rows, 3, kFilterSpreadBins] uint64 masses
  size_t counts_offset = 0;   // [rows, chunks, kFilterSpreadLastBins] uint32 last-level counts
  size_t bytes = 0;           // the whole, without the +16 of the hand alignment
};
// rows >= 1, 1 <= cols <= INT32_MAX.
FilterSpreadLayout PlanFilterSpread(int64_t rows, int64_t cols);

// Whether a filtered_categorical call takes the spread path: k_bound < 0 promises that no row
// has a top-k; 16- and 32-bit formats (a 32-bit key: three levels); at most
// kFilterSpreadMaxRows rows (the histograms' workspace; more rows fill the GPU with a block
// each on the generic path).
inline bool UsesFilterSpread(int64_t rows, int64_t k_bound, int elem_bytes) {
  return k_bound < 0 && elem_bytes <= 4 && rows >= 1 && rows <= kFilterSpreadMaxRows;
}

// Workspace bytes of one CUDA handler call of `op` ("argreduce", "max_with_index",
// "categorical": the split path's bound kWorkspaceBytes, whatever the shape; "top_k": its
// plan's; "sample_top_k": the filtered sampler's top-k path, PlanSampleTopK's, k = k_bound;
// "filtered_categorical": that where UsesSampleTopK, PlanFilterSpread's where UsesFilterSpread
// (k = k_bound), else the split path's bound)
// over [rows, cols] elements of `elem_bytes` bytes; k is top_k's.
size_t WorkspaceBytes(const char* op, int64_t rows, int64_t cols, int64_t k, int elem_bytes);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_LAUNCH_PLAN_H_
