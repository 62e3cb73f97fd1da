"""A real S3-protocol server on localhost for the object-storage tests: moto's server, run in a thread of
the test process, with a bucket made for the tests and the AWS environment pointed at it (for the test
and for the child processes it starts).

The server can be stopped and started again on the same port, its objects kept, as a store that goes
down mid-job and comes back.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Iterator

import pytest

BUCKET = "bulkinfer-tests"


class S3Server:
    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = BUCKET
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        self._server = None
        self._thread: threading.Thread | None = None

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def start(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request in every test's log
        self._server = make_server("127.0.0.1", self.port, DomainDispatcherApplication(create_backend_app),
                                   threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops serving and closes the socket, so that a client is refused at once rather than left waiting."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    import boto3

    server = S3Server()
    server.start()
    saved = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    try:
        boto3.client("s3", endpoint_url=server.endpoint).create_bucket(Bucket=server.bucket)
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stop()
