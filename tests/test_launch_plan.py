"""The CUDA launch planner (ffi/launch_plan.h), a pure function, tested on the CPU with made-up
devices: an H200 (132 SMs, sm_90), an A100 (108 SMs, sm_80: no PDL) and a small sm_90 part
(66 SMs, other occupancies).

Invariants, not tuned numbers: which path a shape takes (only team, block and split exist:
team for narrow rows and for many rows; split for few wide rows; block for more rows than
SMs, and for the order keys' rows of up to 8 block rounds from half the SMs' count), that every geometry covers its rows, stays within the workspace and the partial budget,
uses PDL only where the device has it and the option asks for it, and merges the split path's
partials in a second kernel inside CUDA graphs and in the last block for few rows launched from
the host (MergeMode::kAuto), unless the options force one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from jax_argreduce import _ffi

H200 = dict(sms=132, cc_major=9, team_blocks_per_sm=5, block_blocks_per_sm=4,
            split_blocks_per_sm=6)
A100 = dict(sms=108, cc_major=8, team_blocks_per_sm=6, block_blocks_per_sm=4,
            split_blocks_per_sm=6)
SM90_SMALL = dict(sms=66, cc_major=9, team_blocks_per_sm=8, block_blocks_per_sm=2,
                  split_blocks_per_sm=3)
DEVICES = {"h200": H200, "a100": A100, "sm90_small": SM90_SMALL}

MAX_PARTIALS = 16384  # launch_plan.h kMaxSplitPartials: the workspace holds this many partials
WORKSPACE_USABLE = _ffi.CUDA_WORKSPACE_BYTES - 16  # 16 bytes go to aligning by hand
ELEM_BYTES = (2, 4, 8)  # float16/bfloat16, float32, float64
# None: the process-wide option (PDL on, merge "auto").
OPTIONS = [dict(pdl=p) for p in (None, False, True)] + [
    dict(merge="kernel"), dict(merge="last_block"), dict(merge="auto", graph_captured=True),
    dict(pdl=False, merge="auto", graph_captured=False), dict(compute_bound=True),
    dict(compute_bound=True, graph_captured=True)]
LAST_BLOCK_MAX_ROWS = 16  # launch_plan.h kLastBlockMergeMaxRows
BLOCK_ROUND_BYTES = 256 * 8 * 16  # the block kernel's loads of one round (kBlockInFlight)
BLOCK_PER_ROW_MAX_ROUNDS = 8  # launch_plan.h kBlockPerRowMaxRounds
WIDE_BLOCK_THREADS = 512  # launch_plan.h kWideBlockThreads
PATHS = ("team", "block", "split")
INT32_MAX = 2 ** 31 - 1
WIDE = (32000, 128256, 202048, 262144, 1 << 22, INT32_MAX)


def plan(rows, cols, elem_bytes, device, **options):
  return _ffi.debug_plan(rows, cols, elem_bytes, **DEVICES[device], **options)


def key_bytes(elem_bytes):
  return 8 if elem_bytes == 8 else 4


def check_invariants(p, rows, cols, elem_bytes, device, pdl=None, merge=None,
                     graph_captured=False, compute_bound=False, vector_bytes=16):
  """What every plan must satisfy; returns p."""
  caps = DEVICES[device]
  pdl = True if pdl is None else pdl
  merge = merge or "auto"
  where = f"{rows}x{cols} elem={elem_bytes} on {device} pdl={pdl}: {p}"
  assert p["path"] in PATHS, where
  assert p["vector_elements"] == vector_bytes // elem_bytes, where
  assert p["grid"] >= 1 and p["block"] >= 32 and p["block"] % 32 == 0, where
  assert p["grid"] <= INT32_MAX, where  # gridDim.x
  assert 0 <= p["workspace_bytes"] <= WORKSPACE_USABLE, where
  assert p["row_step"] >= 1, where
  # PDL exactly on sm_90+ with the option on, whatever the path.
  assert p["pdl"] == (caps["cc_major"] >= 9 and pdl), where
  if p["path"] == "split":
    parts = p["parts"]
    assert parts >= 2, where
    assert rows <= caps["sms"], where
    assert p["grid"] == rows * parts, where
    assert rows * parts <= MAX_PARTIALS, where
    assert p["workspace_bytes"] == rows * parts * 2 * key_bytes(elem_bytes), where
    last_block = merge == "last_block" or (
        merge == "auto" and not graph_captured and rows <= LAST_BLOCK_MAX_ROWS)
    assert p["last_block_merges"] == last_block, where
    # The merge kernel: a warp per row; none when the last block merges.
    assert p["merge_grid"] == (0 if last_block else math.ceil(rows / (p["block"] // 32))), where
    assert parts <= max(1, caps["split_blocks_per_sm"] * caps["sms"] // rows), where  # one wave
    per_block = p["row_step"] // parts
    assert p["row_step"] == parts * per_block, where
    assert per_block % (p["block"] * p["vector_elements"]) == 0, where
    if compute_bound:  # one vector per thread and round
      assert per_block == p["block"] * p["vector_elements"], where
    assert (parts - 1) * per_block < cols, where  # no block without work in the first round
  else:
    assert p["workspace_bytes"] == 0 and p["merge_grid"] == 0 and p["parts"] == 1, where
    assert not p["last_block_merges"], where
  if p["path"] == "team":
    team = p["team"]
    assert team in (1, 2, 4, 8, 16, 32, 64), where
    assert team <= 32 or not compute_bound, where  # the sampler's teams: at most a warp
    assert p["grid"] <= caps["sms"] * caps["team_blocks_per_sm"], where  # one wave at most
    teams = p["grid"] * p["block"] // team
    if p["grid"] < caps["sms"] * caps["team_blocks_per_sm"]:
      assert teams >= rows, where  # no row loop needed when the grid is not capped
    assert teams - p["block"] // team < rows or p["grid"] == 1, where  # no idle block
    assert p["row_step"] % (team * p["vector_elements"]) == 0, where
  if p["path"] == "block":
    assert p["grid"] <= rows and p["grid"] <= caps["sms"] * caps["block_blocks_per_sm"], where
    assert p["row_step"] % (p["block"] * p["vector_elements"]) == 0, where
    # Wide blocks for rows of more than one round, at most one row per SM, order keys only.
    wide = (not compute_bound and rows <= caps["sms"] and
            cols * elem_bytes > BLOCK_ROUND_BYTES)
    assert p["block"] == (WIDE_BLOCK_THREADS if wide else 256), where
  return p


def in_flight(p):
  """Loads in flight per thread per pass, from the plan's row_step."""
  threads = {"team": p["team"], "block": p["block"],
             "split": p["parts"] * p["block"]}[p["path"]]
  return p["row_step"] // (threads * p["vector_elements"])


