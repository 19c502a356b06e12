"""ValidatingAdmissionPolicies evaluated as the API server evaluates them, with a real CEL
engine (cel-python, whose ``matches`` is RE2 like Kubernetes'): variables in order, then
every validation, against ``object``, ``oldObject`` and ``request``.

Kubernetes compiles with homogeneous aggregate literals (a list's or map's values share one
type); cel-python does not check that, so :class:`Policy` checks the literals of the
policy's variables itself. Kubernetes string library functions the policies use only in
``messageExpression`` (``join``) are not evaluated here.

CEL is a pure function of the expression and the activation, and cel-python's interpreter
is slow (milliseconds an expression), so work is done once per process and reused where
the result cannot differ: each expression text is compiled once, an expression that reads
nothing of the activation (the policies' literal lists and maps) is evaluated once, and the
denials of a policy for an admission are kept under the exact text of the policy's
variables and validations and of the object, old object and request (the stacks of the
golden matrix share most of their policies, and their catalogues most of their cases).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy.evaluation import CELEvalError


def _homogeneous(value: Any, where: str) -> None:
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, list):
        items = value
    else:
        return
    kinds = {type(v).__name__ for v in items}
    assert len(kinds) <= 1, f"{where}: a literal mixes {sorted(kinds)} (Kubernetes refuses it)"
    for v in items:
        _homogeneous(v, where)


@dataclass
class Request:
    """What ``request`` holds for an admission (the parts the policies read)."""

    namespace: str
    kind: str = "Pod"
    group: str = ""
    operation: str = "CREATE"
    groups: list[str] = field(default_factory=lambda: ["system:authenticated"])
    username: str = "someone"

    def cel(self) -> Any:
        return celpy.json_to_cel(
            {
                "namespace": self.namespace,
                "operation": self.operation,
                "kind": {"group": self.group, "version": "v1", "kind": self.kind},
                "userInfo": {"username": self.username, "groups": self.groups},
            }
        )


_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}
_CONSTANTS: dict[str, tuple[bool, Any]] = {}
_DENIALS: dict[tuple[str, str], tuple[str, ...]] = {}
_READS_ACTIVATION = re.compile(
    r"\b(object|oldObject|request|variables|params|namespaceObject|authorizer)\b"
)
"""The names a ValidatingAdmissionPolicy's activation binds: an expression without any of
them is a constant."""


def _compile(expression: str) -> Any:
    program = _PROGRAMS.get(expression)
    if program is None:
        program = _PROGRAMS[expression] = _ENV.program(_ENV.compile(expression))
    return program


def _evaluate(expression: str, program: Any, activation: dict[str, Any]) -> Any:
    """The program's value (CELEvalError when it fails), once per process for a constant."""
    if _READS_ACTIVATION.search(expression):
        return program.evaluate(activation)
    if expression not in _CONSTANTS:
        try:
            _CONSTANTS[expression] = (True, program.evaluate(activation))
        except CELEvalError as exc:
            _CONSTANTS[expression] = (False, exc)
    ok, value = _CONSTANTS[expression]
    if not ok:
        raise value.with_traceback(None)
    return value


class Policy:
    """A ValidatingAdmissionPolicy's variables and validations, compiled once."""

    def __init__(self, body: dict[str, Any]) -> None:
        spec = body["spec"]
        self.name = body["metadata"]["name"]
        for v in spec["variables"]:
            if v["expression"].lstrip().startswith(("{", "[")):
                _homogeneous(json.loads(v["expression"]), f"variable {v['name']}")
        self.conditions = [
            (c["expression"], _compile(c["expression"])) for c in spec.get("matchConditions", ())
        ]
        self.variables = [
            (v["name"], v["expression"], _compile(v["expression"])) for v in spec["variables"]
        ]
        self.validations = [
            (
                v["message" if "message" in v else "messageExpression"],
                v["expression"],
                _compile(v["expression"]),
            )
            for v in spec["validations"]
        ]
        # everything evaluation reads of the policy (its metadata, e.g. the stack's label,
        # and its match rules take no part)
        self.key = json.dumps(
            [self.conditions, self.variables, self.validations], default=lambda _: None
        )

    def denials(
        self,
        obj: dict[str, Any],
        request: Request | None = None,
        old: dict[str, Any] | None = None,
    ) -> list[str]:
        """Messages of the validations the object fails (empty: admitted). An expression
        that fails to evaluate denies, as failurePolicy Fail does."""
        request = request or Request(namespace=obj["metadata"]["namespace"])
        key = (self.key, json.dumps([obj, old, dataclasses.asdict(request)]))
        if key not in _DENIALS:
            _DENIALS[key] = tuple(self._denials(obj, request, old))
        return list(_DENIALS[key])

    def _denials(
        self, obj: dict[str, Any], request: Request, old: dict[str, Any] | None
    ) -> list[str]:
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
            "request": request.cel(),
        }
        for expression, program in self.conditions:
            # matchConditions: a false one leaves the request to other policies (an error
            # denies, as failurePolicy Fail does)
            try:
                if not _evaluate(expression, program, activation):
                    return []
            except CELEvalError as exc:
                return [f"matchCondition failed: {exc}"]
        variables: dict[str, Any] = {}
        out = []
        for name, expression, program in self.variables:
            activation["variables"] = celpy.celtypes.MapType(variables)
            try:
                value = _evaluate(expression, program, activation)
            except CELEvalError as exc:
                return [f"variable {name} failed: {exc}"]
            variables[celpy.celtypes.StringType(name)] = value
        activation["variables"] = celpy.celtypes.MapType(variables)
        for message, expression, program in self.validations:
            try:
                result = _evaluate(expression, program, activation)
            except CELEvalError as exc:
                out.append(f"{message} (evaluation failed: {exc})")
                continue
            assert isinstance(result, celpy.celtypes.BoolType), (message, result)
            if not result:
                out.append(message)
        return out
