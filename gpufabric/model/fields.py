"""The value types and the base model every part of the stack model is made of.

They live apart from :mod:`gpufabric.model.config` so that the settings each queueing
authority owns (:mod:`gpufabric.authorities.settings`) are written with the same types and
rules without importing the stack model they are part of.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from gpufabric.model.redaction import redact

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
MAX_DURATION_S = 7 * 24 * 3600


_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def canonical_host(value: str) -> str | None:
    """An IP address in its canonical form, or a host name as given; None when ``value`` is
    neither (a scheme, port, path or stray character)."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    return value if len(value) <= 253 and _HOST.match(value) else None


def show_value(value: str) -> str:
    """A refused string as messages show it: quoted, escaped, short (it may be long or hold
    newlines that would otherwise break the report or a runbook), whatever may be a
    credential masked before it is cut."""
    value = redact(value)
    return repr(value[:60]) + ("..." if len(value) > 60 else "")


def matching(
    kind: str, pattern: re.Pattern[str], max_len: int, expected: str
) -> Callable[[str], str]:
    """A check that a string matches ``pattern`` and fits ``max_len``, saying what fits."""

    def check(value: str) -> str:
        if len(value) > max_len or not pattern.match(value):
            raise PydanticCustomError(
                kind, "{value} is not " + expected, {"value": show_value(value)}
            )
        return value

    return check


DnsLabel = Annotated[
    str,
    AfterValidator(
        matching(
            "dns_label",
            DNS_LABEL,
            63,
            "a valid name; expected lowercase letters, digits and '-', starting and ending with a "
            "letter or digit, at most 63 characters",
        )
    ),
]

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LabelKey = Annotated[
    str,
    AfterValidator(
        matching(
            "label_key",
            _LABEL_KEY,
            317,
            "a valid Kubernetes label key; expected [prefix/]name, e.g. topology.kubernetes.io/zone",
        )
    ),
]
LabelValue = Annotated[
    str,
    AfterValidator(
        matching(
            "label_value",
            _LABEL_VALUE,
            63,
            "a valid Kubernetes label value; expected at most 63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit (or empty)",
        )
    ),
]


def duration(value: Any) -> int:
    """Accept '5m', '1h30m', '90s' or a number of seconds; return seconds."""
    if isinstance(value, bool):
        raise PydanticCustomError("duration", "expected a duration like 5m or 300s", {})
    if isinstance(value, int):
        seconds = value
    else:
        m = DURATION.match(str(value))
        if not m or not any(m.groups()):
            raise PydanticCustomError(
                "duration",
                "'{value}' is not a duration; expected e.g. 90s, 5m or 1h30m",
                {"value": value},
            )
        h, mi, s = (int(g) if g else 0 for g in m.groups())
        seconds = h * 3600 + mi * 60 + s
    if seconds <= 0:
        raise PydanticCustomError("duration", "duration must be positive", {})
    if seconds > MAX_DURATION_S:
        raise PydanticCustomError(
            "duration", "'{value}' is longer than 7 days; expected e.g. 5m or 1h", {"value": value}
        )
    return seconds


DurationSeconds = Annotated[int, BeforeValidator(duration)]


class Model(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable, and a
    boolean is never taken for a number (YAML `true` is not 1 GPU or 1 Gb/s)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation in (int, float, int | None, float | None):
                raise PydanticCustomError(
                    "boolean_number",
                    "{value} is a boolean (YAML reads true/false/yes/no so); expected a number",
                    {"value": str(value).lower()},
                )
        return value


__all__ = [
    "DNS_LABEL",
    "MAX_DURATION_S",
    "DnsLabel",
    "DurationSeconds",
    "LabelKey",
    "LabelValue",
    "Model",
    "canonical_host",
    "duration",
    "matching",
    "show_value",
]
