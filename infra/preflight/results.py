"""A preflight check's result (PASS, FAIL, SKIP, WARN: one report line), and how an AWS call's
failure becomes one: access denied is a FAIL that names the IAM action, an endpoint that cannot
answer (an emulator without the call, a server error) a SKIP; credential and connection errors
concern every check and propagate. Also the paginated calls and the report's wording helpers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PASS, FAIL, SKIP, WARN = "PASS", "FAIL", "SKIP", "WARN"

# Error codes meaning "the caller may not do this".
_ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess", "Forbidden"}
# Error codes meaning "this endpoint does not implement the call" (emulators).
_NOT_IMPLEMENTED = {"NotImplemented", "NotImplementedException", "InvalidAction", "UnknownOperationException", "404"}
# Error codes of a server that failed to answer (after botocore's retries).
_SERVER_ERRORS = {
    "InternalFailure",
    "InternalError",
    "InternalServerError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
}


@dataclass(frozen=True)
class CheckResult:
    """One line of the report."""

    status: str  # PASS, FAIL, SKIP or WARN
    check: str  # what was checked
    detail: str  # what was found
    fix: str = ""  # on FAIL: what to do

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def line(self) -> str:
        text = f"{self.status}  {self.check}: {self.detail}"
        if self.status in (FAIL, WARN) and self.fix:
            text += f" -> {self.fix}"
        return text


# ---------------------------------------------------------------------------------------------
# AWS error handling
# ---------------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 160) -> str:
    """An error message fit for one report line (emulators answer with HTML pages)."""
    text = " ".join(re.sub(r"<[^>]+>", " ", str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_code(err: Exception) -> tuple[str, str]:
    response = getattr(err, "response", None) or {}
    error = response.get("Error") or {}
    return str(error.get("Code", "")), _one_line(error.get("Message", err), 100)


def _http_status(err: Exception) -> int:
    response = getattr(err, "response", None) or {}
    return int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)


def _is_client_error(err: Exception) -> bool:
    from botocore.exceptions import ClientError

    return isinstance(err, ClientError)


def _unanswered(err: Exception) -> str | None:
    """Why the endpoint could not answer the call at all (not implemented by an emulator, or a
    server error after botocore's retries), else None."""
    if isinstance(err, NotImplementedError):
        return "does not implement it (a local emulator?)"
    if not _is_client_error(err):
        return None
    code, message = _error_code(err)
    if code in _NOT_IMPLEMENTED or "not implemented" in message.lower():
        return f"does not implement it ({code}: {message})"
    status = _http_status(err) or (int(code) if code.isdigit() else 0)
    if status >= 500 or code in _SERVER_ERRORS:
        return f"answered with a server error ({code}: {message}); run preflight again later"
    return None


def _api_failure(check: str, call: str, iam_action: str, err: Exception) -> CheckResult:
    """A check whose AWS call failed: SKIP when the endpoint could not answer it, else FAIL."""
    why = _unanswered(err)
    if why:
        return CheckResult(SKIP, check, f"not checked: for {call}, the AWS endpoint {why}")
    code, message = _error_code(err)
    if code in _ACCESS_DENIED:
        return CheckResult(
            FAIL,
            check,
            f"not allowed to call {call} ({code})",
            f"allow {iam_action} for this identity, or run preflight with one that has it",
        )
    return CheckResult(
        FAIL, check, f"{call} failed: {code}: {message}", "fix the AWS error above and run preflight again"
    )


def _guard(check: str, call: str, iam_action: str, fn: Callable[[], list[CheckResult]]) -> list[CheckResult]:
    """Run one check; an AWS error of the call becomes its result. Credential and connection
    problems (botocore's own errors) propagate: they concern every check."""
    try:
        return fn()
    except NotImplementedError as err:
        return [_api_failure(check, call, iam_action, err)]
    except Exception as err:
        if _is_client_error(err):
            return [_api_failure(check, call, iam_action, err)]
        raise


def _paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
    if client.can_paginate(operation):
        out: list[Any] = []
        for page in client.get_paginator(operation).paginate(**kwargs):
            out.extend(page.get(key, []))
        return out
    return list(getattr(client, operation)(**kwargs).get(key, []))


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _list(items: Any) -> str:
    items = sorted(items)
    return ", ".join(items) if items else "none"
