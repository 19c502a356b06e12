"""Read nccl-tests' ``-J`` JSON output (format version 3: config, devices, results,
footers) into a :class:`~.parsed.Run`, as the text log is read by :mod:`.parse`.

Numbers may be written as strings and booleans as the strings "true"/"false" (util.cu);
a value of the wrong type or an impossible number is never read as a good value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufabric.verify.nccl.parsed import (
    MAX_BYTES,
    Row,
    Run,
    add_out_of_bounds,
    cell_value,
    sweep_rows,
)

MAX_JSON_DEPTH = 16


def _json_number(value: Any, what: str, run: Run) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        run.malformed.append(f"{what} is {type(value).__name__}, not a number")
        return None
    if isinstance(value, str):
        number, bad = cell_value(value.strip())
        if bad is not None:
            return float("nan")
        if number is None:
            run.malformed.append(f"{what} is the string {value[:20]!r}, not a number")
        return number
    if isinstance(value, int) and abs(value) >= _FLOAT_INT_LIMIT:
        run.malformed.append(f"{what} is an integer of {value.bit_length()} bits, not a number")
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return float("nan")
    return float(value)


_FLOAT_INT_LIMIT = 1 << 1000
"""Integers a float holds (up to about 2**1024); a larger JSON integer is no measurement."""


def _json_identity(doc: dict[str, Any], run: Run) -> None:
    """The test's name (its program, from ``args``) and the ranks' hosts and pids
    (``config.devices``, where nccl-tests 2.19 writes them; a top-level list is read too)."""
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        run.test = args[0].rsplit("/", 1)[-1]
    config = doc.get("config")
    devices = config.get("devices") if isinstance(config, dict) else None
    for device in [*_list(devices), *_list(doc.get("devices"))]:
        if isinstance(device, dict) and isinstance(device.get("hostname"), str):
            run.hosts.add(device["hostname"])
            pid = device.get("pid")
            if isinstance(pid, int) and not isinstance(pid, bool):
                run.pids.add((device["hostname"], pid))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


_JSON_BOOL = {True: True, False: False, "true": True, "false": False}
"""nccl-tests writes its booleans as the strings "true" and "false" (util.cu jsonBool)."""


@dataclass(frozen=True)
class _Part:
    """One ``out_of_place`` or ``in_place`` measurement of a -J result."""

    busbw: float | None
    wrong: int
    impossible: tuple[str, ...] = ()


def _json_part(part: Any, where: str, size: int, run: Run) -> _Part | None:
    """None (and the reason in ``run.malformed``) when ``part`` is not an object. An
    impossible bandwidth (NaN, infinite, negative) is named and read as no value; only a
    positive count of wrong elements counts."""
    if not isinstance(part, dict):
        run.malformed.append(f"{where} is not an object")
        return None
    bw = _json_number(part.get("bus_bw"), f"{where}.bus_bw", run)
    impossible: list[str] = []
    if bw is not None and (bw != bw or bw < 0):
        impossible.append(f"bus_bw {part.get('bus_bw')} at {size} B")
        bw = None
    wrong = _json_number(part.get("nwrong"), f"{where}.nwrong", run)
    count = 0
    if wrong is not None and (wrong != wrong or wrong < 0 or wrong != int(wrong)):
        impossible.append(f"nwrong {str(part.get('nwrong'))[:20]} at {size} B")
    elif wrong is not None:
        count = int(wrong)
    return _Part(bw, count, tuple(impossible))


def _json_row(i: int, item: Any, run: Run) -> Row | None:
    """One entry of ``results``; None (and the reason in ``run.malformed``) when unusable."""
    if not isinstance(item, dict):
        run.malformed.append(f"results[{i}] is not an object")
        return None
    size = item.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < MAX_BYTES:
        run.malformed.append(f"results[{i}].size is not a byte count")
        return None
    row = Row(size=size, busbw_oop=None, busbw_ip=None, wrong=0)
    for key in ("out_of_place", "in_place"):
        if item.get(key) is None:
            continue
        part = _json_part(item[key], f"results[{i}].{key}", size, run)
        if part is None:
            continue
        row.impossible.extend(part.impossible)
        if key == "out_of_place":
            row.busbw_oop = part.busbw
        else:
            row.busbw_ip = part.busbw
        row.wrong += part.wrong
    return row


def _json_results(doc: dict[str, Any], run: Run) -> None:
    results = doc.get("results")
    if not isinstance(results, list):
        run.malformed.append("no results list")
        results = []
    for i, item in enumerate(results):
        row = _json_row(i, item, run)
        if row is not None:
            run.rows.append(row)


def _json_footers(doc: dict[str, Any], run: Run) -> None:
    """Out-of-bounds count, the average bus bandwidth, and whether the run ended."""
    oob = doc.get("out_of_bounds")
    if oob is not None:
        _json_out_of_bounds(oob, run)
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict) and isinstance(avg.get("bandwidth"), int | float):
        run.avg_busbw = _json_number(avg["bandwidth"], "average_bus_bandwidth.bandwidth", run)
    if isinstance(avg, dict) and "okay" in avg:
        okay = avg["okay"]  # "unchecked" without NCCL_TESTS_MIN_BW, else true/false
        if isinstance(okay, bool | str) and okay in _JSON_BOOL:
            run.avg_failed |= not _JSON_BOOL[okay]
        elif okay != "unchecked":
            run.malformed.append(
                f"average_bus_bandwidth.okay is {str(okay)[:20]!r}, not true, false or unchecked"
            )
    run.concluded = "end_time" in doc
    run.footer = run.concluded or oob is not None
    for error in _list(doc.get("errors")):
        if not isinstance(error, str):
            run.malformed.append("errors holds a non-string")
        elif error.strip():  # nccl-tests writes [""] when NCCL had no last error
            run.fatal.append(f"-J errors: {error[:200]}")


def _json_out_of_bounds(oob: Any, run: Run) -> None:
    """``{"count": N, "okay": "true"|"false"}``; a count that is not a whole number, or an
    ``okay`` that is neither boolean nor "true"/"false", is malformed (never OK)."""
    count = oob.get("count") if isinstance(oob, dict) else None
    okay = oob.get("okay") if isinstance(oob, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        run.malformed.append(f"out_of_bounds.count is {str(count)[:20]!r}, not a count")
        run.out_of_bounds_ok = False
        return
    if not isinstance(okay, bool | str) or okay not in _JSON_BOOL:
        run.malformed.append(f"out_of_bounds.okay is {str(okay)[:20]!r}, not true or false")
        run.out_of_bounds_ok = False
        return
    add_out_of_bounds(run, count, _JSON_BOOL[okay])


def _json_config(doc: dict[str, Any], run: Run) -> None:
    """The sizes the run announced: minimum to maximum bytes by its step factor (or bytes)."""
    config = doc.get("config")
    if not isinstance(config, dict):
        return
    low, high = config.get("minimum_bytes"), config.get("maximum_bytes")
    factor, step = config.get("step_factor"), config.get("step_bytes")
    if isinstance(low, int) and isinstance(high, int):
        kind, value = ("factor", factor) if isinstance(factor, int) else ("bytes", step)
        if isinstance(value, int):
            run.expected_rows = sweep_rows(low, high, value, kind)


JSON_STEPS: tuple[Callable[[dict[str, Any], Run], None], ...] = (
    _json_identity,
    _json_results,
    _json_footers,
    _json_config,
)
"""What :func:`_json_run` reads of a -J document, one part each."""


def _json_run(doc: Any, source: str) -> Run:
    """One nccl-tests -J document (format version 3: config, devices, results, footers)."""
    run = Run(source=source, from_json=True)
    if not isinstance(doc, dict):
        run.malformed.append("the JSON document is not an object")
        return run
    for step in JSON_STEPS:
        step(doc, run)
    return run


def parse_json(text: str, source: str = "") -> Run:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as err:  # an integer past Python's digit limit for int(str)
        run = Run(source=source, from_json=True)
        run.malformed.append(f"JSON number too long to read: {str(err)[:80]}")
        return run
    except RecursionError:
        run = Run(source=source, from_json=True)
        run.malformed.append("JSON nested deeper than Python can read")
        return run
    if _depth(doc) > MAX_JSON_DEPTH:
        run = Run(source=source, from_json=True)
        run.malformed.append(
            f"JSON nested deeper than {MAX_JSON_DEPTH} levels: not nccl-tests -J output"
        )
        return run
    return _json_run(doc, source)


def _depth(doc: Any, level: int = 0) -> int:
    if level > MAX_JSON_DEPTH:
        return level
    if isinstance(doc, dict):
        return max((_depth(v, level + 1) for v in doc.values()), default=level + 1)
    if isinstance(doc, list):
        return max((_depth(v, level + 1) for v in doc), default=level + 1)
    return level
