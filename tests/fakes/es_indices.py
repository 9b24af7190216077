"""The fake Elasticsearch's indices: documents, settings, mappings and aliases, and the
index, alias and bulk APIs over them (``tests/fakes/es_server.py`` routes to these)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.loopback import Reply


@dataclass
class ItemFault:
    """A per-item error (a bulk document or an msearch query) answered ``times`` (None: always)."""

    status: int
    error_type: str
    reason: str
    times: int | None  # None: every attempt


@dataclass
class FakeIndex:
    name: str
    settings: dict[str, Any]  # flat keys without the "index." prefix
    mappings: dict[str, Any]
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    visible: dict[str, dict[str, Any]] = field(default_factory=dict)  # as of the last refresh
    refreshes: int = 0
    force_merges: int = 0

    @property
    def properties(self) -> dict[str, Any]:
        props = self.mappings.get("properties", {})
        return props if isinstance(props, dict) else {}


def es_error(status: int, error_type: str, reason: str, **extra: Any) -> dict[str, Any]:
    """An error body in the server's shape."""
    cause = {"type": error_type, "reason": reason, **extra}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def es_reply(status: int, error_type: str, reason: str, **extra: Any) -> Reply:
    """An error answer in the server's shape (see :func:`es_error`)."""
    return Reply(status, es_error(status, error_type, reason, **extra))


def take_item_fault(faults: dict[str, ItemFault], key: str) -> ItemFault | None:
    """The fault set for ``key``, if any (counting it)."""
    fault = faults.get(key)
    if fault is None:
        return None
    if fault.times is not None:
        fault.times -= 1
        if fault.times <= 0:
            del faults[key]
    return fault


