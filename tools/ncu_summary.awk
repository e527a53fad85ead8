# One line per kernel launch of an Nsight Compute text report (ncu's
# default output, with the SpeedOfLight, Occupancy and LaunchStats
# sections): what tools/gpu_check.sh's ncu steps print after the report,
# so that a session reads the kernels' figures side by side.
#
#   awk -f tools/ncu_summary.awk step-ncu-attention-bf16.log
#
# Columns: duration (us), registers a thread, achieved occupancy, compute
# (SM) and memory throughput, L1/TEX throughput (% of peak), grid x block.
# A figure the report lacks prints as "-".

function shown(key) { return (key in value) ? value[key] : "-" }

function flush() {
  if (name == "") return
  printf "%-40s %10s %5s %7s %8s %7s %7s  %s\n", name, shown("duration"), shown("registers"), shown("occupancy"),
         shown("compute"), shown("memory"), shown("l1"), launch
  name = ""
  for (key in value) delete value[key]
}

function figure(key) { value[key] = $NF }

BEGIN {
  printf "%-40s %10s %5s %7s %8s %7s %7s  %s\n", "kernel", "us", "regs", "occ %", "SM %", "mem %", "L1 %", "grid x block"
}

# A launch's header: "  void ns::Kernel<args>(params) (grid)x(block), Context 1, Stream 13, Device 0, CC 9.0".
/^  [^ ].*\), Context [0-9]+, Stream [0-9]+, Device [0-9]+/ {
  flush()
  header = $0
  sub(/^ +(void +)?/, "", header)
  name = header
  sub(/\(.*/, "", name)              # the parameter list and the rest
  sub(/^.*::/, "", name)             # namespaces ("unnamed>::" too)
  launch = header
  sub(/, Context.*/, "", launch)
  sub(/^.*\) \(/, "(", launch)       # "(grid)x(block)"
  next
}
name != "" && /^ +Duration +/ {
  unit = $2
  duration = $NF
  gsub(/,/, "", duration)
  if (unit == "ms") duration *= 1000
  else if (unit == "ns") duration /= 1000
  else if (unit == "s" || unit == "second") duration *= 1000000
  value["duration"] = sprintf("%.2f", duration)
  next
}
name != "" && /^ +Registers Per Thread +/ { figure("registers"); next }
name != "" && /^ +Achieved Occupancy +/ { figure("occupancy"); next }
name != "" && /^ +Compute \(SM\) Throughput +/ { figure("compute"); next }
name != "" && /^ +Memory Throughput +%/ { figure("memory"); next }
name != "" && /^ +L1\/TEX Cache Throughput +/ { figure("l1"); next }

END {
  flush()
}
