"""A loopback fake of the Hugging Face Hub API that ``tasks.common.release.hub.push_release`` (and so
``irforge release --push``) talks to, following huggingface_hub 2.x's requests: shared by
tests/cure/test_release_layout.py and tests/cure/test_judge.py."""

from __future__ import annotations

from typing import Any

from tests.conftest import fake_key

HUB_TOKEN = fake_key("hf_", "loopback hub")


class FakeHub:
    """A loopback server answering the Hub API calls push_release makes (huggingface_hub 2.x):
    create repo, create branch, list files (tree), validate the card's YAML, preupload, commit (NDJSON). Files are kept
    per branch; ``faults`` maps a path fragment to statuses answered before the real answer;
    a wrong token gets 401 with the presented token echoed in the body, as a careless server might.
    """

    def __init__(self, token: str) -> None:
        from tests.fakes.loopback import LoopbackServer, LoopbackService, QuietHandler

        self.token = token
        self.private: dict[str, bool] = {}
        self.branches: dict[str, dict[str, dict[str, bytes]]] = {}  # repo -> branch -> path -> bytes
        self.commits: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.faults: dict[str, list[tuple[int, dict[str, str]]]] = {}
        hub = self

        class Handler(QuietHandler):
            def _handle(self) -> None:
                hub.answer(self)

        class Service(LoopbackService):
            thread_name = "fake-hub"

        self.service = Service()
        self.service._listen(LoopbackServer, Handler)

    @property
    def url(self) -> str:
        return self.service.url

    def __enter__(self) -> FakeHub:
        self.service.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.service.stop()

    def answer(self, request: Any) -> None:
        import base64
        import json
        import re
        import urllib.parse

        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        path = urllib.parse.urlsplit(request.path).path
        self.requests.append((request.command, path))
        for fragment, statuses in self.faults.items():
            if fragment in path and statuses:
                status, headers = statuses.pop(0)
                return self.send(request, status, {"error": "injected"}, headers)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            presented = request.headers.get("Authorization", "")
            return self.send(
                request, 401, {"error": f"Invalid credentials in Authorization header: {presented}"}
            )
        if path == "/api/validate-yaml":  # create_commit checks the card's front matter first
            return self.send(request, 200, {})
        if path == "/api/repos/create":
            data = json.loads(body)
            repo = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
            if repo not in self.branches:
                self.branches[repo] = {"main": {".gitattributes": b"*.jsonl filter=lfs\n"}}
                self.private[repo] = data.get("visibility", "public") == "private" or bool(
                    data.get("private")
                )
            return self.send(request, 200, {"url": f"{self.url}/datasets/{repo}", "name": repo})
        match = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/(branch|tree|preupload|commit)/([^/]+)/?", path)
        if not match or match[1] not in self.branches:
            return self.send(request, 404, {"error": "Repository not found"})
        repo, action, revision = match[1], match[2], urllib.parse.unquote(match[3])
        branches = self.branches[repo]
        if action == "branch":
            branches.setdefault(revision, dict(branches["main"]))
            return self.send(request, 200, {})
        if revision not in branches:
            return self.send(request, 404, {"error": "Revision not found"})
        files = branches[revision]
        if action == "tree":
            entries = [
                {"type": "file", "path": p, "size": len(b), "oid": "0" * 40} for p, b in sorted(files.items())
            ]
            return self.send(request, 200, entries)
        if action == "preupload":
            wanted = json.loads(body)["files"]
            return self.send(
                request,
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
        return self.send(
            request, 200, {"commitUrl": f"{self.url}/datasets/{repo}/commit/{oid}", "commitOid": oid}
        )

    @staticmethod
    def send(request: Any, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        import json

        data = json.dumps(payload).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)
