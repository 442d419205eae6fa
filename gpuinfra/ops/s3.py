"""An S3 client whose every answer keeps the bounds of gpuinfra.ops.http.

botocore's read_timeout bounds each socket read, not an answer: an endpoint that sends a byte
every few seconds, headers or body, would hold a listing for as long as it kept sending, and one
that never ends its body would be read into memory until the kernel killed the process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import urllib3
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    HTTPClientError,
    ReadTimeoutError,
)

from gpuinfra.ops import http

CONNECT_S = 5
READ_S = 15
ATTEMPTS = 2
# A listing ends within these, whatever the endpoint answers: a model repository holds a few
# files per model version, and an endpoint that hands out a new continuation token with each
# page would otherwise be paged forever.
MAX_KEYS = 100_000
LISTING_S = 300.0


# botocore ships no type hints: its exceptions are Any to mypy.
class NoWholeAnswer(ReadTimeoutError):  # type: ignore[misc]
    """An answer not whole within ANSWER_S: a read timeout, so a second attempt follows."""

    fmt = 'No whole answer within {seconds:.0f} s from endpoint URL: "{endpoint_url}"'


class AnswerTooLarge(BotoCoreError):  # type: ignore[misc]
    """An answer over MAX_ANSWER_BYTES: not retried, a second attempt would read the same."""

    fmt = 'The answer is larger than {mib} MiB from endpoint URL: "{endpoint_url}"'


class EndlessListing(BotoCoreError):  # type: ignore[misc]
    """A listing that had not ended within MAX_KEYS keys or LISTING_S seconds."""

    fmt = (
        "The listing had not ended after {what}, far more than a model repository holds; "
        'check the prefix (endpoint URL: "{endpoint_url}")'
    )


def list_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    """Every key under ``prefix``, page by page, within MAX_KEYS keys and LISTING_S seconds
    (each page within the client's own bounds)."""
    keys: list[str] = []
    started = time.monotonic()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [item["Key"] for item in page.get("Contents", [])]
        more = page.get("IsTruncated", False)
        if more and len(keys) >= MAX_KEYS:
            what = f"{len(keys):,} objects"
        elif more and time.monotonic() - started > LISTING_S:
            what = f"{LISTING_S:.0f} s ({len(keys):,} objects)"
        else:
            continue
        raise EndlessListing(what=what, endpoint_url=s3.meta.endpoint_url)
    return keys


def client(region: str | None, endpoint_url: str | None) -> Any:
    """A boto3 S3 client: CONNECT_S to connect, READ_S for each read, ATTEMPTS attempts, and
    each answer whole within ANSWER_S and MAX_ANSWER_BYTES. Every answer is read whole, an
    object's body too: a client to list with, not to download."""
    s3 = boto3.client(
        "s3",
        region_name=region,
        endpoint_url=endpoint_url,
        config=Config(
            connect_timeout=CONNECT_S,
            read_timeout=READ_S,
            # The legacy mode's "max_attempts" counts retries: 2 made three attempts.
            retries={"mode": "standard", "total_max_attempts": ATTEMPTS},
        ),
    )
    # The client's own HTTP session sends, so its TLS verification, proxies and connection pool
    # are what they would be without the bounds.
    session = s3._endpoint.http_session

    def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        return _send(session, request)

    s3.meta.events.register("before-send.s3", send)
    return s3


def _send(session: Any, request: AWSPreparedRequest) -> AWSResponse:
    """The answer to ``request``, read whole within the bounds.

    It is read in a thread of its own: a socket read that a byte now and then keeps alive
    cannot be interrupted otherwise. Past the deadline the thread is left to end with its
    connection (a daemon, its memory capped as well) and the attempt fails.
    """
    # botocore would read the whole body as it sends; _read does, bounded.
    request.stream_output = True
    outcome: list[AWSResponse | Exception] = []

    def fetch() -> None:
        try:
            outcome.append(_read(session.send(request), request))
        except Exception as failed:
            outcome.append(failed)

    worker = threading.Thread(target=fetch, name="s3-answer", daemon=True)
    worker.start()
    worker.join(http.ANSWER_S)
    if not outcome:
        raise NoWholeAnswer(endpoint_url=request.url, seconds=http.ANSWER_S)
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]


def _read(response: AWSResponse, request: AWSPreparedRequest) -> AWSResponse:
    """``response`` with its body read, up to MAX_ANSWER_BYTES; a failed read is the error
    botocore's own reading of the body gives."""
    raw = response.raw
    try:
        body = _capped(raw, request.url)
    except urllib3.exceptions.ReadTimeoutError as failed:
        raise ReadTimeoutError(endpoint_url=request.url, error=failed) from None
    except urllib3.exceptions.ProtocolError as failed:
        raise ConnectionClosedError(
            error=failed, request=request, endpoint_url=request.url
        ) from None
    except (urllib3.exceptions.HTTPError, OSError) as failed:
        raise HTTPClientError(error=failed) from None
    finally:
        # Back to the pool: one that _capped closed connects anew when next taken.
        raw.release_conn()
    return AWSResponse(request.url, response.status_code, response.headers, _Read(body))


def _capped(raw: Any, url: str) -> bytes:
    """The body of ``raw`` (urllib3's response), closed when it is not read to its end."""
    body = bytearray()
    try:
        for chunk in raw.stream(1 << 16):
            body += chunk
            if len(body) > http.MAX_ANSWER_BYTES:
                raise AnswerTooLarge(endpoint_url=url, mib=http.MAX_ANSWER_BYTES >> 20)
    except BaseException:
        raw.close()
        raise
    return bytes(body)


class _Read:
    """A body already read, streamed as botocore reads a response's."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        yield self._body
