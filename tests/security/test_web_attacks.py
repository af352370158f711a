"""Attacks on the dashboard, performed for real against the app and a real `serve`: each
must fail, and what it aimed at must be unchanged.

- path traversal in every URL parameter, towards a run record outside the roots that holds
  a secret (reached by `..`, by percent-encoding, by an absolute path, by a symlink);
- a state-changing POST without the CSRF token, with a wrong one, from another origin;
- a non-loopback bind reached without the token; a loopback bind reached by another host name;
- agent and job text holding `<script>`, an event handler and terminal escapes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers.attacks import held
from tests.helpers.tasks import fingerprint, run_cli
from tests.helpers.web import EVIL, Made, client, finished_exec, finished_task, serve, task_spec

pytestmark = pytest.mark.integration

SECRET = "SECRET-OUTSIDE-THE-ROOTS"

GET_ROUTES = (
    *("/task/{}", "/stream/task/{}", "/exec/{}", "/data/exec/{}", "/stream/exec/{}"),
    *("/plan/{}", "/stream/plan/{}", "/part/exec/pending/{}", "/batch/{}"),
)
POST_ROUTES = (
    *("/act/task/check/{}", "/act/task/reject/{}", "/act/exec/stop/{}"),
    *("/act/exec/answer/{}", "/act/plan/continue/{}", "/act/plan/amend/{}"),
)
TRAVERSALS = (
    "0/../outside/out/fix-calc",
    "0/%2e%2e/outside/out/fix-calc",
    "0/..%2foutside%2fout%2ffix-calc",
    "0//etc/passwd",
    "0/%2fetc%2fpasswd",
    "0/link/out/fix-calc",  # a symlink inside the root to the record outside
    "0/link/exec1",
    "1/out/fix-calc",  # no second root
    "-1/out/fix-calc",
    "0/out/fix-calc%00",
    "0/out/..%5c..%5coutside",
)


@pytest.fixture
def outside(made: Made) -> Path:
    """A copy of the shared runs outside the root, marked with a secret, and a link to it."""
    target = made.runs.parent / "outside"
    if not target.exists():
        shutil.copytree(made.runs, target, symlinks=True)
        for path in (target / "exec1" / "stdout.log", target / "out" / "fix-calc.verifier.log"):
            path.write_text(path.read_text() + SECRET + "\n")
    link = made.runs / "link"
    if not link.is_symlink():
        os.symlink(target, link)
    return target


def test_path_traversal_in_every_url_parameter_reads_nothing(made: Made, outside: Path) -> None:
    http, guard = client(made.runs)
    before = fingerprint(outside)
    for route in GET_ROUTES + POST_ROUTES:
        for attempt in TRAVERSALS:
            url = route.format(attempt)
            if route in POST_ROUTES:
                response = http.post(url, headers={"X-CSRF-Token": guard.csrf})
            else:
                response = http.get(url)
            held(f"traversal {url}", response.status_code == 404 and SECRET not in response.text)
    for attempt in TRAVERSALS:
        response = http.get("/compare", params={"run": attempt.replace("%2f", "/")})
        held(f"traversal /compare?run={attempt}", SECRET not in response.text)
        response = http.get("/compare", params={"batch": attempt.replace("%2f", "/")})
        held(f"traversal /compare?batch={attempt}", SECRET not in response.text)
    for static in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/..%2fapp.py"):
        response = http.get(static)
        held(
            f"traversal {static}", response.status_code == 404 and "create_app" not in response.text
        )
    held("the record outside is unchanged", fingerprint(outside) == before)


def _raw_get(url: str, path: str, headers: str = "") -> tuple[int, bytes]:
    """A request whose target is sent byte for byte (no client normalizes `..` away)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as conn:
        head = f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{headers}"
        conn.sendall(f"{head}Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def test_raw_dot_segments_and_foreign_hosts_against_a_real_server(
    made: Made, outside: Path
) -> None:
    with serve(made.runs) as served:
        for path in (
            "/task/0/../outside/out/fix-calc",
            "/exec/0/../outside/exec1",
            "/data/exec/0/../../../../etc",
            "/static/../../../../etc/passwd",
            "/static/../templates/base.html",
        ):
            code, body = _raw_get(served.url, path)
            held(f"raw {path}", code in (400, 404) and SECRET.encode() not in body)
            held(f"raw {path}: no file", b"root:x:0" not in body and b"{% block" not in body)
        code, body = _raw_get(served.url, "/", headers="")
        held("the real server answers on loopback", code == 200)
        parts = urlsplit(served.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
            answer = conn.recv(65536)
        held("a foreign Host name (DNS rebinding) is refused", answer.startswith(b"HTTP/1.1 421"))


def test_a_post_without_a_valid_csrf_token_changes_nothing(tmp_path: Path) -> None:
    runs = finished_task(tmp_path)
    source = tmp_path / "source"
    before_source, before_record = fingerprint(source), fingerprint(runs / "out")
    http, guard = client(runs)
    url = "/act/task/apply/0/out/fix-calc"
    attempts = {
        "no token": {},
        "a wrong token": {"X-CSRF-Token": "x" + guard.csrf[1:]},
        "an empty token": {"X-CSRF-Token": ""},
        "another origin": {"X-CSRF-Token": guard.csrf, "Origin": "http://attacker.example"},
    }
    for name, headers in attempts.items():
        response = http.post(url, headers=headers)
        held(f"POST with {name}", response.status_code == 403, response.status_code)
    form = http.post(url, data={"csrf": guard.csrf, "X-CSRF-Token": guard.csrf})
    held("the token in a form field", form.status_code == 403)
    held("the source is unchanged", fingerprint(source) == before_source)
    held("the record is unchanged", fingerprint(runs / "out") == before_record)


def _status(url: str, cookie: str = "") -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.headers.get("Set-Cookie", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Set-Cookie", "")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_a_non_loopback_bind_needs_the_token(made: Made) -> None:
    with serve(made.runs, host="0.0.0.0") as served:
        token = urlsplit(served.url).query.removeprefix("token=")
        held("the token is printed once", len(token) >= 32 and "token" in served.first_lines[0])
        port = urlsplit(served.url).port
        base = f"http://127.0.0.1:{port}"
        for path in ("/", "/task/0/out/fix-calc", "/data/exec/0/exec1", "/static/app.js"):
            code, _ = _status(base + path)
            held(f"{path} without the token", code == 401, code)
        code, _ = _status(f"{base}/?token=wrong")
        held("a wrong token", code == 401, code)
        code, _ = _status(base + "/", cookie="code_runner_token=wrong")
        held("a wrong cookie", code == 401, code)
        code, set_cookie = _status(f"{base}/?token={token}")
        held("the token signs in", code == 303 and "HttpOnly" in set_cookie, (code, set_cookie))
        held("the cookie is SameSite=Strict", "SameSite=Strict" in set_cookie)
        code, _ = _status(base + "/task/0/out/fix-calc", cookie=set_cookie.split(";", 1)[0])
        held("with the cookie the page opens", code == 200, code)


def test_agent_and_job_text_is_escaped_and_stripped(tmp_path: Path) -> None:
    spec = task_spec(
        tmp_path,
        [[{"tool": "write_file", "args": {"path": "calc.py", "content": "# " + EVIL + "\n"}}]],
        title=EVIL,
    )
    script = tmp_path / "fix-calc.script.json"
    data = json.loads(script.read_text())
    data["rounds"][0]["response"] = EVIL
    script.write_text(json.dumps(data))
    run_cli("run", str(spec))
    finished_exec(tmp_path, "evil", f"print({EVIL!r})\nprint('loss=1')\n")
    http, _ = client(tmp_path / "runs")
    pages = {
        "runs": http.get("/").text,
        "task": http.get("/task/0/out/fix-calc").text,
        "exec": http.get("/exec/0/evil").text,
        "stream": http.get("/stream/task/0/out/fix-calc").text,
    }
    for name, text in pages.items():
        held(f"{name}: no live <script> from the record", "<script>window.pwned" not in text)
        held(f"{name}: no live event handler", "<img src=x" not in text)
        held(f"{name}: no terminal escape", "\x1b" not in text and "\x07" not in text)
    held("task: the text is shown escaped", "&lt;script&gt;window.pwned=1" in pages["task"])
    held("exec: the text is shown escaped", "&lt;script&gt;window.pwned=1" in pages["exec"])


def test_a_record_file_that_is_a_symlink_out_of_the_root_is_not_read(
    made: Made, outside: Path
) -> None:
    """A run dir under the root whose files point outside: each is left unread."""
    trap = made.runs / "trap"
    shutil.copytree(made.runs / "exec1", trap)
    shutil.copytree(made.runs / "out", trap / "out")
    secret_file = outside / "secret.txt"
    secret_file.write_text(SECRET + "\n" + json.dumps({"state": SECRET}) + "\n")
    for name in ("stdout.log", "stderr.log", "events.jsonl"):
        (trap / name).unlink()
        os.symlink(secret_file, trap / name)
    for name in ("fix-calc.verifier.log", "fix-calc.patch", "fix-calc.response.txt"):
        (trap / "out" / name).unlink()
        os.symlink(secret_file, trap / "out" / name)
    before = fingerprint(outside)
    http, _ = client(made.runs)
    for url in (
        "/exec/0/trap",
        "/data/exec/0/trap",
        "/stream/exec/0/trap",
        "/task/0/trap/out/fix-calc",
        "/compare?run=0/trap",
    ):
        text = http.get(url).text
        held(f"symlinked record files at {url}", SECRET not in text)
    held("the files outside are unchanged", fingerprint(outside) == before)
