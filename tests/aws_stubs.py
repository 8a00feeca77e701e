"""AWS answers for the calls moto does not implement, given the way a real response takes.

A botocore ``before-call`` hook answers the call before any HTTP request is made; the client then
parses the answer as it would parse AWS's. An answer is first validated against the operation's
output shape in the service's botocore model (what ``botocore.stub.Stubber`` does), so a stub that
AWS could never send fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from botocore.validate import validate_parameters


class _SearchPaths(list):
    """A loader's search paths, each once: every boto3 Session adds boto3's own to its loader's."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


# One data loader for every session: botocore's service models (megabytes of JSON, the same for every
# session) are read once per process. A new session reads them again otherwise: moto starts every
# test with a new boto3 default session, and the code under test makes sessions of its own; that was
# most of the set-up time of the tests that use moto.
LOADER = botocore.loaders.Loader(extra_search_paths=_SearchPaths())


def _loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    return LOADER if not search_path_string else botocore.loaders.create_loader(search_path_string)


def share_service_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every botocore session made from now on (until ``monkeypatch`` is undone) reads the service
    models through LOADER (as botocore would, with no AWS_DATA_PATH)."""
    monkeypatch.setattr(botocore.session, "create_loader", _loader)


def new_session(region: str = "us-west-2") -> boto3.session.Session:
    """A boto3 session of its own (hooks stay with the test that registers them), sharing the loader."""
    core = botocore.session.get_session()
    core.register_component("data_loader", LOADER)
    return boto3.session.Session(botocore_session=core, region_name=region)


class _Http:
    """What botocore reads of an HTTP response returned by a before-call hook."""

    def __init__(self, status: int):
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.content = b""
        self.text = ""


class Error:
    """An error answer: AWS's error code, message and HTTP status."""

    def __init__(self, code: str, message: str = "test error", status: int = 400):
        self.code, self.message, self.status = code, message, status


Answer = dict[str, Any] | Error


def answer(session: Any, service: str, operation: str, respond: Callable[[dict], Answer]) -> list[dict]:
    """Answer ``operation`` of ``service`` (botocore's service id: 'ec2', 'service-quotas'...) with
    ``respond(request)``, the request as botocore serialized it (``body``, ``query_string``...): a
    response (validated against the operation's output shape) or an ``Error``. Returns the requests
    seen, in order."""
    shape = session._session.get_service_model(service).operation_model(operation).output_shape
    seen: list[dict] = []

    def hook(params: dict, **_: Any):
        seen.append(params)
        result = respond(params)
        if isinstance(result, Error):
            return _Http(result.status), {
                "Error": {"Code": result.code, "Message": result.message},
                "ResponseMetadata": {"HTTPStatusCode": result.status},
            }
        if shape is not None:
            validate_parameters(result, shape)  # raises ParamValidationError for an answer AWS could not give
        return _Http(200), {**result, "ResponseMetadata": {"HTTPStatusCode": 200}}

    session.events.register(f"before-call.{service}.{operation}", hook)
    return seen


def answer_quotas(session: Any, quotas: dict[str, float]) -> None:
    def respond(request: dict):
        asked = json.loads(request["body"])
        code = asked["QuotaCode"]
        if code not in quotas:
            return Error("NoSuchResourceException")
        return {"Quota": {"ServiceCode": asked["ServiceCode"], "QuotaCode": code, "Value": quotas[code]}}

    answer(session, "service-quotas", "GetServiceQuota", respond)
