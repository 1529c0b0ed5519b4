"""The Pod Security Standards' "restricted" profile, as Kubernetes publishes it, for a pod spec.

From https://kubernetes.io/docs/concepts/security/pod-security-standards/ (every
"baseline" control, which "restricted" includes, then the "restricted" ones), checked
on a pod spec the way the admission controller reads it: a container's own
securityContext wins over the pod's where both may say.
"""

from __future__ import annotations

from typing import Any

# Baseline: capabilities a container may add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {
    None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t",
}  # fmt: skip
# Restricted: the only volume types.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        container
        for kind in ("initContainers", "containers", "ephemeralContainers")
        for container in pod.get(kind) or []
    ]


def _effective(pod: dict[str, Any], container: dict[str, Any], key: str) -> Any:
    own = (container.get("securityContext") or {}).get(key)
    return own if own is not None else (pod.get("securityContext") or {}).get(key)


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Every "restricted" control this pod spec breaks, one line each; [] when it passes."""
    found: list[str] = []
    context = pod.get("securityContext") or {}
    # Baseline.
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(f"host namespaces: {key} is true")
    sysctls = {item.get("name") for item in context.get("sysctls") or []}
    if sysctls - SAFE_SYSCTLS:
        found.append(f"sysctls: {sorted(sysctls - SAFE_SYSCTLS)} are not safe")
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        found.append("host process: the pod's windowsOptions.hostProcess is true")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            found.append(f"hostPath volumes: {volume['name']}")
        if kinds - RESTRICTED_VOLUMES:
            found.append(f"volume types: {volume['name']} is {sorted(kinds)}")
    seccomp_pod = (context.get("seccompProfile") or {}).get("type")
    for container in _containers(pod):
        name = container.get("name")
        own = container.get("securityContext") or {}
        if own.get("privileged"):
            found.append(f"privileged containers: {name}")
        if (own.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"host process: {name}")
        if own.get("procMount") not in (None, "Default"):
            found.append(f"/proc mount type: {name} is {own['procMount']}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"host ports: {name}")
        selinux = _effective(pod, container, "seLinuxOptions") or {}
        if selinux.get("type") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"SELinux: {name}")
        apparmor = (_effective(pod, container, "appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"AppArmor: {name} is {apparmor}")
        capabilities = own.get("capabilities") or {}
        added = set(capabilities.get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"capabilities (baseline): {name} adds {sorted(added)}")
        # Restricted.
        if own.get("allowPrivilegeEscalation") is not False:
            found.append(f"privilege escalation: {name} does not set it false")
        if _effective(pod, container, "runAsNonRoot") is not True:
            found.append(f"running as non-root: {name} does not set runAsNonRoot true")
        if _effective(pod, container, "runAsUser") == 0:
            found.append(f"running as non-root user: {name} runs as user 0")
        seccomp = (own.get("seccompProfile") or {}).get("type") or seccomp_pod
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccomp: {name} has {seccomp or 'no'} profile")
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"capabilities: {name} does not drop ALL")
        if added - {"NET_BIND_SERVICE"}:
            found.append(f"capabilities: {name} adds {sorted(added - {'NET_BIND_SERVICE'})}")
    return found
