"""A real S3-protocol server on localhost (moto's server mode) for tests of object storage.

Session-scoped: started once, with the AWS environment pointing at it (a subprocess gets `.env`).
`stop()` and `start()` take it down and bring it back on the same port, with its objects kept.
"""

from __future__ import annotations

import os
import socket
from typing import Iterator

import pytest


class S3Server:
    def __init__(self, port: int, bucket: str) -> None:
        from moto.server import ThreadedMotoServer

        self.port = port
        self.bucket = bucket
        self.endpoint = f"http://127.0.0.1:{port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    import boto3

    server = S3Server(_free_port(), "bulkinfer-test")
    server.start()
    saved = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    boto3.client("s3", endpoint_url=server.endpoint).create_bucket(Bucket=server.bucket)
    yield server
    server.stop()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
