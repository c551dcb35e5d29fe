"""A real S3-compatible server for the tests: moto's ``moto_server`` as a process of its own
(from ``.venv-moto``, which ``make test`` installs) on a free port of 127.0.0.1, with
credentials checked (moto's IAM), reached through the real s3fs client over HTTP. Started by a
fixture and stopped by its pid, even on failure."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.io.servers import free_port, stop_group, wait_listening

REPO = Path(__file__).resolve().parents[2]
MOTO = REPO / ".venv-moto" / "bin"
#: requests moto answers before it starts checking signatures (the IAM bring-up below)
UNCHECKED = 3
#: an IAM user with full access and its key, made with the server's own boto3
BOOTSTRAP = """
import json, sys, boto3
iam = boto3.client("iam", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
iam.create_user(UserName="gpupipe")
iam.put_user_policy(UserName="gpupipe", PolicyName="all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
key = iam.create_access_key(UserName="gpupipe")["AccessKey"]
print(json.dumps([key["AccessKeyId"], key["SecretAccessKey"]]))
"""


def available() -> bool:
    return (MOTO / "moto_server").exists()


class S3Server:
    def __init__(self, workdir: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(UNCHECKED),
               "AWS_DEFAULT_REGION": "us-east-1"}
        self.log = open(workdir / "moto.log", "wb")
        self.proc = subprocess.Popen([str(MOTO / "moto_server"), "-H", "127.0.0.1", "-p",
                                      str(self.port)], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        if not wait_listening(self.proc, self.port, 30, poll=0.1):
            self.stop()
            raise RuntimeError(f"moto_server did not start: "
                               f"{(workdir / 'moto.log').read_text()[-2000:]}")
        try:
            r = subprocess.run([str(MOTO / "python"), "-c", BOOTSTRAP, self.endpoint],
                               capture_output=True, text=True, timeout=60, check=True)
        except subprocess.CalledProcessError as e:
            self.stop()
            raise RuntimeError(f"moto IAM bring-up failed: {e.stderr[-2000:]}") from None
        self.key, self.secret = json.loads(r.stdout)

    def options(self, **extra) -> dict:
        """``storage_options`` for s3fs."""
        return {"endpoint_url": self.endpoint, "key": self.key, "secret": self.secret,
                "client_kwargs": {"region_name": "eu-west-1"}, **extra}

    def fs(self):
        """An s3fs filesystem with the server's credentials (to make buckets, put objects)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.options())

    def stop(self) -> None:
        stop_group(self.proc)
        self.log.close()
