"""A real Google Cloud Storage emulator for the tests: ``gcp-storage-emulator`` (its JSON API,
which gcsfs speaks) as a process of its own on a free port of 127.0.0.1, in memory, reached
through the real gcsfs client over HTTP. Started by a fixture and stopped by its pid, even on
failure. The emulator checks no credentials: wrong ones cannot be tested against it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.io.servers import free_port, stop_group, wait_listening

EMULATOR = Path(sys.executable).parent / "gcp-storage-emulator"


def available() -> bool:
    return EMULATOR.exists()


class GcsServer:
    def __init__(self, workdir: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(workdir / "gcs.log", "wb")
        self.proc = subprocess.Popen([str(EMULATOR), "start", "-H", "127.0.0.1", "--port",
                                      str(self.port), "--in-memory"], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if not wait_listening(self.proc, self.port, 30, poll=0.1):
            self.stop()
            raise RuntimeError(f"gcp-storage-emulator did not start: "
                               f"{(workdir / 'gcs.log').read_text()[-2000:]}")

    def options(self, **extra) -> dict:
        """``storage_options`` for gcsfs."""
        return {"endpoint_url": self.endpoint, "token": "anon", "project": "gpupipe", **extra}

    def fs(self):
        """A gcsfs filesystem on the emulator (to make buckets, put objects)."""
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(skip_instance_cache=True, **self.options())

    def stop(self) -> None:
        stop_group(self.proc)
        self.log.close()
