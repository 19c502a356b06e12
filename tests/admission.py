"""ValidatingAdmissionPolicies evaluated as the API server evaluates them, with a real CEL
engine (cel-python, whose ``matches`` is RE2 like Kubernetes'): variables in order, then
every validation, against ``object``, ``oldObject`` and ``request``.

Kubernetes compiles with homogeneous aggregate literals (a list's or map's values share one
type); cel-python does not check that, so :class:`Policy` checks the literals of the
policy's variables itself. Kubernetes string library functions the policies use only in
``messageExpression`` (``join``) are not evaluated here.
"""

from __future__ import annotations

import json
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

    def cel(self) -> Any:
        return celpy.json_to_cel(
            {
                "namespace": self.namespace,
                "operation": self.operation,
                "kind": {"group": self.group, "version": "v1", "kind": self.kind},
                "userInfo": {"username": "someone", "groups": self.groups},
            }
        )


class Policy:
    """A ValidatingAdmissionPolicy's variables and validations, compiled once."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.env = celpy.Environment()
        spec = body["spec"]
        self.name = body["metadata"]["name"]
        for v in spec["variables"]:
            if v["expression"].lstrip().startswith(("{", "[")):
                _homogeneous(json.loads(v["expression"]), f"variable {v['name']}")
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec["variables"]]
        self.validations = [
            (
                v["message" if "message" in v else "messageExpression"],
                self._compile(v["expression"]),
            )
            for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> Any:
        return self.env.program(self.env.compile(expression))

    def denials(
        self,
        obj: dict[str, Any],
        request: Request | None = None,
        old: dict[str, Any] | None = None,
    ) -> list[str]:
        """Messages of the validations the object fails (empty: admitted). An expression
        that fails to evaluate denies, as failurePolicy Fail does."""
        request = request or Request(namespace=obj["metadata"]["namespace"])
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
            "request": request.cel(),
        }
        variables: dict[str, Any] = {}
        out = []
        for name, program in self.variables:
            activation["variables"] = celpy.celtypes.MapType(variables)
            try:
                variables[celpy.celtypes.StringType(name)] = program.evaluate(activation)
            except CELEvalError as exc:
                return [f"variable {name} failed: {exc}"]
        activation["variables"] = celpy.celtypes.MapType(variables)
        for message, program in self.validations:
            try:
                result = program.evaluate(activation)
            except CELEvalError as exc:
                out.append(f"{message} (evaluation failed: {exc})")
                continue
            assert isinstance(result, celpy.celtypes.BoolType), (message, result)
            if not result:
                out.append(message)
        return out
