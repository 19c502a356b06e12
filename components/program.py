"""The Pulumi program: read this stack's ``gpufabric:`` config, validate, build the fabric.

Bad config stops the program before any resource is registered, with every problem listed
by config path and no Python traceback.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from components.fabric import TrainingFabric
from gpufabric.model.config import StackModel
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import NAMESPACE, model_from_config, stack_warnings
from gpufabric.plan.build import build_plan


def _config_keys() -> set[str]:
    """Every config key the engine passed to this program."""
    keys = set(runtime_config.CONFIG.get())
    keys |= set(runtime_config.get_config_env())
    return keys


def read_config() -> dict[str, Any]:
    """The ``gpufabric:`` sections as decoded values (secrets arrive decrypted)."""
    values: dict[str, Any] = {}
    cfg = pulumi.Config(NAMESPACE)
    for key in sorted(_config_keys()):
        namespace, _, section = key.partition(":")
        if namespace != NAMESPACE:
            continue
        raw = cfg.get(section)
        if raw is None:
            continue
        try:
            values[section] = json.loads(raw)
        except json.JSONDecodeError:
            values[section] = raw  # a plain string value
    return values


def load_model() -> StackModel:
    source = f"stack {pulumi.get_stack()}"
    try:
        model = model_from_config(read_config(), source, from_file=False)
    except StackError as err:
        raise pulumi.RunError(err.report()) from None
    for warning in stack_warnings(model):
        pulumi.log.warn(str(warning))
    return model


def main() -> TrainingFabric:
    stack = pulumi.get_stack()
    model = load_model()
    plan = build_plan(stack, model)
    fabric = TrainingFabric(model.cluster.name, model, plan)
    pulumi.export("planItems", len(plan.items))
    pulumi.export("tenants", fabric.tenant_wiring)
    return fabric
