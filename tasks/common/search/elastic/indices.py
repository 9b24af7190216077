"""The backend's concrete index and its alias on the server: create, load settings, finish, look up.

A load goes into ``<prefix>-<suffix>``; :meth:`ManagedIndex.finish` restores the serving
settings, refreshes and moves the alias ``<prefix>`` to it in one ``_aliases`` request.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from elasticsearch import ApiError, NotFoundError, TransportError

from tasks.common.search.elastic.dsl import VECTOR_FIELD, index_body, load_settings, serving_settings
from tasks.common.search.elastic.errors import Server
from tasks.common.search.elastic.options import ElasticsearchOptions
from tasks.common.search.port import SearchError

log = logging.getLogger(__name__)


class ManagedIndex:
    """One concrete index (``index``) and the alias (``alias``) it is published under.

    ``created``: the index exists (an index opened for searching, or one this object made);
    ``loading``: it has the bulk-load settings."""

    def __init__(
        self,
        server: Server,
        index: str,
        alias: str,
        dims: int,
        config: ElasticsearchOptions,
        *,
        created: bool,
    ) -> None:
        self.server, self.index, self.alias, self.dims, self.config = server, index, alias, dims, config
        self.created = created
        self.loading = False

    def ensure(self) -> None:
        """Create the index (deleting one of the same name left by an earlier load)."""
        if self.created:
            return
        o, es = self.config, self.server.es
        if es.indices.exists(index=self.index):
            log.warning(
                "index %s exists from an earlier load with this fingerprint: rebuilding it", self.index
            )
            es.indices.delete(index=self.index)
        body = index_body(
            self.dims, o.index_type, o.shards, analyzer=o.analyzer, vectors_in_source=o.vectors_in_source
        )
        es.indices.create(index=self.index, settings=body["settings"], mappings=body["mappings"])
        self.created = True
        self.loading = True
        log.info("created index %s (%s, %d dims, %d shards)", self.index, o.index_type, self.dims, o.shards)

    def begin_load(self) -> None:
        try:
            if not self.created:
                self.ensure()
            elif not self.loading:
                self.server.es.indices.put_settings(index=self.index, settings=load_settings())
                self.loading = True
        except (ApiError, TransportError) as err:
            raise self.server.error(f"preparing {self.index} for a bulk load", err) from None

    def finish(self) -> None:
        """Restore serving settings, refresh, optionally force-merge, and move the alias here."""
        o, es = self.config, self.server.es
        try:
            self.ensure()
            if self.loading:
                es.indices.put_settings(
                    index=self.index, settings=serving_settings(o.replicas, o.refresh_interval)
                )
                self.loading = False
            es.indices.refresh(index=self.index)
            if o.force_merge_segments is not None:
                es.indices.forcemerge(index=self.index, max_num_segments=o.force_merge_segments)
            previous = [i for i in self.alias_targets() if i != self.index]
            actions: list[Mapping[str, Any]] = [
                {"remove": {"index": i, "alias": self.alias}} for i in previous
            ]
            actions.append({"add": {"index": self.index, "alias": self.alias}})
            es.indices.update_aliases(actions=actions)
            log.info("alias %s -> %s (was %s)", self.alias, self.index, ", ".join(previous) or "unset")
            if o.drop_previous:
                for old in previous:
                    if old.startswith(f"{self.alias}-"):
                        es.indices.delete(index=old)
        except (ApiError, TransportError) as err:
            raise self.server.error(f"finishing the load of {self.index}", err) from None

    def count(self) -> int:
        if not self.created:
            return 0
        try:
            return int(self.server.es.count(index=self.index).body["count"])
        except (ApiError, TransportError) as err:
            raise self.server.error(f"counting {self.index}", err) from None

    def drop(self) -> None:
        """Delete the index (its alias goes with it); a missing index is fine."""
        try:
            self.server.es.indices.delete(index=self.index, ignore_unavailable=True)
        except (ApiError, TransportError) as err:
            raise self.server.error(f"deleting {self.index}", err) from None
        self.created = False
        self.loading = False

    def alias_targets(self) -> list[str]:
        try:
            return sorted(self.server.es.indices.get_alias(name=self.alias).body)
        except NotFoundError:
            return []

    def resolve(self, name: str, fingerprint: str | None) -> tuple[str, str]:
        """(index, alias) of an index built earlier, named by alias, by index or by fingerprint."""
        where = self.server.where
        if fingerprint:
            return self.index, name
        try:
            targets = self.alias_targets()
            if len(targets) == 1:
                return targets[0], name
            if targets:
                raise SearchError(
                    f"alias {name!r} on Elasticsearch at {where} points at {len(targets)} indices "
                    f"({', '.join(targets)}): open one of them by name"
                )
            if self.server.es.indices.exists(index=name):
                built = re.fullmatch(r"(.+)-[a-z0-9]{16}", name)
                return name, built.group(1) if built else name
        except (ApiError, TransportError) as err:
            raise self.server.error(f"looking up {name}", err) from None
        raise SearchError(f"Elasticsearch at {where} has no index or alias {name!r}: build the index first")

    def check_mapping(self, index: str) -> None:
        """SearchError unless ``index`` has a ``vector`` dense_vector of ``dims`` dimensions."""
        where = self.server.where
        try:
            body = self.server.es.indices.get_mapping(index=index).body
        except NotFoundError:
            raise SearchError(
                f"Elasticsearch at {where} has no index {index!r}: build it first (a load with this "
                "fingerprint), or open the alias"
            ) from None
        except (ApiError, TransportError) as err:
            raise self.server.error(f"reading the mapping of {index}", err) from None
        entry: Mapping[str, Any] = next(iter(body.values()), {})
        vector: Mapping[str, Any] = entry.get("mappings", {}).get("properties", {}).get(VECTOR_FIELD, {})
        if vector.get("type") != "dense_vector" or vector.get("dims") != self.dims:
            raise SearchError(
                f"index {index!r} on Elasticsearch at {where} has no {VECTOR_FIELD!r} dense_vector "
                f"of {self.dims} dims (found {vector.get('type')!r} with dims {vector.get('dims')!r}): "
                "it was built with another encoder"
            )
