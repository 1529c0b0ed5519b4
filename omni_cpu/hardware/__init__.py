"""Hardware facts: read a machine (or a sysroot dump of one) into `Facts`."""

from omni_cpu.hardware.facts import CoreType, Facts, Libnuma, Limits, LogicalCpu, NumaNode

__all__ = ["CoreType", "Facts", "Libnuma", "Limits", "LogicalCpu", "NumaNode"]