def _flatten_settings(body: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            out[prefix.removeprefix("index.")] = value

    walk("", body or {})
    return out


def _acknowledged_shards(targets: list[FakeIndex]) -> dict[str, Any]:
    return {"_shards": {"total": len(targets), "successful": len(targets), "failed": 0}}


def _bulk_fail(status: int, error_type: str, reason: str, **extra: Any) -> dict[str, Any]:
    return {"status": status, "error": {"type": error_type, "reason": reason, **extra}}


def _vector_error(key: str, doc_id: str, vector: list[float], spec: dict[str, Any]) -> dict[str, Any] | None:
    """The bulk item error for a ``dense_vector`` value of the wrong dims or zero under cosine."""
    if len(vector) != spec.get("dims"):
        return _bulk_fail(
            400,
            "document_parsing_exception",
            f"[1:1] failed to parse field [{key}] of type [dense_vector] in document with id '{doc_id}'",
            caused_by={
                "type": "illegal_argument_exception",
                "reason": f"The [dense_vector] field [{key}] in doc [{doc_id}] has a different number "
                f"of dimensions [{len(vector)}] than defined in the mapping [{spec.get('dims')}]",
            },
        )
    if spec.get("similarity") == "cosine" and not any(vector):
        return _bulk_fail(
            400,
            "document_parsing_exception",
            f"[1:1] failed to parse field [{key}] of type [dense_vector]",
            caused_by={
                "type": "illegal_argument_exception",
                "reason": "The [cosine] similarity does not support vectors with zero magnitude.",
            },
        )
    return None


class IndexApi:
    """The index, alias and bulk APIs, mixed into the fake server (which holds the state)."""

    indices: dict[str, FakeIndex]
    aliases: dict[str, set[str]]
    _item_faults: dict[str, ItemFault]
    _lock: threading.RLock

    def resolve(self, name: str) -> list[FakeIndex]:
        with self._lock:
            if name in self.indices:
                return [self.indices[name]]
            return [self.indices[i] for i in sorted(self.aliases.get(name, ()))]

    def _missing(self, name: str) -> Reply:
        return es_reply(404, "index_not_found_exception", f"no such index [{name}]", index=name)

    def _index_op(self, method: str, name: str, query: dict[str, list[str]], body: Any) -> Any:
        if method == "HEAD":
            if not self.resolve(name):
                raise Reply(404)
            return None
        if method == "PUT":
            if name in self.indices or name in self.aliases:
                raise es_reply(400, "resource_already_exists_exception", f"index [{name}] already exists")
            body = body or {}
            settings = _flatten_settings(body.get("settings"))
            self.indices[name] = FakeIndex(name, settings, body.get("mappings") or {})
            return {"acknowledged": True, "shards_acknowledged": True, "index": name}
        if method == "DELETE":
            if name not in self.indices:
                if query.get("ignore_unavailable") == ["true"]:
                    return {"acknowledged": True}
                raise self._missing(name)
            del self.indices[name]
            self.aliases = {a: m - {name} for a, m in self.aliases.items() if m - {name}}
            return {"acknowledged": True}
        raise es_reply(405, "illegal_argument_exception", f"{method} /{name} not allowed")

    def _index_api(self, method: str, name: str, api: str, body: Any) -> Any:
        targets = self.resolve(name)
        if not targets:
            raise self._missing(name)
        if api == "_settings" and method == "PUT":
            for index in targets:
                for key, value in _flatten_settings(body).items():
                    if value is None:
                        index.settings.pop(key, None)
                    else:
                        index.settings[key] = value
            return {"acknowledged": True}
        if api == "_settings" and method == "GET":
            return {i.name: {"settings": {"index": dict(i.settings)}} for i in targets}
        if api == "_mapping" and method == "GET":
            return {i.name: {"mappings": i.mappings} for i in targets}
        if api == "_refresh" and method in ("POST", "GET"):
            for index in targets:
                index.visible = dict(index.docs)
                index.refreshes += 1
            return _acknowledged_shards(targets)
        if api == "_forcemerge" and method == "POST":
            for index in targets:
                index.force_merges += 1
            return _acknowledged_shards(targets)
        if api == "_count" and method in ("GET", "POST"):
            return {"count": sum(len(i.visible) for i in targets), "_shards": {"total": len(targets)}}
        raise es_reply(400, "illegal_argument_exception", f"no handler for {method} {api}")

    def _get_alias(self, alias: str) -> Any:
        members = sorted(self.aliases.get(alias, ()))
        if not members:
            raise Reply(404, {"error": f"alias [{alias}] missing", "status": 404})
        return {m: {"aliases": {alias: {}}} for m in members}

    def _update_aliases(self, body: Any) -> Any:
        actions = (body or {}).get("actions") or []
        staged = {a: set(m) for a, m in self.aliases.items()}
        for action in actions:
            (verb, spec), *_ = action.items()
            index, alias = spec["index"], spec["alias"]
            if index not in self.indices:
                raise self._missing(index)
            if verb == "add":
                if alias in self.indices:
                    raise es_reply(
                        400,
                        "invalid_alias_name_exception",
                        f"Invalid alias name [{alias}]: an index or data stream exists with the same name",
                    )
                staged.setdefault(alias, set()).add(index)
            elif verb == "remove":
                if index not in staged.get(alias, set()):
                    raise es_reply(404, "aliases_not_found_exception", f"aliases [{alias}] missing")
                staged[alias].discard(index)
            else:
                raise es_reply(400, "illegal_argument_exception", f"unknown action [{verb}]")
        self.aliases = {a: m for a, m in staged.items() if m}  # all actions apply together, or none
        return {"acknowledged": True, "errors": False}

    def _bulk(self, default_index: str | None, lines: Any) -> Any:
        if not isinstance(lines, list) or len(lines) % 2:
            raise es_reply(400, "illegal_argument_exception", "malformed bulk body")
        items = []
        for action, source in zip(lines[0::2], lines[1::2], strict=True):
            (op, meta), *_ = action.items()
            name = meta.get("_index", default_index)
            doc_id = str(meta.get("_id"))
            result = self._bulk_item(op, name, doc_id, source)
            items.append({op: {"_index": name, "_id": doc_id, **result}})
        errors = any(next(iter(i.values()))["status"] >= 300 for i in items)
        return {"took": 1, "errors": errors, "items": items}

    def _bulk_item(self, op: str, name: str | None, doc_id: str, source: Any) -> dict[str, Any]:
        fault = take_item_fault(self._item_faults, doc_id)
        if fault is not None:
            return _bulk_fail(fault.status, fault.error_type, fault.reason)
        if op != "index":
            return _bulk_fail(400, "illegal_argument_exception", f"the fake supports only index, not [{op}]")
        index = self.indices.get(name or "")
        if index is None:
            return _bulk_fail(404, "index_not_found_exception", f"no such index [{name}]")
        props = index.properties
        if index.mappings.get("dynamic") == "strict":
            for key in source:
                if key not in props:
                    return _bulk_fail(
                        400,
                        "strict_dynamic_mapping_exception",
                        f"[1:2] mapping set to strict, dynamic introduction of [{key}] within [_doc] is not allowed",
                    )
        for key, spec in props.items():
            if spec.get("type") == "dense_vector" and key in source:
                error = _vector_error(key, doc_id, source[key], spec)
                if error is not None:
                    return error
        created = doc_id not in index.docs
        index.docs[doc_id] = dict(source)
        return {
            "status": 201 if created else 200,
            "result": "created" if created else "updated",
            "_version": 1,
        }
