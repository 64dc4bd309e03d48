"""Condenses `ncu` text reports (benchmarks/gpu_check.sh ncu / probe) into one line per
profiled launch: kernel, grid x block, duration, DRAM and memory throughput, achieved
occupancy, registers, and the rule findings ncu printed for it (stall reasons and the like).
  python3 benchmarks/ncu_summary.py [--group N] [--probe] LOG [LOG...]
ncu prints its reports when the process ends, after every label line the program printed
("case ..." / "probe: ..."); with --group N the reports are matched to the labels in order, N
launches per label, and each label gets the median duration of its N launches."""
import statistics
import re
import sys

HEADER = re.compile(r"^  (\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Context")
METRIC = re.compile(r"^\s{4,}(\S.*?)\s{2,}(\S+)\s+([-\d,.]+)\s*$")
RULE = re.compile(r"^\s{4}(OPT|WRN|INF)\s+(.*)$")
CASE = re.compile(r"^(case .*|probe: .*)$")
# (metric name, unit or None for any) -> key. ncu prints "Memory Throughput" twice: in % (Speed
# Of Light) and in bytes/s (Memory Workload Analysis); only the % one is wanted.
WANTED = {("Duration", None): "dur", ("gpu__time_duration.sum", None): "dur",
          ("DRAM Throughput", "%"): "dram%", ("Memory Throughput", "%"): "mem%",
          ("Achieved Occupancy", "%"): "occ%", ("Registers Per Thread", None): "regs",
          ("Warp Cycles Per Issued Instruction", None): "cyc/issue"}


def short_name(name):
  """'void <unnamed>::K<2, 0>(const T *, ...)' or 'void ns::(anonymous namespace)::K<...>(...)'
  -> 'K<2, 0>'."""
  if name.startswith("void "):
    name = name[len("void "):]
  for junk in ("<unnamed>::", "unnamed>::", "jax_argreduce::", "(anonymous namespace)::",
               "Format::"):
    name = name.replace(junk, "")
  depth = 0
  for i, ch in enumerate(name):
    depth += {"<": 1, ">": -1}.get(ch, 0)
    if ch == "(" and depth <= 0:
      return name[:i]
  return name


def parse(path):
  launches, labels, cur, rule = [], [], None, None
  for line in open(path, errors="replace"):
    line = line.rstrip("\n")
    c = CASE.match(line)
    if c:
      if c.group(1) != "probe: done":
        labels.append(c.group(1))
      continue
    h = HEADER.match(line)
    if h:
      cur = {"label": "", "name": short_name(h.group(1)),
             "geom": f"{h.group(2)}x{h.group(5)}", "rules": []}
      launches.append(cur)
      rule = None
      continue
    if cur is None:
      continue
    r = RULE.match(line)
    if r:
      rule = [r.group(1), r.group(2).strip()]
      cur["rules"].append(rule)
      continue
    if rule is not None and line.startswith("          ") and line.strip():
      rule[1] += " " + line.strip()
      continue
    rule = None
    m = METRIC.match(line)
    key = m and (WANTED.get((m.group(1), m.group(2))) or WANTED.get((m.group(1), None)))
    if key:
      unit, val = m.group(2), float(m.group(3).replace(",", ""))
      if key == "dur":  # to microseconds
        val *= {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                "msecond": 1e3}.get(unit, 1.0)
      cur[key] = val
  return launches, labels


def main(argv):
  probe = "--probe" in argv
  group = int(argv[argv.index("--group") + 1]) if "--group" in argv else 0
  paths = [a for i, a in enumerate(argv)
           if not a.startswith("--") and not (i > 0 and argv[i - 1] == "--group")]
  for path in paths:
    print(f"-- {path}")
    launches, labels = parse(path)
    if not launches:
      print(f"no profiled launches in {path}")
      return 1
    if group and len(launches) != group * len(labels):
      print(f"{len(launches)} launches for {len(labels)} labels x {group}: cannot match them")
      return 1
    if group:
      chunks = [(labels[i] if i < len(labels) else "?", launches[i * group:(i + 1) * group])
                for i in range((len(launches) + group - 1) // group)]
    else:
      chunks = [("", [l]) for l in launches]
    for label, ls in chunks:
      l = ls[-1]
      durs = [x["dur"] for x in ls if "dur" in x]
      nums = " ".join(f"{k} {l[k]:g}" for k in ("dram%", "mem%", "occ%", "regs", "cyc/issue")
                      if k in l)
      dur = f"dur {statistics.median(durs):.2f} us (median of {len(durs)})" if durs else ""
      print(f"{label} | {l['name'][:48]} | {l['geom']} | {dur} {nums}".replace("|  |", "|"))
      if not probe:
        for kind, text in l["rules"]:
          if kind in ("OPT", "WRN") and "pcsamp" not in text:
            print(f"    {kind}: {text[:260]}")


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