# ----------------------------------------------------------------------------- paths

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
@pytest.mark.parametrize("rows,cols", [(4096, 8), (4096, 128), (65536, 64), (65536, 1024),
                                       (300000, 40), (1, 1), (1, 16), (7, 3), (2 ** 20, 1),
                                       (4096, 4096), (1000, 1024)])
def test_team_path_for_narrow_or_many_rows(device, elem_bytes, rows, cols):
  for options in OPTIONS:
    p = check_invariants(plan(rows, cols, elem_bytes, device, **options), rows, cols,
                         elem_bytes, device, **options)
    assert p["path"] == "team", p


def block_per_row(rows, cols, elem_bytes, sms, compute_bound=False):
  """Whether rows of at most one per SM take a block each on a GPU of ``sms`` SMs (order keys,
  >= half the SMs; tests/test_gpu.py asks it for the GPU at hand)."""
  return (not compute_bound and 2 * rows >= sms
          and cols * elem_bytes <= BLOCK_PER_ROW_MAX_ROUNDS * BLOCK_ROUND_BYTES)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
@pytest.mark.parametrize("rows", [1, 2, 8, 32, 64])
@pytest.mark.parametrize("cols", WIDE)
@pytest.mark.parametrize("pdl", [None, False, True])
def test_split_path_for_few_wide_rows(device, elem_bytes, rows, cols, pdl):
  """1-64 rows x wide columns: several blocks per row through the workspace, PDL on sm_90
  unless switched off; a block per row instead from half the SMs' count of rows of up to 8
  block rounds (test_block_per_row_from_half_the_sms)."""
  p = check_invariants(plan(rows, cols, elem_bytes, device, pdl=pdl), rows, cols, elem_bytes,
                       device, pdl=pdl)
  if block_per_row(rows, cols, elem_bytes, DEVICES[device]["sms"]):
    assert p["path"] == "block", p
    return
  assert p["path"] == "split", p
  assert p["parts"] >= 2 and p["grid"] == rows * p["parts"]
  assert p["workspace_bytes"] <= _ffi.CUDA_WORKSPACE_BYTES - 16
  assert p["parts"] * rows <= MAX_PARTIALS
  assert p["pdl"] == (DEVICES[device]["cc_major"] >= 9 and pdl is not False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
@pytest.mark.parametrize("rows,cols", [(133, 202048), (256, 202048), (500, 128256),
                                       (200, 1 << 22), (150, INT32_MAX)])
def test_block_path_for_more_rows_than_sms(device, elem_bytes, rows, cols):
  if rows <= DEVICES[device]["sms"]:
    pytest.skip("not more rows than SMs on this device")
  for options in OPTIONS:
    p = check_invariants(plan(rows, cols, elem_bytes, device, **options), rows, cols,
                         elem_bytes, device, **options)
    assert p["path"] == "block", p
    assert p["grid"] == min(rows, DEVICES[device]["sms"] * DEVICES[device]["block_blocks_per_sm"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
@pytest.mark.parametrize("rows,cols", [(1000, 202048), (1024, 16384), (2000, 32000),
                                       (1024, 4096), (2048, 2048), (1024, 1 << 22)])
def test_block_path_for_rows_that_fill_a_block_round(device, elem_bytes, rows, cols):
  """Rows that could use 64-255 threads each (more rows than a wave of blocks holds, fewer
  than a wave of 32-lane teams fills) take a block each where a row fills one round of the
  block kernel's loads (256 threads x 8 x 16 bytes = 32 KB), teams otherwise (32 lanes, or
  two warps where two_warp_team says so); compute-bound policies (the sampler) keep the teams
  (NOTES.md tries 63-64)."""
  fair = fair_threads(rows, device)
  if not 64 <= fair < 256:
    pytest.skip("not in the 64-255 threads-per-row band on this device")
  for options in OPTIONS:
    p = check_invariants(plan(rows, cols, elem_bytes, device, **options), rows, cols,
                         elem_bytes, device, **options)
    long_row = cols * elem_bytes >= 32 * 1024 and not options.get("compute_bound")
    assert p["path"] == ("block" if long_row else "team"), (options, p)
    if not long_row:
      assert p["team"] == two_warp_team(rows, cols, elem_bytes, device, options), (options, p)


def fair_threads(rows, device):
  """Threads per row when the rows share one wave of team blocks evenly."""
  caps = DEVICES[device]
  return caps["sms"] * caps["team_blocks_per_sm"] * 256 // rows


def threads_per_row(rows, cols, elem_bytes, device):
  """The threads a row could use (4 or more elements each, 16 bytes at least), capped by the
  fair share: the planner's threads_per_row."""
  return min(-(-cols // max(4, 16 // elem_bytes)), fair_threads(rows, device))


def two_warp_team(rows, cols, elem_bytes, device, options):
  """The team path's lanes per row in the 64-255 threads-per-row band: two warps for the
  order keys' rows of >= 16 KB, and of 8-16 KB where a row could use >= 96 threads (NOTES.md
  try 64); a warp otherwise and for the sampler."""
  threads = threads_per_row(rows, cols, elem_bytes, device)
  row_bytes = cols * elem_bytes
  wide = (not options.get("compute_bound") and threads >= 64 and row_bytes >= 8192
          and (row_bytes >= 16384 or threads >= 96))
  return 64 if wide else 32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
@pytest.mark.parametrize("rows,cols", [(1024, 4096), (1536, 4096), (2048, 4096), (1024, 2048),
                                       (2048, 2048), (768, 8192), (1536, 3001), (2000, 1031)])
def test_two_warp_teams_for_medium_rows_that_underfill(device, elem_bytes, rows, cols):
  """Team-path rows that could use >= 64 threads: 64 lanes each where the rule above says
  (order keys), otherwise a warp; the sampler never gets more than a warp."""
  for options in OPTIONS:
    p = check_invariants(plan(rows, cols, elem_bytes, device, **options), rows, cols,
                         elem_bytes, device, **options)
    if p["path"] != "team":
      continue
    if threads_per_row(rows, cols, elem_bytes, device) >= 32:
      assert p["team"] == two_warp_team(rows, cols, elem_bytes, device, options), (options, p)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
@pytest.mark.parametrize("cols", [4097, 16384, 32000, 65536, 128256, 202048, 1 << 22])
def test_block_per_row_from_half_the_sms(device, elem_bytes, cols):
  """From half the SMs' count up to one row per SM: a block per row where a row is at most
  8 rounds of the block kernel's loads (256 KB; order keys, NOTES.md try 65), the split path
  for longer rows, fewer rows and the sampler."""
  sms = DEVICES[device]["sms"]
  for rows in sorted({1, sms // 2 - 1, (sms + 1) // 2, sms * 3 // 4, sms}):
    for options in OPTIONS:
      p = check_invariants(plan(rows, cols, elem_bytes, device, **options), rows, cols,
                           elem_bytes, device, **options)
      if p["path"] == "team":  # rows short enough for teams
        continue
      if block_per_row(rows, cols, elem_bytes, sms, options.get("compute_bound", False)):
        assert p["path"] == "block" and p["grid"] == rows, (rows, options, p)
      elif p["path"] == "block":  # a split of one part: the row fits one split round
        assert p["row_step"] >= cols or options.get("compute_bound"), (rows, options, p)


def test_forced_team_and_path_options():
  """The ``team`` and ``path`` plan options (benchmarks): a forced team width up to 64 (the
  sampler clamps it to a warp), a forced path where the shape allows it; bad values raise."""
  p = _ffi.debug_plan(1024, 1024, 4, **H200, team=64)
  assert p["path"] == "team" and p["team"] == 64, p
  p = _ffi.debug_plan(1024, 1024, 4, **H200, team=64, compute_bound=True)
  assert p["path"] == "team" and p["team"] == 32, p
  p = _ffi.debug_plan(128, 16384, 4, **H200, path="split")
  assert p["path"] == "split" and p["parts"] >= 2, p
  p = _ffi.debug_plan(1, 202048, 4, **H200, path="block")
  assert p["path"] == "block" and p["grid"] == 1, p
  # a forced team path takes the planner's width: two warps for a row this long, one for the
  # sampler
  p = _ffi.debug_plan(1, 202048, 4, **H200, path="team")
  assert p["path"] == "team" and p["team"] == 64, p
  p = _ffi.debug_plan(1, 202048, 4, **H200, path="team", compute_bound=True)
  assert p["path"] == "team" and p["team"] == 32, p
  for bad in (dict(team=128), dict(team=3), dict(team=-1), dict(path="cluster")):
    with pytest.raises(ValueError):
      _ffi.debug_plan(1, 1, 4, **H200, **bad)


@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
def test_no_sm80_plan_uses_pdl(elem_bytes):
  """cc 8: never PDL, whatever the options and the path."""
  seen = set()
  for rows, cols in [(1, 202048), (8, 1 << 22), (64, 32000), (256, 202048), (4096, 8)]:
    for options in OPTIONS:
      p = _ffi.debug_plan(rows, cols, elem_bytes, **A100, **options)
      assert not p["pdl"], (rows, cols, options, p)
      seen.add(p["path"])
  assert seen == set(PATHS)


def test_no_cluster_path_or_options():
  """The thread block cluster path is gone: no plan takes it and neither the planner entry nor
  the plan options take cluster arguments."""
  for device in DEVICES:
    for rows in (1, 8, 64, DEVICES[device]["sms"]):  # up to one row per SM: split
      assert plan(rows, 202048, 4, device)["path"] == "split"
  with pytest.raises(TypeError):
    _ffi.debug_plan(1, 202048, 4, **H200, clusters=True)
  with pytest.raises(TypeError):
    _ffi.debug_plan(1, 202048, 4, **H200, clusters_active=(132, 66, 32, 16, 7))
  with pytest.raises(TypeError):
    _ffi.debug_set_plan_options(clusters=True)
  assert "clusters" not in _ffi.debug_plan_options()
  assert "cluster" not in plan(1, 202048, 4, "h200")


# ----------------------------------------------------------------------------- geometry

@pytest.mark.parametrize("device", DEVICES)
def test_row_step_is_consistent(device):
  """row_step = threads of a row x loads in flight x vector elements, with one in-flight depth
  shared by the team and split kernels and a deeper (or equal) one for the block kernel; the
  same for every element width (bits-only key policies: argmax and friends)."""
  depths = {path: set() for path in PATHS}
  shapes = [(4096, 8), (4096, 4096), (1, 202048), (8, 128256), (256, 202048), (1, 2000)]
  for elem_bytes in ELEM_BYTES:
    for rows, cols in shapes:
      for options in OPTIONS:
        if options.get("compute_bound"):
          continue  # test_compute_bound_split_gives_one_vector_per_thread
        p = plan(rows, cols, elem_bytes, device, **options)
        threads = {"team": p["team"], "block": p["block"],
                   "split": p["parts"] * p["block"]}[p["path"]]
        assert p["row_step"] % (threads * p["vector_elements"]) == 0, p
        depths[p["path"]].add(in_flight(p))
  assert all(depths.values()), depths  # every path seen
  shared = depths["team"] | depths["split"]
  assert len(shared) == 1 and len(depths["block"]) <= 1, depths
  assert not depths["block"] or min(depths["block"]) >= min(shared), depths


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
def test_split_round_covers_the_row_or_fills_the_device(device, elem_bytes):
  """Split parts: one load round over the whole row, unless one wave of the split kernel or
  the partial budget caps them."""
  caps = DEVICES[device]
  for rows in (1, 3, 8, 33, 64, caps["sms"]):
    for cols in (9000, 32000, 202048, 1 << 22, INT32_MAX):
      p = plan(rows, cols, elem_bytes, device)
      if p["path"] != "split":
        continue
      cap = min(caps["sms"] * caps["split_blocks_per_sm"] // rows, MAX_PARTIALS // rows)
      assert p["row_step"] >= cols or p["parts"] == cap, p


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
def test_team_width_grows_with_the_row(device, elem_bytes):
  """For a fixed row count, the lanes per row never shrink as rows get longer."""
  for rows in (1, 100, 4096, 65536):
    last = 0
    for cols in (1, 2, 3, 5, 8, 16, 31, 64, 100, 128, 255, 512, 1000, 4096, 20000):
      p = plan(rows, cols, elem_bytes, device)
      if p["path"] != "team":
        break
      assert p["team"] >= last, (rows, cols, p)
      last = p["team"]


def test_random_shapes_keep_every_invariant():
  """Seeded sweep over shapes, widths, devices and options."""
  rng = np.random.default_rng(20261130)
  seen = set()
  for _ in range(3000):
    rows = int(np.exp(rng.uniform(0, np.log(1 << 24))))
    cols = int(np.exp(rng.uniform(0, np.log(INT32_MAX))))
    cols = max(1, min(cols, INT32_MAX))
    elem_bytes = int(rng.choice(ELEM_BYTES))
    device = str(rng.choice(list(DEVICES)))
    options = OPTIONS[int(rng.integers(len(OPTIONS)))]
    p = check_invariants(plan(rows, cols, elem_bytes, device, **options), rows, cols,
                         elem_bytes, device, **options)
    seen.add(p["path"])
  assert seen == set(PATHS)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
def test_wide_blocks_for_rows_longer_than_one_round(device, elem_bytes):
  """A block per row, at most one row per SM: 512 threads for rows of more than 32 KB (one
  round of 256 threads' loads), 256 up to it and wherever blocks loop over more rows than
  SMs; the sampler (compute-bound) keeps 256; the ``block`` option forces either width
  where the planner may widen, and nothing elsewhere."""
  sms = DEVICES[device]["sms"]
  round_cols = BLOCK_ROUND_BYTES // elem_bytes
  rows = sms  # half the SMs' count or more: a block per row
  for cols, want in ((round_cols, 256), (round_cols + 1, WIDE_BLOCK_THREADS),
                     (4 * round_cols, WIDE_BLOCK_THREADS)):
    p = check_invariants(plan(rows, cols, elem_bytes, device), rows, cols, elem_bytes, device)
    assert p["path"] == "block" and p["block"] == want, p
    assert p["row_step"] == want * 8 * (16 // elem_bytes), p  # kBlockInFlight 16-byte loads
    for block in (256, WIDE_BLOCK_THREADS):
      p = plan(rows, cols, elem_bytes, device, block=block)
      assert p["path"] == "block" and p["block"] == block, p
  cols = 4 * round_cols
  p = check_invariants(plan(sms + 1, cols, elem_bytes, device), sms + 1, cols, elem_bytes,
                       device)
  assert p["path"] == "block" and p["block"] == 256, p
  assert plan(sms + 1, cols, elem_bytes, device, block=WIDE_BLOCK_THREADS)["block"] == 256
  p = check_invariants(plan(1, cols, elem_bytes, device, path="block", compute_bound=True),
                       1, cols, elem_bytes, device, compute_bound=True)
  assert p["path"] == "block" and p["block"] == 256, p
  with pytest.raises(ValueError, match="block must be"):
    _ffi.debug_set_plan_options(block=1024)


# ----------------------------------------------------------------------------- options

def test_process_wide_options_round_trip():
  """Every option field survives the process-wide store (one packed word) together with the
  others at non-default values, and a plan with no explicit options reads the stored block
  width."""
  before = _ffi.debug_plan_options()
  want = {"pdl": False, "merge": "last_block", "team": 64, "path": "block", "block": 512}
  try:
    assert _ffi.debug_set_plan_options(**want) == want
    assert _ffi.debug_plan_options() == want
    p = plan(100, 65536, 4, "h200")  # the process-wide options
    assert p["path"] == "block" and p["block"] == WIDE_BLOCK_THREADS and not p["pdl"], p
    want = {"pdl": True, "merge": "kernel", "team": 1, "path": "split", "block": 256}
    assert _ffi.debug_set_plan_options(**want) == want
  finally:
    _ffi.debug_set_plan_options(**before)
  assert _ffi.debug_plan_options() == before


def test_default_options_and_debug_entry():
  """Defaults: PDL on, merge "auto"; a plan with options None takes the process-wide ones;
  setting them is process-wide and returns what is in force; unknown merge modes raise."""
  before = _ffi.debug_plan_options()
  assert before == {"pdl": True, "merge": "auto", "team": 0, "path": "auto", "block": 0}
  try:
    assert _ffi.debug_set_plan_options(pdl=False) == {"pdl": False, "merge": "auto", "team": 0,
                                                      "path": "auto", "block": 0}
    assert _ffi.debug_set_plan_options() == {"pdl": False, "merge": "auto", "team": 0,
                                             "path": "auto", "block": 0}  # None keeps
    p = plan(8, 202048, 4, "h200")  # the process-wide option
    assert p["path"] == "split" and not p["pdl"]
    assert plan(8, 202048, 4, "h200", pdl=True)["pdl"]  # explicit options override
    assert _ffi.debug_set_plan_options(pdl=True, merge="kernel") == {
        "pdl": True, "merge": "kernel", "team": 0, "path": "auto", "block": 0}
    assert not plan(8, 202048, 4, "h200", pdl=False)["pdl"]
    assert not plan(8, 202048, 4, "h200")["last_block_merges"]
    assert _ffi.debug_set_plan_options(merge="last_block")["merge"] == "last_block"
    assert plan(8, 202048, 4, "h200", graph_captured=True)["last_block_merges"]
    with pytest.raises(ValueError, match="merge must be"):
      _ffi.debug_set_plan_options(merge="cluster")
    assert _ffi.debug_plan_options()["merge"] == "last_block"  # a refused call changes nothing
  finally:
    _ffi.debug_set_plan_options(**before)
  assert _ffi.debug_plan_options() == before
  p = plan(8, 202048, 4, "h200")
  assert p["path"] == "split" and p["pdl"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
def test_auto_merge_kernel_in_graphs_last_block_for_few_rows_from_the_host(device, elem_bytes):
  """merge "auto": the merge kernel whenever the launch is captured into a CUDA graph (it won
  in-chain); from the host, the last block for up to 16 rows, the merge kernel above."""
  for rows in (1, 2, 8, 32, 33, 64):
    for cols in (32000, 202048, 1 << 22):
      host = plan(rows, cols, elem_bytes, device)
      graph = plan(rows, cols, elem_bytes, device, graph_captured=True)
      if host["path"] != "split":
        continue
      assert graph["path"] == "split" and graph["parts"] == host["parts"], (host, graph)
      assert not graph["last_block_merges"] and graph["merge_grid"] >= 1, graph
      assert host["last_block_merges"] == (rows <= LAST_BLOCK_MAX_ROWS), host
      for merge in ("kernel", "last_block"):
        for captured in (False, True):
          p = plan(rows, cols, elem_bytes, device, merge=merge, graph_captured=captured)
          assert p["last_block_merges"] == (merge == "last_block"), p


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
def test_compute_bound_split_gives_one_vector_per_thread(device, elem_bytes):
  """A compute-bound key policy (the sampler): kInFlight times the blocks per row where one
  wave holds them, the same rows on the split path (also where argreduce takes a block per
  row)."""
  caps = DEVICES[device]
  for rows in (1, 8, 64):
    for cols in (32000, 202048):
      p = plan(rows, cols, elem_bytes, device)
      # the sampler's float32 scan visits 32-byte vectors (8 elements: one generator block)
      for vector_bytes in (16, 32) if elem_bytes == 4 else (16,):
        q = check_invariants(
            plan(rows, cols, elem_bytes, device, compute_bound=True, vector_bytes=vector_bytes),
            rows, cols, elem_bytes, device, compute_bound=True, vector_bytes=vector_bytes)
        if block_per_row(rows, cols, elem_bytes, caps["sms"]):
          assert p["path"] == "block" and q["path"] == "split", (p, q)
        else:
          assert q["path"] == p["path"], (p, q)
        if q["path"] == "split":
          cap = min(caps["sms"] * caps["split_blocks_per_sm"] // rows, MAX_PARTIALS // rows)
          want = min(math.ceil(cols / (q["block"] * q["vector_elements"])), cap)
          assert q["parts"] == want and q["parts"] >= p["parts"], (p, q)
        # the loads in flight per thread and round are 16-byte loads whatever the vector
        assert q["row_step"] % (16 // elem_bytes) == 0, q


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem_bytes", ELEM_BYTES)
def test_forced_team_width(device, elem_bytes):
  """The ``team`` option (benchmarks' sweeps, the GPU tests' every-width check): a shape on the
  team path takes exactly that many lanes per row (at most a warp for the compute-bound sampler),
  a valid geometry; other paths are unchanged; 0 is the planner's choice and anything but a
  power of two up to 64 is refused."""
  for rows, cols in ((4096, 512), (4096, 128), (65536, 64), (300000, 5), (1000, 4099),
                     (8, 202048), (256, 202048), (1, 7)):
    for compute_bound in (False, True):
      auto = plan(rows, cols, elem_bytes, device, compute_bound=compute_bound)
      assert plan(rows, cols, elem_bytes, device, compute_bound=compute_bound, team=0) == auto
      for team in (1, 2, 4, 8, 16, 32, 64):
        p = check_invariants(plan(rows, cols, elem_bytes, device, compute_bound=compute_bound,
                                  team=team),
                             rows, cols, elem_bytes, device, compute_bound=compute_bound)
        assert p["path"] == auto["path"], (auto, p)
        if p["path"] == "team":
          assert p["team"] == (min(team, 32) if compute_bound else team), p
        else:
          assert p == auto, (auto, p)
  before = _ffi.debug_plan_options()
  try:
    for bad in (-1, 3, 12, 128):
      with pytest.raises(ValueError, match="team must be"):
        _ffi.debug_set_plan_options(team=bad)
    assert _ffi.debug_plan_options() == before
    assert _ffi.debug_set_plan_options(team=4)["team"] == 4
    assert plan(4096, 512, elem_bytes, device)["team"] == 4  # the process-wide option
  finally:
    _ffi.debug_set_plan_options(**before)


def test_workspace_constant():
  """One workspace size for every shape and GPU: the partial budget at 16 bytes each, +16."""
  assert _ffi.CUDA_WORKSPACE_BYTES == MAX_PARTIALS * 16 + 16
  worst = max(plan(rows, INT32_MAX, 8, device)["workspace_bytes"]
              for rows in range(1, 133) for device in DEVICES)
  assert worst <= WORKSPACE_USABLE


@pytest.mark.parametrize("rows,cols", [(0, 5), (-1, 5), (3, 0), (3, INT32_MAX + 1)])
def test_bad_shapes_raise(rows, cols):
  with pytest.raises(ValueError):
    plan(rows, cols, 4, "h200")


def test_device_plan_needs_a_gpu():
  """The on-device entry raises cleanly without a CUDA build or GPU (tests on a GPU are in
  test_gpu.py)."""
  import jax
  if _ffi.HAS_CUDA and jax.default_backend() == "gpu":
    pytest.skip("a GPU is present: covered by test_gpu.py")
  with pytest.raises(RuntimeError):
    _ffi.debug_launch_plan(1, 202048, np.float32)
