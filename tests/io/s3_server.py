"""A real S3-compatible server for the tests: moto's ``moto_server`` as a process of its own on a
free port of 127.0.0.1, with credentials checked (moto's IAM), reached through the real s3fs /
botocore clients over HTTP. Started by a fixture and stopped by its pid, even on failure."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: requests moto answers before it starts checking signatures (the bring-up below)
UNCHECKED = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, workdir: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(UNCHECKED),
               "AWS_DEFAULT_REGION": "us-east-1"}
        server = Path(sys.executable).with_name("moto_server")
        self.log = open(workdir / "moto.log", "wb")
        self.proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto_server did not start: "
                                       f"{(workdir / 'moto.log').read_text()[-2000:]}") \
                        from None
                time.sleep(0.1)
        self.key, self.secret = self._user()

    def _user(self) -> tuple[str, str]:
        """An IAM user with full access and its key (the unchecked requests)."""
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name="us-east-1",
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="gpupipe")
        iam.put_user_policy(UserName="gpupipe", PolicyName="all", PolicyDocument=(
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", '
            '"Resource": "*"}]}'))
        key = iam.create_access_key(UserName="gpupipe")["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def options(self, **extra) -> dict:
        """``storage_options`` for s3fs."""
        return {"endpoint_url": self.endpoint, "key": self.key, "secret": self.secret,
                "client_kwargs": {"region_name": "us-east-1"}, **extra}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.key, aws_secret_access_key=self.secret)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
