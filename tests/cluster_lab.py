"""A small cluster on this machine for the ssh and Slurm tests: a login node and hosts, each a
network namespace (``labkit.runtime.netlab``) with its own hostname and ``/etc/hosts``, and a
real OpenSSH server on each host when asked.

Each host's ``/etc/hosts`` (bind-mounted by ``ip netns exec`` from ``/etc/netns/<ns>/hosts``)
maps every lab name to its lab address and, as Debian does by default, the host's own name to
``127.0.1.1`` as well: the trap a real cluster's first launch falls into. Commands run in a
host through :meth:`ClusterLab.prefix`, which also gives them the host's hostname (a UTS
namespace of their own). Everything (servers, namespaces, files) goes on :meth:`close`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from labkit.runtime.netlab import NetLab

NETNS_ETC = Path("/etc/netns")


def missing_programs(*names: str) -> list[str]:
    return [name for name in names if shutil.which(name) is None
            and not Path("/usr/sbin", name).exists()]


class ClusterLab:
    """``login`` plus ``hosts``, one namespace each, on one bridged subnet."""

    def __init__(self, hosts: tuple[str, ...] = ("h1", "h2"), login: str = "login") -> None:
        self.names = [login, *hosts]
        self.login, self.hosts = login, list(hosts)
        self.folder = Path(tempfile.mkdtemp(prefix="labkit-cluster-"))
        self._servers: list[subprocess.Popen] = []
        self.net = NetLab(len(self.names))
        try:
            self._write_etc()
        except BaseException:
            self.close()
            raise

    def address(self, name: str) -> str:
        return self.net.address(self.names.index(name))

    def namespace(self, name: str) -> str:
        return self.net.namespace(self.names.index(name))

    def _write_etc(self) -> None:
        table = "".join(f"{self.address(n)} {n}\n" for n in self.names)
        for name in self.names:
            etc = NETNS_ETC / self.namespace(name)
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n{table}")

    def prefix(self, name: str) -> list[str]:
        """Run a command on host ``name``: in its namespace, under its hostname."""
        return [*self.net.command_prefix(self.names.index(name)), "unshare", "--uts", "--",
                "sh", "-c", 'hostname "$0" && exec "$@"', name]

    def run(self, name: str, command: list[str], **options) -> subprocess.CompletedProcess:
        options.setdefault("capture_output", True)
        options.setdefault("text", True)
        options.setdefault("timeout", 60)
        return subprocess.run([*self.prefix(name), *command], **options)

    def popen(self, name: str, command: list[str], **options) -> subprocess.Popen:
        proc = subprocess.Popen([*self.prefix(name), *command], **options)
        self._servers.append(proc)
        return proc

    # --- ssh -------------------------------------------------------------------------------

    def start_sshd(self, names: list[str] | None = None) -> Path:
        """A real sshd on each host (root, key only); returns an ssh client config file that
        knows every host's key and holds the client's identity."""
        ssh = self.folder / "ssh"
        ssh.mkdir(exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "id")],
                       check=True)
        (ssh / "authorized_keys").write_text((ssh / "id.pub").read_text())
        known = []
        for name in names or self.hosts:
            key = ssh / f"host_{name}"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                           check=True)
            public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
            known.append(f"{name},{self.address(name)} {public}\n")
            config = ssh / f"sshd_{name}.conf"
            config.write_text(
                f"ListenAddress {self.address(name)}\nHostKey {key}\n"
                f"PidFile {ssh}/sshd_{name}.pid\nAuthorizedKeysFile {ssh}/authorized_keys\n"
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                "LogLevel ERROR\n")
            self.popen(name, ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (ssh / "known_hosts").write_text("".join(known))
        client = ssh / "config"
        client.write_text(
            f"Host *\n  IdentityFile {ssh}/id\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {ssh}/known_hosts\n  StrictHostKeyChecking yes\n"
            "  ConnectTimeout 5\n")
        for name in names or self.hosts:
            self._wait_ssh(name, client)
        return client

    def _wait_ssh(self, name: str, config: Path, wait_s: float = 30) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            probe = self.run(self.login, ["ssh", "-F", str(config), "-o", "BatchMode=yes", name,
                                          "true"])
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {name} did not answer: {probe.stderr.strip()}")
            time.sleep(0.2)

    def leftovers(self, names: list[str] | None = None) -> dict[str, list[int]]:
        """Processes running in each host's namespace, other than the servers the lab started."""
        servers = {proc.pid for proc in self._servers}
        found = {}
        for name in names or self.hosts:
            pids = subprocess.run(["ip", "netns", "pids", self.namespace(name)],
                                  capture_output=True, text=True).stdout.split()
            found[name] = sorted(int(p) for p in pids if int(p) not in servers)
        return found

    # --- cleanup ---------------------------------------------------------------------------

    def close(self) -> None:
        for proc in self._servers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._servers:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in self.names:
            try:
                shutil.rmtree(NETNS_ETC / self.namespace(name), ignore_errors=True)
            except Exception:  # noqa: BLE001 (the lab was never built)
                pass
        if hasattr(self, "net"):
            self.net.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ClusterLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
