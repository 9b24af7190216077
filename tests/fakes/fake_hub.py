"""A loopback fake of the Hugging Face Hub API that ``tasks.common.release.hub.push_release`` (and so
``irforge release --push``) talks to, following huggingface_hub 2.x's requests: shared by
tests/cure/test_release_layout.py and tests/cure/test_judge.py."""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from typing import Any

from tests.conftest import fake_key
from tests.fakes.loopback import LoopbackServer, LoopbackService, QuietHandler, presented_auth

HUB_TOKEN = fake_key("hf_", "loopback hub")


class FakeHub(LoopbackService):
    """A loopback server answering the Hub API calls push_release makes (huggingface_hub 2.x):
    create repo, create branch, list files (tree), validate the card's YAML, preupload, commit (NDJSON). Files are kept
    per branch; ``faults`` maps a path fragment to statuses answered before the real answer;
    a wrong token gets 401 with the presented token echoed in the body, as a careless server might.
    """

    thread_name = "fake-hub"

    def __init__(self, token: str) -> None:
        self.token = token
        self.private: dict[str, bool] = {}
        self.branches: dict[str, dict[str, dict[str, bytes]]] = {}  # repo -> branch -> path -> bytes
        self.commits: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.faults: dict[str, list[tuple[int, dict[str, str]]]] = {}
        self._listen(LoopbackServer, _Handler)

    def answer(self, request: QuietHandler) -> None:
        path, _ = request.split_url()
        headers, body = request.read_raw()
        self.requests.append((request.command, path))
        for fragment, statuses in self.faults.items():
            if fragment in path and statuses:
                status, extra = statuses.pop(0)
                return request.send_json(status, {"error": "injected"}, extra)
        presented = presented_auth(headers, f"Bearer {self.token}")
        if presented is not None:
            return request.send_json(
                401, {"error": f"Invalid credentials in Authorization header: {presented}"}
            )
        if path == "/api/validate-yaml":  # create_commit checks the card's front matter first
            return request.send_json(200, {})
        if path == "/api/repos/create":
            data = json.loads(body)
            repo = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
            if repo not in self.branches:
                self.branches[repo] = {"main": {".gitattributes": b"*.jsonl filter=lfs\n"}}
                self.private[repo] = data.get("visibility", "public") == "private" or bool(
                    data.get("private")
                )
            return request.send_json(200, {"url": f"{self.url}/datasets/{repo}", "name": repo})
        match = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/(branch|tree|preupload|commit)/([^/]+)/?", path)
        if not match or match[1] not in self.branches:
            return request.send_json(404, {"error": "Repository not found"})
        repo, action, revision = match[1], match[2], urllib.parse.unquote(match[3])
        branches = self.branches[repo]
        if action == "branch":
            branches.setdefault(revision, dict(branches["main"]))
            return request.send_json(200, {})
        if revision not in branches:
            return request.send_json(404, {"error": "Revision not found"})
        files = branches[revision]
        if action == "tree":
            entries = [
                {"type": "file", "path": p, "size": len(b), "oid": "0" * 40} for p, b in sorted(files.items())
            ]
            return request.send_json(200, entries)
        if action == "preupload":
            wanted = json.loads(body)["files"]
            return request.send_json(
                200,
                {
                    "files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in wanted
                    ]
                },
            )
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        added = {
            line["value"]["path"]: base64.b64decode(line["value"]["content"])
            for line in lines
            if line["key"] == "file"
        }
        deleted = [line["value"]["path"] for line in lines if line["key"] == "deletedFile"]
        for p in deleted:
            files.pop(p, None)
        files.update(added)
        oid = f"{len(self.commits) + 1:040x}"
        self.commits.append(
            {"branch": revision, "message": header["summary"], "added": added, "deleted": deleted}
        )
        return request.send_json(
            200, {"commitUrl": f"{self.url}/datasets/{repo}/commit/{oid}", "commitOid": oid}
        )


class _Handler(QuietHandler):
    server: LoopbackServer

    def _handle(self) -> None:
        self.server.fake.answer(self)
