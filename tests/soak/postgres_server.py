"""A PostgreSQL server of the soak's own, from the machine's PostgreSQL binaries: it can be stopped and started
during the soak without touching the server other tests share.

Run as the `postgres` user when the soak runs as root (PostgreSQL refuses root), in a folder under the system
temporary directory that user can reach; trust authentication on loopback only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

START_TIMEOUT_S = 30.0


def postgres_binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), if any."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda path: int(path.parts[-3]))
    return found[-1].parent if found else None


class PostgresServer:
    def __init__(self, port: int) -> None:
        binaries = postgres_binaries()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.bin = binaries
        self.port = port
        self.folder = Path(tempfile.mkdtemp(prefix="helper-soak-postgres-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, *command: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)

    async def _run(self, *command: str, timeout: float = START_TIMEOUT_S) -> None:
        process = await asyncio.create_subprocess_exec(
            *self._as_owner(*command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            async with asyncio.timeout(timeout):
                output, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise RuntimeError(f"{' '.join(command)} did not finish within {timeout:.0f} s") from None
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {output.decode(errors='replace')}")

    async def initialize(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        await self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
        )

    async def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.folder} "
            "-c max_connections=300 -c fsync=off"
        )
        await self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start"
        )

    async def stop(self, mode: str = "fast") -> None:
        """`immediate` ends every server process at once, as a crash does (the next start recovers from the WAL)."""
        await self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        subprocess.run(
            self._as_owner(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"),
            capture_output=True,
            timeout=START_TIMEOUT_S,
        )
        shutil.rmtree(self.folder, ignore_errors=True)
