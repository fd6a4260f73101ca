"""Python SDK `mcp` 1.x doing the whole OAuth dance with its default OAuth support
(`OAuthClientProvider`, issue 32) against mcp-taskd as a protected resource, with a real
authorization server (oauth_idp.mjs: oauth2-mock-server, headless) as the issuer:

1. the first request gets 401; the SDK reads the protected-resource metadata it names,
   the issuer's metadata, and gets a token by authorization code + PKCE for our URL (the
   redirect is scripted: the authorization server redirects at once, and the callback
   reads the code off that redirect);
2. it calls a tool and creates a 2025-11-25 task;
3. once its token has expired (the issuer says it lasts 2 s), the next request refreshes
   it, and the new token reads the same task back: tasks belong to the person, not the
   token;
4. step-up: a tool needing a scope the token lacks answers 403 insufficient_scope; the
   SDK gets a token with that scope and the call succeeds.

Usage: python python_sdk1_oauth.py BINARY (the py1 venv of .ci/interop-setup.sh), with
MCP_TASKD_NODE (node) and MCP_TASKD_IDP (oauth_idp.mjs, in a folder where
oauth2-mock-server is installed)."""

import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import anyio
import httpx
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.types import CallToolResult

NAME = "python-sdk-1.x-oauth"
warnings.filterwarnings("ignore", category=DeprecationWarning)
REDIRECT_URI = "http://127.0.0.1:9/callback"


class MemoryStorage(TokenStorage):
    """A host's token store, with the client registered beforehand (the issuer has no
    dynamic registration)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client = OAuthClientInformationFull(
            client_id=NAME, redirect_uris=[REDIRECT_URI], token_endpoint_auth_method="none"
        )

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class ScriptedBrowser:
    """The user's browser: follows the authorization URL to its redirect and hands the
    code and state on to the SDK's callback."""

    def __init__(self) -> None:
        self.redirect: str | None = None
        self.logins = 0

    async def open(self, authorization_url: str) -> None:
        async with httpx.AsyncClient() as browser:
            answer = await browser.get(authorization_url, follow_redirects=False)
        assert answer.status_code in (302, 303), f"authorize: HTTP {answer.status_code} {answer.text}"
        self.redirect = answer.headers["location"]
        self.logins += 1

    async def callback(self) -> tuple[str, str | None]:
        assert self.redirect and self.redirect.startswith(REDIRECT_URI), f"redirect: {self.redirect}"
        query = parse_qs(urlparse(self.redirect).query)
        return query["code"][0], query.get("state", [None])[0]


class Issuer:
    """oauth_idp.mjs, started with node; its GRANT lines are read as they come."""

    def __init__(self) -> None:
        node = os.environ.get("MCP_TASKD_NODE", "node")
        self.process = subprocess.Popen(
            [node, os.environ["MCP_TASKD_IDP"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "EXPIRES_IN": "2"},
        )
        line = self.process.stdout.readline()
        assert line.startswith("ISSUER "), f"issuer said {line!r}"
        self.url = line.split()[1]

    def grants(self, count: int) -> list[str]:
        """The next `count` grants, as `grant_type scope`."""
        return [self.process.stdout.readline().strip().removeprefix("GRANT ") for _ in range(count)]

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(10)


def start_server(binary: str, work: Path, issuer: str) -> tuple[subprocess.Popen, str]:
    (work / "config.toml").write_text(
        f'[auth.oauth]\nissuer = "{issuer}"\nscopes_supported = ["mcp:use"]\n\n'
        "[[tools]]\n"
        'name = "guarded"\ndescription = "needs deploy:write"\ntask_policy = "inline"\n'
        'scopes = ["deploy:write"]\n'
        'command = ["/bin/sh", "-c", "cat >/dev/null; '
        'echo \'{\\"result\\": {\\"content\\": [{\\"type\\": \\"text\\", \\"text\\": \\"deployed\\"}]}}\'"]\n'
    )
    server = subprocess.Popen(
        [binary, "serve", "--config", str(work / "config.toml"), "--listen", "127.0.0.1:0",
         "--data-dir", str(work / "data")],
        stdout=subprocess.PIPE,
        text=True,
    )
    for line in server.stdout:
        match = re.search(r"listening on (http:\S+)", line)
        if match:
            return server, match.group(1)
    raise AssertionError(f"mcp-taskd exited with {server.wait()}")


async def flow(url: str, issuer: Issuer) -> None:
    browser = ScriptedBrowser()
    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(redirect_uris=[REDIRECT_URI], client_name=NAME),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )
    with anyio.fail_after(30):
        async with httpx.AsyncClient(auth=provider, timeout=20) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await steps(session, issuer, browser, storage, provider)


async def steps(session, issuer, browser, storage, provider) -> None:
    # 1. The dance, on the first request.
    await session.initialize()
    assert browser.logins == 1, f"{browser.logins} authorizations"
    assert issuer.grants(1) == ["authorization_code mcp:use"], "the first grant"
    first_token = storage.tokens.access_token

    # 2. A tool, and a task.
    echo = await session.call_tool("echo", {"text": "hello"})
    assert not echo.isError and echo.content[0].text == "hello", f"echo: {echo}"
    created = await session.experimental.call_tool_as_task(
        "generate_report", {"topic": "oauth", "sections": 1}
    )
    task_id = created.task.taskId

    # 3. The token runs out (by the client's clock: the issuer said 2 s); the next
    # request refreshes it, and the refreshed token reaches the same task.
    deadline = time.monotonic() + 10
    while provider.context.is_token_valid():
        assert time.monotonic() < deadline, "the token never expired"
        await anyio.sleep(0.1)
    status = await session.experimental.get_task(task_id)
    assert issuer.grants(1) == ["refresh_token mcp:use"], "a refresh"
    assert storage.tokens.access_token != first_token, "the refresh gave a new token"
    assert status.taskId == task_id, f"tasks/get after the refresh: {status}"
    async for status in session.experimental.poll_task(task_id):
        pass
    assert status.status == "completed", f"task ended {status.status}: {status.statusMessage}"
    report = await session.experimental.get_task_result(task_id, CallToolResult)
    assert report.structuredContent["topic"] == "oauth", f"task result: {report}"

    # 4. Step-up: 403 insufficient_scope, a new authorization with that scope, the call
    # goes through.
    guarded = await session.call_tool("guarded", {})
    assert browser.logins == 2, f"{browser.logins} authorizations: no step-up"
    assert issuer.grants(1) == ["authorization_code deploy:write"], "the step-up grant"
    assert not guarded.isError and guarded.content[0].text == "deployed", f"guarded: {guarded}"


def main() -> int:
    verdict = f"PASS {NAME}"
    with tempfile.TemporaryDirectory(prefix="mcp-taskd-oauth-") as work:
        issuer = Issuer()
        server = None
        try:
            server, url = start_server(sys.argv[1], Path(work), issuer.url)
            anyio.run(flow, url, issuer)
        except BaseException as error:  # a timeout, an assertion, or the SDK's own error group
            verdict = f"FAIL {NAME}: {describe(error)}"
        finally:
            if server:
                server.terminate()
                try:
                    server.wait(5)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            issuer.stop()
    print(verdict)
    return 0 if verdict.startswith("PASS") else 1


def describe(error: BaseException) -> str:
    """The innermost cause, on one line: SDK failures arrive wrapped in exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}".replace("\n", " ")[:300]


if __name__ == "__main__":
    sys.exit(main())
