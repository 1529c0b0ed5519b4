"""Hardware facts: read a machine (or a sysroot dump of one) into `Facts`."""

from omni_cpu.hardware.facts import CoreType, Facts, Libnuma, Limits, LogicalCpu, NumaNode
from omni_cpu.hardware.probe import read_facts

__all__ = ["CoreType", "Facts", "Libnuma", "Limits", "LogicalCpu", "NumaNode", "read_facts"]
